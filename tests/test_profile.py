"""Fitted profiles on the simulator side: the file format, FittedCost, and the run's warnings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from psdsim.sim.costs import AnalyticCost, Chunks
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.results import write_file
from psdsim.sim.profile import FittedCost, Profile, Term, load_profile, profile_from_json, unrecorded
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

from psdsim.cli import main

DRAFT = Term("draft", (2e-3, 1e-6, 3e-9), 100, 0.01, 0.012, {"batch": (4, 16), "k": (1, 5), "ctx": (0, 1e6)})
VERIFY = Term("verify", (0.03, 1e-4, 1e-7), 100, 0.01, 0.011,
              {"batch": (4, 16), "tokens": (8, 96), "ctx": (0, 1e6)})
PREFILL = Term("prefill", (0.01, 2e-4, 1e-9, 0.0), 50, 0.03, None, {"tokens": (10, 20000)})


def _profile(**source: object) -> Profile:
    return Profile({"draft": DRAFT, "verify": VERIFY, "prefill": PREFILL}, dict(source),
                   {"vsr": 0.6}, ("a note",))


def test_the_json_form_round_trips() -> None:
    p = _profile(gpu="l40s", traces=[{"path": "x.sqlite", "sha256": "ab"}])
    back = profile_from_json(p.to_json())
    assert back == p


HEAD = '{"format": "psdsim-profile", "version": 1, '


@pytest.mark.parametrize(("text", "match"), [
    ("{", "not JSON"),
    ('{"format": "other"}', "not a psdsim profile"),
    ('{"format": "psdsim-profile", "version": 9, "terms": {}}', "version 9"),
    (HEAD + '"terms": {}}', "no fitted terms"),
    (HEAD + '"terms": {"draft": {"coef": [1, 2]}}}', "terms.draft.coef: must be a list of 4"),
    (HEAD + '"terms": {"gpu": {"coef": [1]}}}', "terms.gpu: unknown term"),
])
def test_bad_profiles_are_one_line_errors(text: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match) as exc:
        profile_from_json(text, "p.json")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("profile:")


def _edited(edit: Callable[[dict[str, Any]], None]) -> str:
    """A valid profile's JSON with one value changed by `edit`."""
    doc = json.loads(_profile().to_json())
    doc["contention"] = {"draft": 1.1, "verify": 1.05, "after_idle": {"verify": [[0.01, 1.2]]}}
    doc["acceptance"] = {"vsr": 0.6, "per_token": 0.7}
    edit(doc)
    return json.dumps(doc)


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value
    return edit


@pytest.mark.parametrize(("path", "value", "match"), [
    (("terms", "verify", "coef", 1), -1e-4, r"terms\.verify\.coef\[1\]: -0\.0001 is outside \[0, 3600\]"),
    (("terms", "verify", "coef", 0), 1e308, r"terms\.verify\.coef\[0\]: 1e\+308 is outside"),
    (("terms", "draft", "coef", 2), "3e-9", r"coef\[2\]: must be a finite number.*got \"3e-9\""),
    (("terms", "draft", "coef", 0), True, r"terms\.draft\.coef\[0\]: must be a finite number.*got true"),
    (("terms", "draft", "samples"), "many", r"terms\.draft\.samples: must be a whole number"),
    (("terms", "draft", "samples"), -3, r"terms\.draft\.samples: must be a whole number"),
    (("terms", "draft", "mape"), -0.5, r"terms\.draft\.mape: -0\.5 is outside"),
    (("terms", "verify", "cv_mape"), "low", r"terms\.verify\.cv_mape: must be a finite number"),
    (("terms", "verify", "ranges", "batch"), [16, 4], r"terms\.verify\.ranges\.batch: low 16 above high 4"),
    (("terms", "verify", "ranges", "batch"), [4, 1e300], r"terms\.verify\.ranges\.batch\[1\]: 1e\+300"),
    (("terms", "verify", "ranges", "bach"), [4, 16], r"terms\.verify\.ranges\.bach: unknown key"),
    (("terms", "verify", "dropped"), {"outlier": 1.5}, r"terms\.verify\.dropped\.outlier: must be a whole"),
    (("terms", "verify", "fixed_features"), ["speed"], r"terms\.verify\.fixed_features: .* not all among"),
    (("acceptance",), "high", r"acceptance: must be an object, got \"high\""),
    (("acceptance", "vsr"), 1.5, r"acceptance\.vsr: 1\.5 is outside \[0, 1\]"),
    (("acceptance", "per_token"), None, r"acceptance\.per_token: must be a finite number"),
    (("contention", "verify"), 1e308, r"contention\.verify: 1e\+308 is outside \[0\.1, 100\]"),
    (("contention", "verify"), 0.01, r"contention\.verify: 0\.01 is outside \[0\.1, 100\] \(a slowdown"),
    (("contention", "after_idle", "verify", 0, 1), 0.01, r"contention\.after_idle\.verify\[0\]\[1\]: 0\.01"),
    (("contention", "draft"), 0, r"contention\.draft: 0 is outside"),
    (("contention", "verfy"), 1.1, r"contention\.verfy: unknown key"),
    (("contention", "after_idle", "verify", 0, 1), 1e9, r"contention\.after_idle\.verify\[0\]\[1\]: 1e\+09"),
    (("contention", "after_idle", "verify", 0, 0), -1, r"contention\.after_idle\.verify\[0\]\[0\]: -1 is"),
    (("contention", "after_idle", "drafter"), [], r"contention\.after_idle\.drafter: unknown key"),
    (("notes",), [1], r"notes\[0\]: must be text"),
    (("source",), [], r"source: must be an object"),
])
def test_every_profile_value_is_checked_where_it_is_read(path: tuple[str | int, ...], value: Any,
                                                         match: str) -> None:
    """A wrong type, a value of the wrong sign or an absurd magnitude is an error naming its JSON
    path; none is clamped, ignored or left to fail later (a bare ValueError, an infinite step)."""
    with pytest.raises(ScenarioError, match=match) as exc:
        profile_from_json(_edited(_set(path, value)), "p.json")
    assert str(exc.value).startswith("profile: p.json: ") and "\n" not in str(exc.value)


