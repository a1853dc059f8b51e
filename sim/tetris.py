"""TETRIS selection: which draft tokens a full verification batch scores.

MineDraft's PSD + TETRIS (docs/reference/paper.md §4.2, TETRIS integration) drafts k + e tokens per
request and, when the verified batch holds m requests, scores only the k x m prefixes with the
highest cumulative draft log-probability, so verification costs what plain SD at k costs; with a
smaller batch every draft is scored.

That needs a draft confidence correlated with acceptance. Model: the draft's probability q of
each drafted token is Beta-distributed around the request's acceptance rate a (mean a,
concentration `spread`), and the token is accepted with probability q. Marginally every
position is accepted with probability a, exactly as without TETRIS, so at equal k the two models
agree; what TETRIS adds is that the ranking by cumulative log q is informative.
"""

from __future__ import annotations

import numpy as np


def draft_positions(acceptance: np.ndarray, width: int, spread: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(log q, accepted?) for `width` drafted positions of each request."""
    a = acceptance[:, None]
    q = rng.beta(a * spread, (1.0 - a) * spread, size=(len(acceptance), width))
    q = np.clip(q, 1e-12, 1.0)
    accepted = rng.random(q.shape) < q
    return np.log(q), accepted


def select_prefixes(log_q: np.ndarray, budget: int) -> np.ndarray:
    """Draft tokens to score per request: the `budget` prefixes with the highest cumulative draft
    log-probability (cumulative scores fall along a row, so the chosen tokens are prefixes)."""
    rows, width = log_q.shape
    if budget >= rows * width:
        return np.full(rows, width, dtype=np.int64)
    scores = np.cumsum(log_q, axis=1).ravel()
    top = np.argpartition(-scores, budget - 1)[:budget]
    return np.bincount(top // width, minlength=rows).astype(np.int64)


def leading_accepted(accepted: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Accepted drafts per request: leading acceptances among its first `lengths` positions."""
    width = accepted.shape[1]
    within = np.arange(width)[None, :] < lengths[:, None]
    return np.cumprod(accepted & within, axis=1).sum(axis=1)
