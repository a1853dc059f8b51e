"""Sizes of the messages crossing the drafter<->verifier link, in bytes.

MineDraft's driver (the drafter GPU) broadcasts the step's inputs to the verifier group and
the first verifier rank sends the sampler output back point-to-point: per scored position the
sampled id, and the full-vocabulary probabilities and log-probabilities that rejection sampling
on the driver needs (docs/reference/paper.md §4.2). Those two vocab-sized float32 rows dominate,
which is why the return message grows with vocab x batch x (k+1). An EAGLE drafter also needs
the target's hidden states (bf16, one row per position; for a prefill, per prompt token).
The `compact` what-if sends only the sampled id and the target's probability of each draft
token (rejection decided on the verifier side) - hypothetical, not what MineDraft does.
"""

from __future__ import annotations

TOKEN_ID_BYTES = 8      # int64 token ids and positions (vLLM's token_id_dtype)
PROB_BYTES = 4          # float32 probabilities and log-probabilities (V0 sampler output)
SLOT_BYTES = 8          # int64 slot mapping per input token
BLOCK_ID_BYTES = 4      # int32 block-table entries
REQUEST_META_BYTES = 64  # per-request scalars (lengths, flags) [EST]
HEADER_BYTES = 16       # the [size, hidden_size] int64 header of the return message
HIDDEN_BYTES = 2        # bf16 hidden states


def step_inputs_bytes(requests: int, tokens: int, context_tokens: int, block_size: int) -> int:
    """Broadcast of one step's inputs: ids, positions and slots per token, block tables."""
    per_token = 2 * TOKEN_ID_BYTES + SLOT_BYTES
    blocks = context_tokens // block_size + requests
    return tokens * per_token + blocks * BLOCK_ID_BYTES + requests * REQUEST_META_BYTES


def sampler_output_bytes(positions: int, vocab: int, compact: bool = False) -> int:
    """Return message for `positions` scored positions: ids + probs + logprobs over the vocab
    (compact: ids + one probability each)."""
    per_position = TOKEN_ID_BYTES + (PROB_BYTES if compact else 2 * PROB_BYTES * vocab)
    return HEADER_BYTES + positions * per_position


def hidden_state_bytes(rows: int, hidden: int) -> int:
    """Target hidden states an EAGLE drafter reads: bf16 rows of the target's hidden size."""
    return rows * hidden * HIDDEN_BYTES
