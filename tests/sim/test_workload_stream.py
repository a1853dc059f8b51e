"""The workload stream: blocks of requests that, joined, are the requests drawn all at
once, bit for bit, leaving the run's Generator where drawing them all at once leaves it, in
memory bounded by the block whatever the request count."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.sim.acceptance import MAX_ACCEPTANCE, draw_request_acceptance
from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.scenario import Scenario
from psdsim.sim.trace_replay import read_trace
from psdsim.sim.workload import BLOCK, Workload, make_workload, normal_cdf, normal_quantile, workload_stream

CAT = builtin_catalog()
COLUMNS = ("arrival_s", "prompt_len", "output_len", "acceptance", "abort_delay_s", "prompt")


def drawn_whole(s: Scenario, rng: np.random.Generator) -> Workload:
    """The oracle: make_workload as it was before the stream (f91d295), every field drawn as one
    array and computed over whole columns. The stream must reproduce it exactly."""
    if s.trace:
        trace = read_trace(s.trace, s.max_model_len)
        n = min(s.requests, len(trace.prompt_len))
        prompts, outputs, arrivals = trace.prompt_len[:n], trace.output_len[:n], trace.arrival_s[:n]
        given_acc = trace.acceptance[:n]
    else:
        n = s.requests
        if s.prompt_len:
            prompts = np.full(n, s.prompt_len, dtype=np.int64)
        else:
            ds = CAT.datasets[s.dataset]
            lo, hi = ds.min_prompt, min(ds.max_prompt, s.max_model_len - s.output_len)
            weights = np.array([c.weight for c in ds.components], dtype=float)
            which = rng.choice(len(weights), size=n, p=weights / weights.sum())
            mu = np.array([c.mu for c in ds.components])[which]
            sigma = np.array([c.sigma for c in ds.components])[which]
            f_lo = normal_cdf((np.log(lo - 0.5) - mu) / sigma) if lo > 0.5 else np.zeros(n)
            f_hi = normal_cdf((np.log(hi + 0.5) - mu) / sigma)
            u = f_lo + rng.random(n) * (f_hi - f_lo)
            prompts = np.clip(np.rint(np.exp(mu + sigma * normal_quantile(u))), lo, hi).astype(np.int64)
        outputs = np.full(n, s.output_len, dtype=np.int64)
        if s.rate is None:
            arrivals = np.zeros(n)
        else:
            arrivals = np.cumsum(rng.exponential(1.0 / s.rate, size=n))
            arrivals -= arrivals[0]
        given_acc = np.full(n, np.nan)
    mean = s.acceptance
    if mean is None:
        prior = CAT.acceptance_prior(s.draft, s.target)
        mean = prior.alpha if prior is not None else None
    acceptance = given_acc.copy()
    if mean is not None:
        drawn = draw_request_acceptance(mean, s.acceptance_spread, n, rng)
        acceptance = np.where(np.isnan(given_acc), drawn, given_acc)
    abort_delay = np.full(n, np.nan)
    if s.abort_fraction > 0:
        cancels = rng.random(n) < s.abort_fraction
        delay = rng.uniform(0.0, s.abort_window_s, size=n)
        abort_delay = np.where(cancels, delay, np.nan)
    if s.n == 1:
        return Workload(arrivals, prompts, outputs, acceptance, abort_delay, acceptance_mean=mean)
    fan = [np.repeat(a, s.n) for a in (arrivals, prompts, outputs, acceptance, abort_delay)]
    return Workload(*fan, prompt=np.repeat(np.arange(len(prompts)), s.n), acceptance_mean=mean)


def _same_column(got: np.ndarray | None, want: np.ndarray | None, name: str) -> None:
    if want is None:
        assert got is None, name
        return
    assert got is not None and got.dtype == want.dtype, name
    assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name


def check_stream(s: Scenario, block: int, warm: bool = False) -> None:
    """The stream's blocks, joined, equal the oracle's columns (values, NaNs and dtypes), every
    block holds 1..block rows, and the Generator goes on exactly as after the oracle; so does
    make_workload (the blocks joined)."""
    def rng() -> np.random.Generator:
        g = np.random.default_rng(s.seed)
        if warm:   # a buffered 32-bit half in the bit generator's state must survive too
            g.integers(0, 10, dtype=np.int32)
        return g

    want_rng, got_rng, made_rng = rng(), rng(), rng()
    want = drawn_whole(s, want_rng)
    stream = workload_stream(s, CAT, got_rng, block=block)
    parts = list(stream.blocks())
    assert all(1 <= len(p) <= block for p in parts)
    assert stream.n == len(want) == sum(len(p) for p in parts)
    assert stream.acceptance_mean == want.acceptance_mean
    made = make_workload(s, CAT, made_rng)
    for name in COLUMNS:
        cols = [getattr(p, name) for p in parts]
        joined = None if cols[0] is None else np.concatenate(cols)
        _same_column(joined, getattr(want, name), name)
        _same_column(getattr(made, name), getattr(want, name), name)
    assert got_rng.bit_generator.state == want_rng.bit_generator.state
    assert made_rng.bit_generator.state == want_rng.bit_generator.state
    after = want_rng.random(5)
    assert np.array_equal(got_rng.random(5), after) and np.array_equal(made_rng.random(5), after)


@st.composite
def scenarios(draw) -> tuple[Scenario, int]:
    block = draw(st.sampled_from([1, 2, 3, 7, 64, 1000]))
    # Small blocks mean many blocks: keep their request counts down so the run stays short.
    requests = draw(st.integers(1, 300 if block < 64 else 3000))
    models = draw(st.sampled_from([
        dict(method="psd"),                                                   # the catalog prior
        dict(method="psd", acceptance=0.6),                                   # a given mean
        dict(method="ar", draft="qwen3-1.7b", target="llama-3.3-70b"),        # no draft: no beta
        dict(method="psd", draft="qwen3-0.6b", target="qwen3-8b", acceptance_spread=0.7),
    ]))
    s = Scenario(
        requests=requests, seed=draw(st.integers(0, 2**32 - 1)), n=draw(st.sampled_from([1, 2, 3])),
        rate=draw(st.sampled_from([None, 0.5, 4.0, 1e3])),
        abort_fraction=draw(st.sampled_from([0.0, 0.3, 1.0])),
        prompt_len=draw(st.sampled_from([0, 0, 100])),
        dataset=draw(st.sampled_from(["sharegpt", "arena", "spec-bench", "tough"])),
        output_len=draw(st.sampled_from([32, 256, 1500])), **models)
    return s, block


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_joined_blocks_are_the_whole_draws_bit_for_bit(case, warm):
    s, block = case
    check_stream(s, block, warm)


@pytest.mark.parametrize("block", [1, 7, 64])
@pytest.mark.parametrize("models", [dict(), dict(acceptance=0.7),
                                    dict(method="ar", draft="qwen3-1.7b", target="llama-3.3-70b")])
@pytest.mark.parametrize("requests, n, abort_fraction", [(1000, 1, 0.0), (30, 3, 0.4), (75, 2, 0.0)])
def test_a_trace_streams_as_it_replays(tmp_path, block, models, requests, n, abort_fraction):
    """A trace's rows are sliced block by block (its given acceptance kept as given, the highest
    the model takes included), the requests cap and the fan-out applied, the draws as for
    generated work."""
    rng = np.random.default_rng(7)
    rows = [{"arrival_s": float(t), "prompt_tokens": int(p), "output_tokens": int(o)}
            for t, p, o in zip(np.sort(rng.uniform(0, 60, 75)), rng.integers(1, 1000, 75),
                               rng.integers(1, 900, 75), strict=True)]
    for i in range(0, 75, 4):
        rows[i]["acceptance"] = MAX_ACCEPTANCE if i % 8 == 0 else 0.5
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = Scenario(trace=str(f), requests=requests, n=n, abort_fraction=abort_fraction, seed=3, **models)
    check_stream(s, block)


def test_the_default_block_splits_a_large_run():
    """make_workload's own blocks: a run longer than BLOCK crosses block boundaries too."""
    check_stream(Scenario(requests=2 * BLOCK + 5, n=2, rate=4.0, abort_fraction=0.2, dataset="spec-bench"),
                 block=BLOCK)


def test_a_block_smaller_than_a_fan_out_splits_the_prompt_s_samples():
    s = Scenario(requests=4, n=5, rate=1.0, prompt_len=64)
    parts = list(workload_stream(s, CAT, np.random.default_rng(0), block=2).blocks())
    assert [len(p) for p in parts] == [2, 2, 1] * 4
    assert np.concatenate([p.prompt for p in parts]).tolist() == np.repeat(np.arange(4), 5).tolist()


def test_a_stream_holds_memory_of_its_block_not_of_its_requests():
    """Two million requests (each float64 column of them would be 16 MB): creating the stream
    (its pass over every draw) and taking a few blocks of 4096 peaks far below one such column."""
    s = Scenario(requests=2_000_000, n=2, rate=4.0, abort_fraction=0.1)
    tracemalloc.start()
    try:
        stream = workload_stream(s, CAT, np.random.default_rng(0), block=4096)
        blocks = stream.blocks()
        taken = [len(next(blocks)) for _ in range(3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stream.n == 4_000_000 and taken == [4096] * 3
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB"
