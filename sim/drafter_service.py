"""Building blocks of a decoupled drafter service (M:N): D drafter GPUs serving V verifier
replicas over a shared link, each verifier step's drafts prepared one round ahead for the
likely verification outcomes.

Sources (facts only; docs/methods.md names them in full): vLLM RFC #42109 (a draft server on
a GPU apart from the target's TP group, a speculation cache keyed by sequence, accepted count and
bonus token, drafting just in time on a miss); "speculative speculative decoding" (Saguaro, arXiv
2603.03251: while verification runs, the drafter prepares drafts for the likely outcomes);
SGLang's decoupled speculative decoding (a drafter engine serving verifier engines, M:N). Our
reading: the drafter cannot know how many of the k drafts the running verification will accept,
so it drafts the next round for the `b` accepted lengths most probable under the acceptance
model; a request's next drafts are ready when verification ends (a hit) only if its length is
one of them, else they are drafted on the critical path (a miss), and the other branches' drafts
are waste. An outcome is the accepted length alone (the bonus token is taken as guessed), so the
hit rate is an upper bound.

What is here: the accepted length's distribution and its `b` likely values, and a shared
drafter service as a booked clock (D servers, first come first served, no event queue: every
drafting job is priced when it is submitted). A shared link needs nothing new: verifiers that
reserve transfers on one `devices.Link` contend on its FIFO lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def accepted_length_pmf(acceptance: float, k: int) -> np.ndarray:
    """P(L = j), j = 0..k, of the drafts accepted out of k at per-token rate `acceptance`
    (i.i.d. positions, sim/acceptance.py): a^j (1 - a) below k, a^k at k."""
    if not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    j = np.arange(k + 1)
    pmf = acceptance ** j * (1.0 - acceptance)
    pmf[k] = acceptance ** k
    return pmf


def likely_lengths(acceptance: float, k: int, branches: int) -> tuple[int, ...]:
    """The `branches` accepted lengths with most probability (ties to the shorter, so the choice
    is deterministic), ascending: the outcomes the drafter prepares the next round for."""
    if branches < 1:
        raise ValueError(f"branches must be >= 1, got {branches}")
    pmf = accepted_length_pmf(acceptance, k)
    order = sorted(range(k + 1), key=lambda j: (-pmf[j], j))
    return tuple(sorted(order[:branches]))


def hit_probability(acceptance: float, k: int, branches: int) -> float:
    """Probability that a verification's accepted length is one the drafter prepared for."""
    pmf = accepted_length_pmf(acceptance, k)
    return float(sum(pmf[j] for j in likely_lengths(acceptance, k, branches)))


@dataclass(frozen=True, slots=True)
class Booking:
    """A drafting job on the service: which server took it, when it started and ended, and how
    long it queued behind other verifiers' jobs."""

    server: int
    start_s: float
    end_s: float
    wait_s: float


class DrafterService:
    """D drafter servers shared by the verifiers, first come first served in submission order:
    a job submitted at `at` takes the server free first (the lowest index on a tie) and waits
    until it is free. Booked, not queued: the job's end is known when it is submitted."""

    def __init__(self, servers: int) -> None:
        if servers < 1:
            raise ValueError(f"servers must be >= 1, got {servers}")
        self.free_at = [0.0] * servers
        self.busy_s = 0.0

    def book(self, at: float, seconds: float) -> Booking:
        """Book `seconds` of drafting submitted at `at`; returns where and when it runs."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        server = min(range(len(self.free_at)), key=lambda i: (self.free_at[i], i))
        start = max(at, self.free_at[server])
        end = start + seconds
        self.free_at[server] = end
        self.busy_s += seconds
        return Booking(server, start, end, start - at)


def expected_step_s(acceptance: float, k: int, branches: int, verify_s: float, branch_draft_s: float,
                    miss_draft_s: float) -> float:
    """One verifier of one request alone on one drafter server (V = D = 1), the closed form the
    booked rounds must agree with: the drafts for the next round (`branch_draft_s`, all
    branches) run beside the verification; on a hit the step waits for whichever ends later, on
    a miss the verifier then waits for drafting the one outcome that came out (`miss_draft_s`)
    after both."""
    h = hit_probability(acceptance, k, branches)
    beside = max(verify_s, branch_draft_s)
    return beside + (1.0 - h) * miss_draft_s


def booked_rounds(acceptance: float, k: int, branches: int, verify_s: float, branch_draft_s: float,
                  miss_draft_s: Callable[[int], float], verifiers: int, servers: int, rounds: int,
                  rng: np.random.Generator, batch: int = 1) -> tuple[float, int, int]:
    """`rounds` steps of each of `verifiers` identical verifiers of `batch` requests sharing
    `servers` drafter servers, served in turn (the verifier free first, then by index): each
    step's branch drafting is booked when its verification starts; the requests whose accepted
    length is not among the likely ones are missed, and the drafting of their real outcome
    (`miss_draft_s(missed requests)`) is booked on the service once both end. Returns (the last
    verifier's end, hit requests, missed requests); accepted lengths drawn from `rng`, one per
    request (Geometric, capped at k, as sim/acceptance.py draws them)."""
    service = DrafterService(servers)
    likely = np.array(likely_lengths(acceptance, k, branches))
    ready = [0.0] * verifiers
    hits = misses = 0
    for _ in range(rounds):
        for v in sorted(range(verifiers), key=lambda i: (ready[i], i)):
            start = ready[v]
            drafted = service.book(start, branch_draft_s).end_s
            done = max(start + verify_s, drafted)
            if acceptance < 1.0:
                accepted = np.minimum(rng.geometric(1.0 - acceptance, size=batch) - 1, k)
            else:
                accepted = np.full(batch, k)
            missed = int(np.count_nonzero(~np.isin(accepted, likely)))
            hits, misses = hits + batch - missed, misses + missed
            ready[v] = service.book(done, miss_draft_s(missed)).end_s if missed else done
    return max(ready), hits, misses
