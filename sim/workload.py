"""Requests: prompt lengths from a dataset profile (or a trace), arrivals, acceptance, aborts,
and the fan-out of a prompt into n samples (SamplingParams.n).

Draws happen in a fixed order (prompts, arrivals, acceptance, cancellations) from the run's one
Generator, so every method simulated with the same scenario and seed sees exactly the same
requests. A cancelling request (a share `abort_fraction`) is aborted by its client a uniformly
random delay in [0, abort_window_s] after its first token arrives, like a user pressing stop;
the engine applies it at the next step boundary, whichever sub-batch the request is in. A
request that finishes first is not aborted.

A run of millions of requests must not hold them all, so the requests come as a
stream of blocks in arrival order (`workload_stream`), and `make_workload` is that stream's
blocks joined. Each field (a column's draws, e.g. all the arrival gaps) is drawn as one
uninterrupted run of the Generator, field after field, exactly as drawing every request at once
would: the stream learns where each field's run starts by drawing and discarding it once, then
keeps one copy of the Generator per field, positioned at its start, and draws every field a
block at a time. Every sampler used (choice with p, random, exponential, beta, uniform) keeps
its whole state in the bit generator, so k values drawn in pieces are the k values drawn at
once, bit for bit (tests/sim/test_workload_stream.py checks them against whole-array draws).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from psdsim.sim.acceptance import draw_request_acceptance
from psdsim.sim.catalog import Catalog, Dataset
from psdsim.sim.errors import ScenarioError
from psdsim.sim.scenario import Scenario
from psdsim.sim.trace_replay import Trace, scenario_trace

# Rows a block holds. Streaming 1 M ShareGPT requests (tracemalloc, this module alone) peaked at
# 0.8 / 3.0 / 12 / 48 MiB with blocks of 4 / 16 / 64 / 256 Ki rows, in the same time within noise
# (3.1-3.4 s, nearly all of it the normal helpers' per-request Python); with fixed prompt lengths
# (0.11-0.14 s a million) per-block overhead shows only below a few Ki rows (0.23 s at 1 Ki).
# 16 Ki keeps a block a few MiB and its overhead nil; it is not part of the results: any block
# size gives the same requests.
BLOCK = 1 << 14

# A field's draws: `draw(rng, k)` gives its next k values from `rng`.
Draw = Callable[[np.random.Generator, int], np.ndarray]

_COLUMNS = ("arrival_s", "prompt_len", "output_len", "acceptance", "abort_delay_s")


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray   # float64, non-decreasing
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    acceptance: np.ndarray  # float64 per-token acceptance per request (NaN when no draft model)
    abort_delay_s: np.ndarray  # float64 seconds after the first token the client cancels; NaN = never
    prompt: np.ndarray | None = None  # int64 prompt each request samples from (n > 1); None: its own
    acceptance_mean: float | None = None  # the configured mean the rates were drawn around

    def __len__(self) -> int:
        return len(self.prompt_len)

    def rows(self, lo: int, hi: int) -> Workload:
        """Requests lo..hi-1 (views of these columns)."""
        cols = {name: getattr(self, name)[lo:hi] for name in _COLUMNS}
        prompt = None if self.prompt is None else self.prompt[lo:hi]
        return Workload(**cols, prompt=prompt, acceptance_mean=self.acceptance_mean)

    def select(self, rows: np.ndarray) -> Workload:
        """The requests at indices `rows` (copies), in that order."""
        cols = {name: getattr(self, name)[rows] for name in _COLUMNS}
        prompt = None if self.prompt is None else self.prompt[rows]
        return Workload(**cols, prompt=prompt, acceptance_mean=self.acceptance_mean)


def _joined(parts: list[Workload]) -> Workload:
    """Consecutive blocks as one workload, column by column."""
    cols = {name: np.concatenate([getattr(w, name) for w in parts]) for name in _COLUMNS}
    prompt = None if parts[0].prompt is None else np.concatenate([w.prompt for w in parts])
    return Workload(**cols, prompt=prompt, acceptance_mean=parts[0].acceptance_mean)


def draw_components(ds: Dataset, n: int, rng: np.random.Generator) -> np.ndarray:
    """The mixture component each of n prompts is drawn from, by the components' weights."""
    weights = np.array([c.weight for c in ds.components], dtype=float)
    return rng.choice(len(weights), size=n, p=weights / weights.sum())


