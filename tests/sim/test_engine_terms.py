"""The execution model inside simulated runs: MineDraft's published setting2 point, and the named
terms (driver prep, framework work, extra draft rows) in the step table where the real code has
them.

The setting2 point (MineDraft's Nsight profile): Qwen3-32B on 4xL40S at TP=4,
Qwen3-1.7B on a fifth L40S, vLLM 0.9.2 V0 --enforce-eager, m=16, k=3: drafting 49.6 ms and
verification 48.6 ms per step; at k=4 drafting ~25% over verification. It set two constants of
the engine profile (docs/engine-costs.md); these tests hold the model to it."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario
from tests.helpers import paths
from tests.helpers.scenarios import decode_rows


def _per_step(k: int) -> tuple[float, float]:
    st = simulate(load_scenario(preset="setting2", overrides=[f"k={k}"])).steps
    d = st["kind"] == "decode"
    return float(st["draft_s"][d].mean()), float(st["verify_s"][d].mean())


@pytest.fixture(scope="module")
def setting2() -> dict[int, tuple[float, float]]:
    return {k: _per_step(k) for k in (3, 4)}


def test_setting2_k3_is_minedrafts_published_point(setting2: dict[int, tuple[float, float]]) -> None:
    draft, verify = setting2[3]
    assert draft == pytest.approx(49.6e-3, rel=0.10)
    assert verify == pytest.approx(48.6e-3, rel=0.10)


def test_setting2_k4_drafting_is_15_to_35_percent_over_verification(
        setting2: dict[int, tuple[float, float]]) -> None:
    draft, verify = setting2[4]
    assert 1.15 <= draft / verify <= 1.35


def test_the_roofline_engine_misses_the_point_it_is_kept_for_what_ifs() -> None:
    s = load_scenario(preset="setting2", overrides=["k=3", "engine=roofline", "requests=200"])
    st = simulate(s).steps
    d = st["kind"] == "decode"
    assert st["draft_s"][d].mean() < 0.6 * 49.6e-3     # the 23.5 ms
    assert not st["prep_s"].any() and not st["extra_rows"].any()


def _small(**changes: object) -> Scenario:
    return Scenario(**{**dict(requests=48, m=4, k=3, output_len=24, prompt_len=64, seed=3,
                              acceptance=0.8), **changes})


def test_psd_pays_driver_prep_framework_on_2m_and_extra_rows() -> None:
    s = _small()
    r = simulate(s)
    st, rows = r.steps, decode_rows(r.steps)
    assert (st["prep_s"][rows] > 0).all()
    assert (st["prep_s"] <= st["draft_s"]).all()           # a named part of drafting
    assert st["extra_rows"][rows].sum() > 0                 # acceptance 0.8: many all-accepted
    # framework: 62.2 us + 13.6 us per running request (PSD runs 2m) + 42.2 us per verified request
    expected = 0.0622e-3 + st["running"][rows] * 13.6e-6 + st["verified"][rows] * 42.2e-6
    np.testing.assert_allclose(st["framework_s"][rows], expected, rtol=1e-12)


def test_sd_co_located_has_no_driver_prep_but_the_same_framework_and_extra_rows() -> None:
    r = simulate(_small(method="sd"))
    st, rows = r.steps, decode_rows(r.steps)
    assert not st["prep_s"].any()
    assert st["extra_rows"][rows].sum() > 0
    np.testing.assert_allclose(st["framework_s"][rows],
                               0.0622e-3 + st["running"][rows] * 13.6e-6 + st["verified"][rows] * 42.2e-6)


def test_the_timeline_draws_the_driver_prep() -> None:
    r = simulate(_small(requests=16), timeline=True)
    assert r.timeline is not None
    prep = [x for x in r.timeline.slices if x.name == "driver prep"]
    assert prep and all(x.end_s > x.start_s for x in prep)
    assert sum(x.end_s - x.start_s for x in prep) == pytest.approx(float(r.steps["prep_s"].sum()))


def test_the_named_terms_inside_a_target_pass() -> None:
    # PSD on the MineDraft engine: rank 1 rebuilds each pass's inputs (0.3 ms + 13.4 us per request
    # to prepare, 1.17 ms + metadata_request_us per request to receive the metadata), two Timer
    # syncs of 20 us, and the gathered logits are sampled: each a part of verify_s.
    from psdsim.sim.catalog import builtin_catalog
    per_request = builtin_catalog().engines["vllm-0.9.2-v0-eager"].metadata_request_us
    r = simulate(_small())
    st, rows = r.steps, decode_rows(r.steps)
    verified = st["verified"][rows]
    np.testing.assert_allclose(st["verify_prep_s"][rows],
                               0.3e-3 + verified * 13.4e-6 + 1.17e-3 + verified * per_request * 1e-6)
    np.testing.assert_allclose(st["timer_s"][rows], 40e-6)
    assert (st["sample_s"][rows] > 0).all()
    parts = st["verify_prep_s"] + st["timer_s"] + st["sample_s"]
    assert (parts[rows] < st["verify_s"][rows]).all()
    roof = simulate(_small(engine="roofline")).steps
    assert not (roof["verify_prep_s"].any() or roof["timer_s"].any() or roof["sample_s"].any())


def test_the_ring_drafts_the_extra_rows_in_the_background_too() -> None:
    """vLLM V0's MultiStepWorker drafts one more row for each request whose drafts were all
    accepted, whoever calls it: the ring's drafter workers pay it as MineDraft's driver does
    (counted in the step under way), and the roofline, which has no such engine, does not."""
    s = _small(sub_batches=3, drafters=2)
    st = simulate(s).steps
    assert st["extra_rows"][decode_rows(st)].sum() > 0
    fewer = simulate(s.replace(acceptance=0.05)).steps   # almost never all accepted
    assert fewer["extra_rows"].sum() < st["extra_rows"].sum()
    assert not simulate(s.replace(engine="roofline")).steps["extra_rows"].any()


def _fastest_step_fits() -> dict[str, tuple[float, float, float]]:
    """The fastest-step fits of docs/measurements/vllm_v0_host.md: part -> (fixed, per sequence,
    per sequence per draft token), in microseconds."""
    text = (paths.ROOT / "docs" / "measurements" / "vllm_v0_host.md").read_text()
    block = text.split("Fastest step of each configuration")[1].split("```")[1]
    fits = {}
    for line in block.splitlines():
        cells = line.rsplit(None, 6)
        if len(cells) == 7 and not line.startswith("part"):
            fits[cells[0].strip()] = (float(cells[1]), float(cells[2]), float(cells[3]))
    return fits


def test_the_v0_host_constants_are_the_measured_fits_at_k3() -> None:
    """engines.toml's V0 host constants are the recorded fastest-step fits evaluated at k = 3
    (docs/engine-costs.md, "The V0 host side, measured"): no constant drifts from its record."""
    e = builtin_catalog().engines["vllm-0.9.2-v0-eager"]
    fits, k = _fastest_step_fits(), 3

    def per_seq(part: str) -> float:
        return fits[part][1] + fits[part][2] * k

    assert e.step_ms * 1e3 == pytest.approx(fits["schedule"][0], rel=0.01)
    assert e.step_request_us == pytest.approx(per_seq("schedule"), rel=0.01)
    assert e.output_request_us == pytest.approx(per_seq("process detok") + per_seq("outputs"), rel=0.01)
    assert e.sampler_host_ms * 1e3 == pytest.approx(fits["sampler"][0], rel=0.01)
    assert e.sampler_host_row_us == pytest.approx(per_seq("sampler") / (k + 1), rel=0.01)
    # the proposer's and the scorer's bookkeeping; rejection and output lists have their own terms
    spec = [fits["propose"][i] + fits["score"][i] for i in range(3)]
    assert e.spec_worker_ms * 1e3 == pytest.approx(spec[0], rel=0.01)
    assert e.spec_worker_request_us == pytest.approx(spec[1], rel=0.01)
    assert e.spec_worker_draft_us == pytest.approx(spec[2], rel=0.01)
