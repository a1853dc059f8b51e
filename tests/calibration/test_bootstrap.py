"""A fitted profile's uncertainty: bootstrap resamples of each term's samples, refitted, kept as
whole coefficient vectors in the profile's optional `bootstrap` field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from psdsim.calibration.calibrate import bootstrap_fits, calibrate
from psdsim.calibration.fit import BOOTSTRAP_RESAMPLES, MIN_BOOTSTRAP_SAMPLES, bootstrap_term, fit_term
from psdsim.calibration.report import report_lines
from psdsim.calibration.samples import StepSample
from psdsim.calibration.synthetic import write_cost_trace
from psdsim.sim.errors import ScenarioError
from psdsim.sim.profile_reader import profile_from_json
from psdsim.sim.profile_schema import TERMS, verify_features
from tests.helpers import paths

SAMPLE_TRACE = paths.ROOT / "examples" / "sample-trace.sqlite"
TRUE_VERIFY = (0.03, 8e-5, 3e-7)   # per pass, per token, per cached token read


def _verify_samples(rng: np.random.Generator, n: int, noise: float) -> list[StepSample]:
    out = []
    for _ in range(n):
        tokens, ctx = float(rng.integers(8, 256)), float(rng.integers(1000, 60000))
        t = float(np.dot(TRUE_VERIFY, verify_features(tokens, ctx))) * (1 + noise * rng.standard_normal())
        out.append(StepSample("verify", 0.0, t, t, t, batch=tokens / 4, tokens=tokens, ctx=ctx))
    return out


def test_noise_free_samples_give_a_zero_width_bootstrap() -> None:
    """Every resample of exact samples fits the same coefficients: the fit has no uncertainty."""
    fit = fit_term("verify", _verify_samples(np.random.default_rng(3), 60, noise=0.0))
    assert fit is not None
    vectors = np.array(bootstrap_term(fit, np.random.default_rng(0)))
    assert vectors.shape == (BOOTSTRAP_RESAMPLES, 3)
    assert np.ptp(vectors, axis=0) == pytest.approx(0.0, abs=1e-9 * max(TRUE_VERIFY))
    assert vectors[0] == pytest.approx(TRUE_VERIFY, rel=1e-9)


def test_on_noisy_samples_the_90_percent_interval_covers_the_truth_in_most_trials() -> None:
    """A real coverage check: in M seeded trials of 40 samples with 3% noise, the 5th-95th
    percentile of the resampled per-token cost contains the true one in most (a 90% interval
    gives about 90%; the bootstrap's intervals run a little narrow at small n)."""
    trials, covered = 40, 0
    for trial in range(trials):
        fit = fit_term("verify", _verify_samples(np.random.default_rng(100 + trial), 40, noise=0.03))
        assert fit is not None
        per_token = np.array(bootstrap_term(fit, np.random.default_rng(trial)))[:, 1]
        low, high = np.quantile(per_token, (0.05, 0.95))
        assert low < high   # noise gives a real width
        covered += bool(low <= TRUE_VERIFY[1] <= high)
    assert covered >= 0.75 * trials


def test_vectors_are_ordered_by_the_mean_time_they_price() -> None:
    fit = fit_term("verify", _verify_samples(np.random.default_rng(5), 40, noise=0.03))
    assert fit is not None
    means = [fit.mean_time(v) for v in bootstrap_term(fit, np.random.default_rng(1))]
    assert means == sorted(means)


def test_a_term_with_too_few_samples_is_said_and_gets_no_interval() -> None:
    few = fit_term("verify", _verify_samples(np.random.default_rng(6), MIN_BOOTSTRAP_SAMPLES - 1, 0.03))
    many = fit_term("verify", _verify_samples(np.random.default_rng(7), MIN_BOOTSTRAP_SAMPLES, 0.03))
    assert few is not None and many is not None
    assert bootstrap_fits({"verify": few}).too_few == {"verify": MIN_BOOTSTRAP_SAMPLES - 1}
    assert bootstrap_fits({"verify": few}).terms == {}
    assert set(bootstrap_fits({"verify": many}).terms) == {"verify"}


@pytest.fixture(scope="module")
def sample_calibration():
    return calibrate([SAMPLE_TRACE])


def test_the_point_coefficients_are_the_fit_alone(sample_calibration) -> None:
    """The bootstrap adds a field and changes nothing else: every term is what fit_term gives on
    the same samples, and the JSON without `bootstrap` is the point profile's JSON."""
    cal = sample_calibration
    for name, fitted in cal.fits.items():
        alone = fit_term(name, [s for s in cal.samples if s.kind == name])
        assert alone is not None and alone.term == fitted.term
    doc = json.loads(cal.profile.to_json())
    assert set(doc.pop("bootstrap")["terms"]) == set(TERMS)   # the sample trace has enough of each
    assert doc == json.loads(replace(cal.profile, bootstrap=None).to_json())


def test_the_same_trace_and_seed_give_the_same_profile_bytes(sample_calibration, tmp_path: Path) -> None:
    again = calibrate([SAMPLE_TRACE])
    assert again.profile.to_json() == sample_calibration.profile.to_json()
    other = bootstrap_fits(sample_calibration.fits, seed=1)
    assert other.terms["verify"] != sample_calibration.profile.bootstrap.terms["verify"]


def test_the_bootstrap_round_trips_and_calibrate_says_each_interval(sample_calibration) -> None:
    profile = sample_calibration.profile
    assert profile_from_json(profile.to_json()) == profile
    lines = report_lines(sample_calibration)
    head = next(i for i, line in enumerate(lines) if line.startswith("fit uncertainty"))
    shown = lines[head + 1:head + 1 + len(TERMS)]
    assert [line.split()[0] for line in shown] == list(TERMS)
    assert all(" to " in line for line in shown)


def test_a_profile_without_bootstrap_reads_as_a_point(sample_calibration) -> None:
    doc = json.loads(sample_calibration.profile.to_json())
    del doc["bootstrap"]
    point = profile_from_json(json.dumps(doc))
    assert point.bootstrap is None
    assert point == replace(sample_calibration.profile, bootstrap=None)


def _with_bootstrap(sample_calibration, path: tuple, value) -> str:
    """The sample profile's JSON with one value of its bootstrap set."""
    doc = json.loads(sample_calibration.profile.to_json())
    target = doc["bootstrap"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(doc)


@pytest.mark.parametrize(("path", "value", "match"), [
    (("terms", "verify", 0, 1), -1e-5, r"bootstrap\.terms\.verify\[0\]\[1\]: -1e-05 is outside \[0, 3600\]"),
    (("terms", "verify", 0, 1), "fast", r"bootstrap\.terms\.verify\[0\]\[1\]: must be a finite number"),
    (("terms", "verify", 0), [0.1], r"bootstrap\.terms\.verify\[0\]: must be a list of 3"),
    (("terms", "verify"), [[0.1, 0, 0]], r"bootstrap\.terms\.verify: must list at least 2"),
    (("terms", "gpu"), [[0.1]] * 2, r"bootstrap\.terms\.gpu: no fitted gpu term"),
    (("seeds",), 3, r"bootstrap\.seeds: unknown key"),
    (("seed",), -1, r"bootstrap\.seed: must be a whole number"),
    (("too_few", "verify"), 2.5, r"bootstrap\.too_few\.verify: must be a whole"),
    (("terms",), [], r"bootstrap\.terms: must be an object"),
])
def test_a_malformed_bootstrap_is_refused_in_one_line_naming_it(sample_calibration, path, value,
                                                               match) -> None:
    with pytest.raises(ScenarioError, match=match) as exc:
        profile_from_json(_with_bootstrap(sample_calibration, path, value), "p.json")
    assert str(exc.value).startswith("profile: p.json: bootstrap") and "\n" not in str(exc.value)


def test_calibrate_names_a_term_too_small_to_bootstrap(tmp_path: Path) -> None:
    """A trace of 20 verify passes and 5 rejection calls: verify is resampled, reject is named in
    the profile, its notes and the report, with no interval."""
    rng = np.random.default_rng(4)
    calls = [("verify", {"batch": b, "tokens": 4 * b, "ctx": 900 * b}, 0.03 + 3e-4 * b)
             for b in rng.integers(1, 33, 20).tolist()]
    calls += [("reject", {"positions": p}, 3e-4 + 1e-6 * p) for p in (8, 16, 24, 32, 40)]
    write_cost_trace(calls, tmp_path / "t.sqlite", rng=rng, noise=0.02)
    cal = calibrate([tmp_path / "t.sqlite"])
    boot = cal.profile.bootstrap
    assert set(boot.terms) == {"verify"} and boot.too_few == {"reject": 5}
    assert any(n.startswith(f"reject: 5 samples, fewer than {MIN_BOOTSTRAP_SAMPLES} to bootstrap")
               for n in cal.profile.notes)
    assert any(line.split()[:1] == ["reject"] and "too few to resample" in line for line in report_lines(cal))
    assert profile_from_json(cal.profile.to_json()).bootstrap == boot
