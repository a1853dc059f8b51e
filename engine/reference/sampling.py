"""Sampling: distributions at a temperature, and speculative (rejection) sampling over a batch.

Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a draft token x proposed with
draft probability q(x) is accepted with probability min(1, p(x)/q(x)), p being the target's
distribution at that position; the first rejected position emits a token drawn from
norm(max(0, p - q)) instead, and when every draft is accepted a bonus token is drawn from the
target's next distribution. Every emitted token is then distributed exactly as the target's p.

Temperature 0 (greedy) is the same procedure on one-hot distributions: a draft is accepted iff
it is the target's argmax, and the emitted token is the argmax, so the output equals greedy AR's.

All draws come from one `torch.Generator` in a fixed order: same inputs, same outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Rows of next-token distributions (one-hot argmax at temperature 0)."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> list[int]:
    """One token from each row."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()


def accept(p_draft: torch.Tensor, q_draft: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Accept each draft token with probability min(1, p/q): u < p/q, written without division
    (q > 0 for a token the draft sampled)."""
    return uniform * q_draft < p_draft


@dataclass(frozen=True)
class Verdict:
    """Per request: how many drafts were accepted, and the tokens emitted (the accepted drafts,
    then the resampled or bonus token when there is one)."""

    accepted: list[int]
    emitted: list[list[int]]


def verify(p: list[torch.Tensor], q: list[torch.Tensor], drafts: list[list[int]],
           generator: torch.Generator) -> Verdict:
    """Rejection-sample each request's chain of drafts against the target.

    Request i has drafts d (L tokens) with draft distributions q[i] ([L, V]) and target
    distributions p[i] ([R, V], R = L or L + 1): p[i][j] is the target's distribution for d[j],
    and a row R = L + 1 is the bonus position after the last draft. When all L are accepted and
    there is no bonus row, nothing more is emitted (PEARL checks its first pre-drafted token this
    way, in place of the bonus)."""
    batch = len(drafts)
    device = p[0].device
    lengths = torch.tensor([len(d) for d in drafts])
    rows = torch.tensor([len(x) for x in p])
    width = int(lengths.max())
    pp = _padded(p, width + 1)
    qq = _padded(q, width + 1)
    dd = _padded([torch.tensor(d, dtype=torch.int64) for d in drafts], width).to(device)
    uniform = torch.rand(batch, width, generator=generator, device=generator.device).to(device)
    p_draft = pp[:, :width].gather(2, dd[:, :, None]).squeeze(2)
    q_draft = qq[:, :width].gather(2, dd[:, :, None]).squeeze(2)
    live = torch.arange(width)[None, :] < lengths[:, None]
    ok = accept(p_draft, q_draft, uniform).cpu() & live
    accepted = ok.to(torch.int64).cumprod(1).sum(1)
    emitted = [d[:a] for d, a in zip(drafts, accepted.tolist(), strict=True)]
    # Where the chain stopped: a rejection resamples from max(0, p - q); a full chain takes the
    # bonus row (q is zero there) when there is one.
    draws = torch.nonzero(accepted < rows).squeeze(1)
    if len(draws):
        stop = accepted[draws].to(device)
        at = draws.to(device)
        residual = (pp[at, stop] - qq[at, stop]).clamp_min(0)
        tokens = sample(residual / residual.sum(1, keepdim=True), generator)
        for i, token in zip(draws.tolist(), tokens, strict=True):
            emitted[i] = [*emitted[i], token]
    return Verdict(accepted.tolist(), emitted)


def _padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack along a new batch dimension, zero-padding the first dimension to `width`."""
    out = pad_sequence(rows, batch_first=True)
    return F.pad(out, (0, 0) * (out.dim() - 2) + (0, width - out.shape[1]))
