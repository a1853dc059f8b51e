"""Requests drawn from dataset profiles, arrivals and acceptance."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, catalog_for, validate
from psdsim.sim.workload import make_workload, sample_prompt_lengths

CAT = builtin_catalog()


@pytest.mark.parametrize("name", ["sharegpt", "arena", "spec-bench", "tough"])
def test_prompt_lengths_respect_the_dataset_filter(name):
    ds = CAT.datasets[name]
    lengths = sample_prompt_lengths(ds, 20_000, 1792, np.random.default_rng(0))
    assert lengths.min() >= ds.min_prompt and lengths.max() <= min(ds.max_prompt, 1792)


def test_sharegpt_profile_matches_the_reference_estimate():
    """docs/reference/hardware_models_workloads.md §3.1 estimates ShareGPT first turns under
    MineDraft's 256-1792-token filter at median 415, p10 260, p90 770, mean 530 (from a 310-prompt
    sample); one lognormal truncated to the filter meets each within 10%, not exactly."""
    lengths = sample_prompt_lengths(CAT.datasets["sharegpt"], 50_000, 1792, np.random.default_rng(1))
    assert np.median(lengths) == pytest.approx(415, rel=0.10)
    assert np.percentile(lengths, 10) == pytest.approx(260, rel=0.10)
    assert np.percentile(lengths, 90) == pytest.approx(770, rel=0.10)
    assert lengths.mean() == pytest.approx(530, rel=0.10)


def test_arena_and_tough_profiles_match_the_reference_estimates():
    """§3.2: Arena first turns after the >=16-token filter, mean ~80-120 and median ~40-60 tokens;
    §3.4: the tough questions, ~283 bytes each, ~50-70 tokens."""
    rng = np.random.default_rng(2)
    arena = sample_prompt_lengths(CAT.datasets["arena"], 50_000, 1792, rng)
    assert 80 <= arena.mean() <= 120 and 40 <= np.median(arena) <= 60
    tough = sample_prompt_lengths(CAT.datasets["tough"], 50_000, 1792, rng)
    assert 50 <= np.median(tough) <= 70


def test_prompt_room_shrinks_with_output_len():
    s = Scenario(output_len=1500, requests=500)
    w = make_workload(s, CAT, np.random.default_rng(0))
    assert w.prompt_len.max() <= s.max_model_len - s.output_len


def test_poisson_arrivals_have_the_requested_rate():
    s = Scenario(rate=4.0, requests=20_000)
    w = make_workload(s, CAT, np.random.default_rng(2))
    assert w.arrival_s[0] == 0.0 and (np.diff(w.arrival_s) >= 0).all()
    assert (len(w) - 1) / w.arrival_s[-1] == pytest.approx(4.0, rel=0.03)


def test_acceptance_defaults_to_the_catalog_prior():
    w = make_workload(Scenario(requests=20_000), CAT, np.random.default_rng(3))
    prior = CAT.acceptance_prior("qwen3-1.7b", "qwen3-32b").alpha
    assert w.acceptance.mean() == pytest.approx(prior, abs=0.01)


def test_accepted_counts_follow_the_capped_geometric_law():
    rng = np.random.default_rng(4)
    sampler = AcceptanceSampler(rng)
    a, k, n = 0.7, 4, 200_000
    accepted = sampler.accepted(np.full(n, np.log(a)), np.full(n, k))
    expected = [a**j * (1 - a) for j in range(k)] + [a**k]
    observed = np.bincount(accepted, minlength=k + 1) / n
    assert observed == pytest.approx(expected, abs=0.005)
    # Zero proposals accept nothing.
    assert (sampler.accepted(np.full(10, np.log(a)), np.zeros(10)) == 0).all()


def test_n_samples_per_prompt_fan_out_and_report_per_prompt():
    """SamplingParams.n: each prompt becomes n requests with its prompt, arrival and acceptance;
    the summary counts prompts, and a prompt's latency ends with its last sample, its TTFT with
    its first sample's first token."""
    s = Scenario(requests=30, n=3, output_len=24, seed=5, rate=2.0)
    r = simulate(s)
    req, sm = r.requests, r.summary
    assert sm["requests"] == 30 and sm["sequences"] == 90
    assert req["generated"].sum() == 90 * 24
    for column in ("prompt_len", "arrival_s", "acceptance"):
        grouped = req[column].reshape(30, 3)
        assert (grouped == grouped[:, :1]).all(), column
    latency = (req["finish_s"] - req["arrival_s"]).reshape(30, 3).max(axis=1) * 1e3
    ttft = (req["first_token_s"] - req["arrival_s"]).reshape(30, 3).min(axis=1) * 1e3
    assert sm["latency_ms"]["p50"] == pytest.approx(np.percentile(latency, 50))
    assert sm["ttft_ms"]["mean"] == pytest.approx(ttft.mean())
    assert sm["e2el_ms"] == pytest.approx(sm["makespan_s"] / 30 * 1e3)
    with pytest.raises(ScenarioError, match=r"^n: "):
        validate(s.replace(n=0))