def prompt_lengths(ds: Dataset, max_prompt: int, which: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Lengths of log-normals truncated to [min_prompt, max_prompt] by inverse-CDF sampling: the
    prompt i from component which[i] at the uniform u[i] (in [0, 1)) of its truncated range."""
    lo, hi = ds.min_prompt, min(ds.max_prompt, max_prompt)
    mu = np.array([c.mu for c in ds.components])[which]
    sigma = np.array([c.sigma for c in ds.components])[which]
    f_lo, f_hi = _window_cdf(lo, hi, mu, sigma)
    lengths = np.exp(mu + sigma * normal_quantile(f_lo + u * (f_hi - f_lo)))
    return np.clip(np.rint(lengths), lo, hi).astype(np.int64)


def _window_cdf(lo: int, hi: int, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each log-normal's CDF at the prompt window's two ends, widened by half a token so that
    rounding maps onto [lo, hi] evenly."""
    f_lo = normal_cdf((np.log(lo - 0.5) - mu) / sigma) if lo > 0.5 else np.zeros(len(mu))
    return f_lo, normal_cdf((np.log(hi + 0.5) - mu) / sigma)


# The least share of a component's prompts the window may hold: below one in a trillion the dataset
# does not describe prompts of these lengths, and every draw of that component would be pinned at
# a bound of the window (the quantile of a range a float cannot tell from a point).
MIN_COMPONENT_MASS = 1e-12


def check_prompt_window(ds: Dataset, max_prompt: int) -> None:
    """ScenarioError naming the dataset when one of its components puts (almost) none of its
    prompts in [min_prompt, min(max_prompt, the room max_model_len leaves)]."""
    lo, hi = ds.min_prompt, min(ds.max_prompt, max_prompt)
    mu = np.array([c.mu for c in ds.components])
    sigma = np.array([c.sigma for c in ds.components])
    f_lo, f_hi = _window_cdf(lo, hi, mu, sigma)
    mass = f_hi - f_lo
    empty = np.flatnonzero(mass < MIN_COMPONENT_MASS)
    if len(empty):
        i = int(empty[0])
        c = ds.components[i]
        raise ScenarioError("dataset", f"{ds.key}: component {i + 1} (median {math.exp(c.mu):.4g} tokens, "
                            f"sigma {c.sigma:g}) puts {mass[i]:.2g} of its prompts in the prompt window "
                            f"[{lo}, {hi}] tokens", "move that component's mu into the window, drop it, or "
                            "widen the window (min_prompt, max_prompt; max_model_len - output_len)")


def sample_prompt_lengths(ds: Dataset, n: int, max_prompt: int, rng: np.random.Generator) -> np.ndarray:
    """Mixture of log-normals truncated to [min_prompt, max_prompt]: n components, then n uniforms."""
    which = draw_components(ds, n, rng)
    return prompt_lengths(ds, max_prompt, which, rng.random(n))


# The standard normal's CDF and quantile from the standard library, not scipy.special: importing
# scipy.special costs every `psdsim run` ~0.3-0.4 s of start-up (more than the engine loop of the
# default scenario's first few thousand steps), and these run once per request. Both are accurate
# to a few ulps, and the lengths they make are rounded to whole tokens, so they give the lengths
# scipy's ndtr/ndtri gave (tests/sim/test_workload.py compares them over millions of draws).
_NORMAL = NormalDist()
_SQRT_HALF = math.sqrt(0.5)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """P(Z <= x): erfc of the far tail, where 1 + erf(x) would cancel to nothing."""
    return np.array([0.5 * math.erfc(-v * _SQRT_HALF) for v in x.tolist()], dtype=float)


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """The inverse of normal_cdf; -inf at 0 and +inf at 1, as the limits are."""
    quantile = _NORMAL.inv_cdf
    return np.array([quantile(v) if 0.0 < v < 1.0 else (-math.inf if v <= 0.0 else math.inf)
                     for v in p.tolist()], dtype=float)


class _PoissonClock:
    """Arrival times as one running sum of the gaps, block after block. Each block's sum starts
    from the total so far (cumsum of [total, *gaps]), so every time is the float one np.cumsum
    over all the gaps gives (adding the total to a block's own cumsum would round differently);
    times count from the first arrival: the first request opens the run."""

    def __init__(self) -> None:
        self._total = 0.0    # 0.0 + g == g exactly: the first block's sums are cumsum(gaps)'s
        self._origin: float | None = None

    def times(self, gaps: np.ndarray) -> np.ndarray:
        running = np.cumsum(np.concatenate(([self._total], gaps)))[1:]
        self._total = running[-1]
        if self._origin is None:
            self._origin = running[0]
        return running - self._origin


class WorkloadStream:
    """The requests make_workload would draw, produced in arrival order in blocks of at most
    `block` rows, holding O(block) memory whatever the request count (a trace file is read
    whole: it is the user's own data)."""

    def __init__(self, s: Scenario, cat: Catalog, rng: np.random.Generator, block: int) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self._s, self._block = s, block
        self._trace: Trace | None = scenario_trace(s)
        self._prompts = (s.requests if self._trace is None
                         else min(s.requests, len(self._trace.prompt_len)))
        self.warnings = self._trace_warnings()
        mean = s.acceptance
        if mean is None:
            prior = cat.acceptance_prior(s.draft, s.target)
            mean = prior.alpha if prior is not None else None
        self.acceptance_mean: float | None = mean
        self.n = self._prompts * s.n          # requests after fan-out
        self._dataset = None if self._trace is not None or s.prompt_len else cat.datasets[s.dataset]
        if self._dataset is not None:
            check_prompt_window(self._dataset, s.max_model_len - s.output_len)
        self._draws = self._field_draws()
        # One pass over the draws, discarding them, leaves rng where drawing every request at
        # once would and marks where each field's run starts.
        self._starts: dict[str, np.random.Generator] = {}
        for name, draw in self._draws.items():
            self._starts[name] = copy.deepcopy(rng)
            for lo in range(0, self._prompts, block):
                draw(rng, min(block, self._prompts - lo))

    def _trace_warnings(self) -> list[str]:
        """What the trace reader noted, and that a trace longer than `requests` is replayed in
        part: the run says so, since its figures describe the first rows only."""
        notes = [] if self._trace is None else list(self._trace.notes)
        rows = 0 if self._trace is None else len(self._trace.prompt_len)
        if rows <= self._prompts:
            return notes
        return [*notes, f"trace: replays the first {self._prompts:,} of its {rows:,} rows in arrival order "
                f"(requests = {self._s.requests:,}; set requests = {rows} to replay them all)"]

    def _field_draws(self) -> dict[str, Draw]:
        """The fields drawn, in the order they are drawn from the run's Generator."""
        s = self._s
        draws: dict[str, Draw] = {}
        if self._dataset is not None:
            ds = self._dataset
            draws["component"] = lambda g, k: draw_components(ds, k, g)
            draws["quantile"] = lambda g, k: g.random(k)
        if self._trace is None and s.rate is not None:
            scale = 1.0 / s.rate
            draws["gap"] = lambda g, k: g.exponential(scale, size=k)
        mean = self.acceptance_mean
        if mean is not None:
            draws["acceptance"] = lambda g, k: draw_request_acceptance(mean, s.acceptance_spread, k, g)
        if s.abort_fraction > 0:
            draws["cancel"] = lambda g, k: g.random(k)
            draws["delay"] = lambda g, k: g.uniform(0.0, s.abort_window_s, size=k)
        return draws

    def blocks(self) -> Iterator[Workload]:
        """Consecutive blocks of requests; joined column by column they are make_workload's
        arrays. A prompt's n samples stay in one block unless a block holds fewer than n rows.
        Each call starts again from the first request. A trace's rows may be views of the
        trace's own arrays: copy a block's columns before writing into them."""
        s = self._s
        fields = {name: copy.deepcopy(g) for name, g in self._starts.items()}
        clock = _PoissonClock()
        per = max(1, self._block // s.n)      # prompts a block
        for lo in range(0, self._prompts, per):
            hi = min(lo + per, self._prompts)
            drawn = {name: draw(fields[name], hi - lo) for name, draw in self._draws.items()}
            w = self._prompt_rows(lo, hi, drawn, clock)
            if s.n > 1:
                # SamplingParams.n: vLLM fans a prompt out into n requests that share its prompt
                # and arrival (and here its acceptance rate and its client's cancellation), each
                # generating on its own.
                fan = {name: np.repeat(getattr(w, name), s.n) for name in _COLUMNS}
                w = Workload(**fan, prompt=np.repeat(np.arange(lo, hi), s.n),
                             acceptance_mean=w.acceptance_mean)
            for a in range(0, len(w), self._block):
                yield w if len(w) <= self._block else w.rows(a, a + self._block)

    def _prompt_rows(self, lo: int, hi: int, drawn: dict[str, np.ndarray],
                     clock: _PoissonClock) -> Workload:
        """Prompts lo..hi-1, one row each, from their fields' draws."""
        s, t, k = self._s, self._trace, hi - lo
        if t is not None:
            prompts, outputs = t.prompt_len[lo:hi], t.output_len[lo:hi]
            arrivals, given = t.arrival_s[lo:hi], t.acceptance[lo:hi]
        else:
            if self._dataset is not None:
                prompts = prompt_lengths(self._dataset, s.max_model_len - s.output_len,
                                         drawn["component"], drawn["quantile"])
            else:
                prompts = np.full(k, s.prompt_len, dtype=np.int64)
            outputs = np.full(k, s.output_len, dtype=np.int64)
            arrivals = np.zeros(k) if s.rate is None else clock.times(drawn["gap"])
            given = np.full(k, np.nan)
        if "acceptance" in drawn:
            acceptance = np.where(np.isnan(given), drawn["acceptance"], given)
        else:
            acceptance = given.copy()
        if "cancel" in drawn:
            abort_delay = np.where(drawn["cancel"] < s.abort_fraction, drawn["delay"], np.nan)
        else:
            abort_delay = np.full(k, np.nan)
        return Workload(arrivals, prompts, outputs, acceptance, abort_delay,
                        acceptance_mean=self.acceptance_mean)


def workload_stream(s: Scenario, cat: Catalog, rng: np.random.Generator,
                    block: int = BLOCK) -> WorkloadStream:
    """The scenario's requests as a stream of blocks; rng is left where make_workload leaves it,
    for the simulation's own draws that follow."""
    return WorkloadStream(s, cat, rng, block)


def make_workload(s: Scenario, cat: Catalog, rng: np.random.Generator) -> Workload:
    """Every request at once: the stream's blocks joined."""
    return _joined(list(workload_stream(s, cat, rng).blocks()))