def test_the_edited_profile_is_valid_unedited() -> None:
    assert profile_from_json(_edited(lambda doc: None)).contention_factors == (1.1, 1.05)


def test_a_profile_built_in_code_with_a_negative_coefficient_is_refused_not_clamped() -> None:
    s = load_scenario()
    negative = Profile({"verify": Term("verify", (0.03, -1e-4, 1e-7), 100, 0.01, None)})
    with pytest.raises(ScenarioError, match=r"terms\.verify\.coef\[1\]: -0\.0001 is outside"):
        FittedCost(negative, AnalyticCost(s, catalog_for(s)))


def test_fitted_terms_price_steps_and_the_rest_falls_back() -> None:
    s = load_scenario()
    analytic = AnalyticCost(s, catalog_for(s))
    cost = FittedCost(_profile(), analytic)
    assert cost.draft(8, 3, 1000) == pytest.approx(3 * 2e-3 + 24e-6 + 3e-9 * (3000 + 8 * 3))
    assert cost.verify(8, 32, 5000) == pytest.approx(0.03 + 32e-4 + 5e-4)
    chunks = Chunks(tokens=100, pairs=5000.0, ctx=0, completing=1)
    assert cost.verify(0, 0, 0, chunks) == pytest.approx(0.01 + 0.02 + 5e-6)
    # a mixed pass shares the weight read: the prefill term without its fixed part
    assert cost.verify(8, 32, 5000, chunks) == pytest.approx(0.03 + 32e-4 + 5e-4 + 0.02 + 5e-6)
    assert cost.comm(12345) == analytic.comm(12345)
    assert cost.overhead == analytic.overhead
    assert cost.draft_chunks(chunks) == analytic.draft_chunks(chunks)
    warnings = cost.warnings()
    assert any("no fitted draft_prefill, comm, broadcast, reject, overhead" in w for w in warnings)
    assert not any("extrapolated" in w for w in warnings)
    cost.draft(64, 3, 10)
    assert any(w.startswith("profile: draft batch 8-64 used, fitted on 4-16") for w in cost.warnings())


def test_what_if_prices_are_not_sizes_the_run_used() -> None:
    """Adaptive k prices every candidate k' and drafts one: only what ran counts for the
    profile's range warnings."""
    s = load_scenario()
    cost = FittedCost(_profile(), AnalyticCost(s, catalog_for(s)))
    with unrecorded(cost):
        cost.draft(64, 3, 10)
        cost.verify(64, 400, 10)
    assert not any("used, fitted" in w for w in cost.warnings())
    cost.draft(64, 3, 10)
    assert any(w.startswith("profile: draft batch 64-64 used") for w in cost.warnings())


def test_a_run_with_a_profile_warns_where_it_extrapolates_and_where_the_hardware_differs(
        tmp_path: Path) -> None:
    path = write_file(tmp_path / "p.json", _profile(gpu="h100-sxm", target="qwen3-32b").to_json())
    s = load_scenario(overrides=[f"profile={path}", "requests=40", "output_len=32"])
    result = simulate(s)
    w = result.summary["warnings"]
    assert "profile: fitted for gpu h100-sxm, scenario has l40s" in w
    assert not any("target" in x for x in w)
    assert any(x.startswith("profile: verify batch") and "fitted on 4-16" in x for x in w)
    analytic = simulate(s.replace(profile=""))
    assert result.summary["throughput_tok_s"] != analytic.summary["throughput_tok_s"]


def test_cli_reads_profiles_and_rejects_bad_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_file(tmp_path / "p.json", _profile().to_json())
    assert main(["run", "--profile", str(good), "--set", "requests=20", "--set", "output_len=16",
                 "--no-write", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert any(w.startswith("profile:") for w in summary["warnings"])
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["run", "--profile", str(tmp_path / "bad.json"), "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a psdsim profile" in err
    assert main(["run", "--profile", str(tmp_path / "missing.json"), "--no-write"]) == 2
    assert "not found" in capsys.readouterr().err


def test_load_profile_reads_files() -> None:
    with pytest.raises(ScenarioError, match="not found"):
        load_profile("/nonexistent/profile.json")