def test_the_standard_library_normal_gives_scipys_prompt_lengths():
    """The prompt lengths come from math.erfc and NormalDist.inv_cdf (no scipy.special at start-up):
    rounded to whole tokens they are the lengths scipy's ndtr/ndtri give, draw for draw. (Over
    7.2 M draws, 4 datasets x 3 seeds x 3 caps, not one differed; here 800 k of them.)"""
    from scipy.special import ndtr, ndtri

    from psdsim.sim.workload import normal_cdf, normal_quantile

    x = np.linspace(-9.0, 9.0, 20_001)
    np.testing.assert_allclose(normal_cdf(x), ndtr(x), rtol=1e-13, atol=0)
    p = np.linspace(0.0, 1.0, 20_001)
    np.testing.assert_allclose(normal_quantile(p)[1:-1], ndtri(p)[1:-1], rtol=1e-13, atol=1e-15)
    assert normal_quantile(np.array([0.0, 1.0])).tolist() == [-np.inf, np.inf]
    for seed, name in enumerate(["sharegpt", "arena", "spec-bench", "tough"]):
        ds = CAT.datasets[name]
        rng = np.random.default_rng(seed)
        lo, hi = ds.min_prompt, min(ds.max_prompt, 1792)
        weights = np.array([c.weight for c in ds.components])
        which = rng.choice(len(weights), size=200_000, p=weights / weights.sum())
        mu = np.array([c.mu for c in ds.components])[which]
        sigma = np.array([c.sigma for c in ds.components])[which]
        f_lo = ndtr((np.log(lo - 0.5) - mu) / sigma) if lo > 0.5 else np.zeros(len(mu))
        f_hi = ndtr((np.log(hi + 0.5) - mu) / sigma)
        u = f_lo + rng.random(len(mu)) * (f_hi - f_lo)
        scipys = np.clip(np.rint(np.exp(mu + sigma * ndtri(u))), lo, hi).astype(np.int64)
        ours = sample_prompt_lengths(ds, 200_000, 1792, np.random.default_rng(seed))
        assert np.array_equal(ours, scipys)


@pytest.mark.parametrize("mu, window_ok", [(20.0, False), (5.6, True)])
def test_a_component_with_no_prompts_in_the_window_is_refused_naming_the_dataset(tmp_path, mu, window_ok):
    """A component far outside [min_prompt, max_prompt] would pin every prompt it draws at a bound."""
    f = tmp_path / "ds.toml"
    f.write_text("[datasets.dd]\nmax_requests = 0\nmin_prompt = 256\nmax_prompt = 300\n"
                 f"components = [{{ weight = 1.0, mu = {mu}, sigma = 0.01 }}]\nsource = 't'\n")
    s = Scenario(catalog=str(f), dataset="dd", requests=10, output_len=16)
    if window_ok:
        lengths = make_workload(s, catalog_for(s), np.random.default_rng(0)).prompt_len
        assert ((lengths >= 256) & (lengths <= 300)).all()
    else:
        with pytest.raises(ScenarioError, match=r"^dataset: dd: component 1 .* puts 0 of its prompts"):
            make_workload(s, catalog_for(s), np.random.default_rng(0))
