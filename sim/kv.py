"""KV block pools, one per GPU group, allocated in lockstep through one block table.

Target KV lives on the verifier group; draft KV on the drafter GPU in PSD, or beside the
target's on GPU 0 of the verifier group in co-located SD (one pool holding both). vLLM V0
(MineDraft) keeps a single block table per request that both models write through, so a request
holds the same number of blocks in every pool; each pool has its own capacity in blocks (GPU
memory x utilisation - weights - reserve, over the KV bytes of a block there, sim/memory.py).
The pool with the fewest blocks binds: a drafter GPU too small for 2m requests' draft KV limits
PSD before the verifier group does, and the run says which pool bound.

Blocks are granted whole (`block_size` tokens). A request's need is ceil(tokens / block_size)
for the tokens whose KV must have slots this step (context + lookahead for a decode; for a
prefill, its whole prompt in vllm-v0, computed + chunk in vllm-v1). Admission keeps a watermark
of free blocks, as vLLM V0 does (1% of the pool: `BlockSpaceManager(watermark=0.01)`).

A decode may go on only if the free blocks cover every block its new slots touch, the partly
written last block included even though the request holds it (vLLM 0.9.2's
`BlockSpaceManager.can_append_slots` with `BlockTable.get_num_blocks_touched_by_append_slots`,
a worst case that assumes each touched block needs a fresh one): so the pool keeps, per request,
the tokens whose slots are written (vLLM's `BlockTable._num_full_slots`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from psdsim.sim.numbers import isum

WATERMARK = 0.01  # vLLM V0 default fraction of blocks kept free at admission


class KVPools:
    def __init__(self, capacities: Mapping[str, int], block_size: int, n_requests: int) -> None:
        if not capacities or min(capacities.values()) < 1:
            raise ValueError("every KV pool needs at least one block")
        self.capacities = dict(capacities)
        self.block_size = block_size
        self.total = min(self.capacities.values())     # the binding side's blocks
        self.binding = min(self.capacities, key=lambda side: self.capacities[side])
        self.watermark = int(WATERMARK * self.total)
        self.held = np.zeros(n_requests, dtype=np.int64)  # blocks per request (every side)
        self.written = np.zeros(n_requests, dtype=np.int64)  # tokens whose slots are written
        self.used = 0
        self.peak = 0
        self._round_ups: dict[int, np.ndarray] = {}

    @cached_property
    def _block(self) -> np.ndarray:
        """`block_size` as a 0-d array, for `ensure` (every step): numpy 2 combines an array with a
        0-d array in about half the time it takes with a Python int, whose type it must first
        resolve (NEP 50); the result is the same."""
        return np.array(self.block_size)

    def _round_up(self, lookahead: int) -> np.ndarray:
        """lookahead + block_size - 1 as a 0-d array (see `_block`), made once per lookahead."""
        constant = self._round_ups.get(lookahead)
        if constant is None:
            constant = self._round_ups[lookahead] = np.array(lookahead + self.block_size - 1)
        return constant

    @property
    def free(self) -> int:
        return self.total - self.used

    def blocks_for(self, tokens: np.ndarray | int) -> np.ndarray | int:
        """Blocks that hold `tokens` slots (a count or an array of them): ceil(tokens / block_size)."""
        return -(-tokens // self.block_size)

    def can_admit(self, blocks: int) -> bool:
        """vLLM V0 `can_allocate`: room for `blocks` while keeping the watermark free."""
        return self.free - blocks >= self.watermark

    def fits_ever(self, blocks: int) -> bool:
        return self.total - blocks >= self.watermark

    def ensure(self, slots: np.ndarray, cached: np.ndarray, lookahead: int,
               touched: bool = True, also: int = 0) -> bool:
        """Grow each request to hold its `cached` tokens + `lookahead` slots if the free blocks
        cover all the new ones with room, whatever the order, for the largest excess of a
        request's count over its new blocks: every block its append touches (`touched`, vLLM V0)
        or only its new blocks (vLLM V1). That is the common case, in a handful of numpy
        operations; False changes nothing, and the caller checks request by request. `also`: the
        most blocks a request checked but not grown touches (it must find them free after the
        others' new blocks)."""
        held = self.held[slots]
        needed = (cached + self._round_up(lookahead)) // self._block
        grown = np.maximum(needed, held)
        total = isum(grown - held)   # the new blocks: an exact integer sum
        free = self.total - self.used
        if total + also > free:
            return False
        # a request's excess is below the blocks it holds, so below `used`: mostly no need to look
        if touched and total + self.used > free:
            excess = int((np.minimum(needed, held) - self.written[slots] // self._block).max(initial=0))
            if total + excess > free:
                return False
        elif total > free:
            return False
        self.written[slots] = cached
        if total:
            self.held[slots] = grown
            self.used += total
            if self.used > self.peak:
                self.peak = self.used
        return True

    def ahead(self, slots: np.ndarray, cached: np.ndarray, plans: int,
              lookahead: int) -> tuple[np.ndarray, list[int]]:
        """What `ensure` would do over `plans` consecutive plans in which each of `slots` caches one
        token more than at the plan before (`cached` at the first): the blocks each request holds
        after each plan (a row per plan) and the blocks in use after each, cut before the first
        plan that vllm-v0's `ensure` would refuse (the scheduler preempts there). At each plan a
        request's written tokens are those it cached at the plan before. Nothing changes until `settle`
        commits one of the rows (AR's quiet stretches, sim/methods/ar.py)."""
        held0 = self.held[slots]
        steps = np.arange(plans)[:, None]
        tokens = cached[None, :] + steps
        needed = (tokens + self._round_up(lookahead)) // self._block   # as `ensure`
        held = np.maximum(needed, held0[None, :])
        new = held - np.vstack([held0[None, :], held[:-1]])
        excess = np.maximum((needed - (tokens - 1) // self._block - new).max(axis=1), 0)
        used = self.used + (held - held0[None, :]).sum(axis=1)
        refused = used + excess > self.total       # used after the plan = used before + new
        fits = int(np.argmax(refused)) if refused.any() else plans
        return held[:fits], used[:fits].tolist()

    def settle(self, slots: np.ndarray, held: np.ndarray, used: int, written: np.ndarray) -> None:
        """Commit one row of `ahead`: `slots` hold `held` blocks with `written` tokens written,
        `used` are in use."""
        self.held[slots] = held
        self.written[slots] = written
        self.used = used
        if used > self.peak:
            self.peak = used

    def touched(self, slots: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Blocks each request's append up to `tokens` slots touches, as vLLM counts them for
        `can_append_slots`: every block from the one its written tokens end in (a partly written
        block counts although held) to the last one the slots reach."""
        return self.blocks_for(tokens) - self.written[slots] // self.block_size

    def write(self, slots: np.ndarray, tokens: np.ndarray | int) -> None:
        """Record that the slots of each request's first `tokens` tokens are written."""
        self.written[slots] = tokens

    def extra_needed(self, slots: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """New blocks each request needs to hold `tokens` slots (0 where it holds enough)."""
        return np.maximum(self.blocks_for(tokens) - self.held[slots], 0)

    def grow(self, slots: np.ndarray, extra: np.ndarray) -> None:
        """Grant `extra` blocks to each of `slots` (the caller checked they are free)."""
        total = isum(extra)
        if total > self.free:
            raise RuntimeError("KV pool over-allocated")  # a scheduler bug, never user input
        self.held[slots] += extra
        self.used += total
        self.peak = max(self.peak, self.used)

    def release(self, slots: np.ndarray) -> int:
        """Free every block of `slots`; returns how many were freed."""
        freed = isum(self.held[slots])
        self.held[slots] = 0
        self.written[slots] = 0
        self.used -= freed
        return freed

    def usage(self) -> dict[str, float]:
        """Fraction of each side's pool in use."""
        return {side: self.used / cap for side, cap in self.capacities.items()}
