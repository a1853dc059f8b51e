"""How many tokens a drafting drafts, and how many of them the target scores: the draft-length
policy of SD and pipelined PSD.

- `FixedLength`: k (k + e drafted with TETRIS, see below), every step.
- `AdaptiveLength` (k_policy = adaptive): each drafting picks the k' in 0..k with the most expected
  tokens per second of its step (sim/methods/adaptive.py), from the acceptance seen so far.
- `Tetris` (psd+tetris, docs/reference/paper.md §4.2): k + e drafted per request; when the verified
  batch holds m requests, only the k x m prefixes with the highest cumulative draft confidence
  are scored (sim/tetris.py), so verification costs what it costs at k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psdsim.sim.costs import Chunks
from psdsim.sim.methods.adaptive import AcceptanceEstimate, best_k
from psdsim.sim.methods.common import SimContext
from psdsim.sim.methods.passes import link_seconds
from psdsim.sim.tetris import draft_positions, leading_accepted, select_prefixes


@dataclass(frozen=True, slots=True)
class Selection:
    """TETRIS's choice for a verified batch: drafts scored per request, and whether each drafted
    position would be accepted (drawn with its confidence)."""

    lengths: np.ndarray
    accepted: np.ndarray

    def leading(self) -> np.ndarray:
        """Accepted drafts per request: the leading acceptances among those scored."""
        return leading_accepted(self.accepted, self.lengths)


class FixedLength:
    """k drafts per request, every drafting; all of them scored."""

    def __init__(self, sim: SimContext, width: int) -> None:
        self.sim = sim
        self.width = width   # the most drafts a request holds

    def k(self, slots: np.ndarray, context: int, chunks: Chunks, parallel: bool,
          over_link: bool = True) -> int:
        """Drafts per request for a drafting of `slots` (`parallel`: it overlaps a target pass of
        the same batch; `over_link`: the pass's messages cross the link)."""
        return self.width

    def select(self, slots: np.ndarray, drafted: np.ndarray) -> Selection | None:
        """Which drafts a verified batch scores (None: all of them)."""
        return None

    def seen(self, proposed: np.ndarray, total: int) -> None:
        """A verification of `proposed` drafts per request came back (table.last_accepted)."""


class AdaptiveLength(FixedLength):
    """k' in 0..k per drafting, for the most expected tokens per second (sim/methods/adaptive.py)."""

    def __init__(self, sim: SimContext, width: int) -> None:
        super().__init__(sim, width)
        self.estimate = AcceptanceEstimate(sim.table.acceptance_mean)

    def k(self, slots: np.ndarray, context: int, chunks: Chunks, parallel: bool,
          over_link: bool = True) -> int:
        sim = self.sim
        return best_k(sim.cost, len(slots), context, chunks, self.width, self.estimate.rate, parallel,
                      link_seconds(sim, len(slots), context, chunks) if over_link else None)

    def seen(self, proposed: np.ndarray, total: int) -> None:
        if total:
            self.estimate.update(proposed, self.sim.table.last_accepted)


class Tetris(FixedLength):
    """k + e drafts per request; a full batch scores the best k x m prefixes."""

    def select(self, slots: np.ndarray, drafted: np.ndarray) -> Selection:
        s, width = self.sim.scenario, self.width
        log_q, accepted = draft_positions(self.sim.table.acceptance[slots], width, s.confidence_spread,
                                          self.sim.rng)
        log_q = np.where(np.arange(width)[None, :] < drafted[:, None], log_q, -np.inf)
        lengths = drafted
        if len(slots) >= s.m:
            lengths = np.minimum(select_prefixes(log_q, s.k * s.m), drafted)
        return Selection(lengths, accepted)


def draft_length_policy(sim: SimContext) -> FixedLength:
    """The scenario's draft-length policy."""
    s = sim.scenario
    if s.method == "psd+tetris":
        return Tetris(sim, s.k + s.extra)
    return (AdaptiveLength if s.k_policy == "adaptive" else FixedLength)(sim, s.k)
