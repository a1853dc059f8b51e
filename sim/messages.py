"""The messages crossing the drafter<->verifier link, tensor by tensor, in bytes.

MineDraft's driver (the drafter GPU) broadcasts each step's model inputs to the verifier group
with vLLM's `broadcast_tensor_dict`: the pickled metadata goes through the CPU group (the
driver's host work, sim/execution.py), then every non-empty GPU tensor is its own NCCL broadcast
(minedraft/plugin/distributed/parallel_state.py, `GroupCoordinatorPatch.broadcast_tensor_dict`).
The tensors are vLLM 0.9.2's V0 model input (vllm/worker/model_runner.py,
`ModelInputForGPUWithSamplingMetadata.as_broadcastable_tensor_dict`, with the FlashAttention
metadata of vllm/attention/backends/flash_attn.py): token ids, positions and slots (int64 per
token), sequence and context lengths (int32 per row), the block table (int32 per block), the
query and sequence start offsets (int32, rows + 1) and the sampled positions' indices (int64).

The first verifier rank sends the sampler output back point-to-point, one `send` per tensor
(minedraft/plugin/spec_decode/spec_decode_worker.py, `send_sampler_output_to_driver`; received
in that order by `_recv_sampler_output_from_repr_scorer`, spec_decode/interfaces.py): a
[size, hidden_size] int64 header, the sampled ids, the full-vocabulary probabilities and
log-probabilities that rejection sampling on the driver needs (float32; these two dominate, which
is why the return grows with vocab x batch x (k+1)), the hidden states an EAGLE drafter reads
(bf16), the prefill hidden states' int64 length and, when there are any, those states. A step
with no sampled position sends one 8-byte "nothing" instead.

Each message pays the link's latency of its own. The `compact` what-if sends only the header, the
sampled ids and the target's probability of each draft token (rejection decided on the verifier
side) - hypothetical, not what MineDraft does.

Approximations: the block table is counted as each request's own blocks (vLLM pads it to the
longest request's, a few kB at most), and the per-row tensors count decoding and prefilling
requests alike.
"""

from __future__ import annotations

TOKEN_ID_BYTES = 8      # int64 token ids, positions and slot mapping (torch.long)
INT32_BYTES = 4         # int32 lengths, start offsets and block-table entries
PROB_BYTES = 4          # float32 probabilities and log-probabilities (V0 sampler output)
HEADER_BYTES = 16       # the [size, hidden_size] int64 header of the return message
LENGTH_BYTES = 8        # the prefill hidden states' int64 length
NOTHING_BYTES = 8       # zeros(2, uint32): a step that sampled nothing
HIDDEN_BYTES = 2        # bf16 hidden states


def step_inputs(rows: int, tokens: int, sampled: int, context_tokens: int,
                block_size: int) -> tuple[int, ...]:
    """The GPU tensors of one step's input broadcast, in bytes, empty ones left out (vLLM skips
    them): `rows` requests (decoding and prefilling) computing `tokens` positions, `sampled` of
    them sampled, over `context_tokens` cached tokens."""
    blocks = context_tokens // block_size + rows
    sizes = (tokens * TOKEN_ID_BYTES,            # input_tokens
             tokens * TOKEN_ID_BYTES,            # input_positions
             tokens * TOKEN_ID_BYTES,            # slot_mapping
             rows * INT32_BYTES,                 # seq_lens_tensor
             rows * INT32_BYTES,                 # context_lens_tensor
             blocks * INT32_BYTES if rows else 0,  # block_tables
             (rows + 1) * INT32_BYTES if rows else 0,  # query_start_loc
             (rows + 1) * INT32_BYTES if rows else 0,  # seq_start_loc
             sampled * TOKEN_ID_BYTES)           # selected_token_indices
    return tuple(b for b in sizes if b)


def sampler_output(positions: int, vocab: int, hidden: int = 0, prefill_tokens: int = 0,
                   compact: bool = False) -> tuple[int, ...]:
    """The sends of the sampler output for `positions` sampled positions, in order: header, ids,
    probabilities and log-probabilities over the vocab (compact: one probability each), hidden
    states when the drafter reads them (`hidden` > 0: its width), then the prefill hidden
    states' length and, for `prefill_tokens` > 0, those states."""
    if not positions:
        return (NOTHING_BYTES,)
    ids = positions * TOKEN_ID_BYTES
    if compact:
        sends = [HEADER_BYTES, ids, positions * PROB_BYTES]
    else:
        rows = positions * vocab * PROB_BYTES
        sends = [HEADER_BYTES, ids, rows, rows]
    if hidden:
        sends.append(positions * hidden * HIDDEN_BYTES)
    sends.append(LENGTH_BYTES)
    if hidden and prefill_tokens:
        sends.append(prefill_tokens * hidden * HIDDEN_BYTES)
    return tuple(sends)
