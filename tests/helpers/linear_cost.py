"""A cost model whose verification and drafting grow linearly with the batch, so that a rule's
thresholds can be worked out by hand, and traces whose requests end in a known order."""

from __future__ import annotations

from pathlib import Path

from psdsim.sim.costs import NO_CHUNKS, Chunks, OptionalCosts

NEVER = dict(acceptance=1e-9, acceptance_spread=1e9)   # no draft is ever accepted: 1 token a verification


class LinearCost(OptionalCosts):
    """verify = V0 + v x batch, a drafting (any k) = t0 + d x batch, ms; nothing else costs."""

    overhead = 0.0

    def __init__(self, V0: float, v: float, t0: float, d: float) -> None:
        self.V0, self.v, self.t0, self.d = V0, v, t0, d

    def draft(self, batch: int, k: int, ctx: int) -> float:
        return (self.t0 + self.d * batch) * 1e-3 if batch and k else 0.0

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        return ((self.V0 + self.v * batch) * 1e-3 if batch else 0.0) + (1e-3 if chunks.tokens else 0.0)

    def draft_chunks(self, chunks: Chunks) -> float:
        return 0.0

    def comm(self, nbytes: int) -> float:
        return 0.0

    def broadcast(self, nbytes: int) -> float:
        return 0.0

    def reject(self, positions: int) -> float:
        return 0.0

    def swap(self, blocks: int) -> float:
        return 0.0


def request_trace(tmp: Path, rows: list[tuple[float, int]]) -> str:
    """A trace of (arrival s, output tokens) rows with 8-token prompts."""
    path = tmp / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{a},8,{out}\n" for a, out in rows), encoding="utf-8")
    return str(path)
