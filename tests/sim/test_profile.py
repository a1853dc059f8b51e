"""Fitted profiles on the simulator side: the file format, FittedCost, and the run's warnings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psdsim.cli import main
from psdsim.sim.costs import AnalyticCost, Chunks
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile import FittedCost, unrecorded
from psdsim.sim.profile_reader import load_profile, profile_from_json
from psdsim.sim.profile_schema import FEATURES, Profile, Term
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

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


def _run_warnings(tmp_path: Path, profile: Profile, *sets: str) -> list[str]:
    path = write_file(tmp_path / "p.json", profile.to_json())
    return simulate(load_scenario(overrides=[f"profile={path}", "requests=20", "output_len=16", *sets])
                    ).summary["warnings"]


def test_a_profile_faster_than_reading_the_weights_once_is_flagged(tmp_path: Path) -> None:
    """A verify pass priced at 9 ms on 4 L40S running Qwen3-32B (16 GB of weights a GPU at
    864 GB/s: 18.5 ms) cannot describe that hardware: the run says so."""
    fast = Term("verify", (0.009, 1e-5, 1e-8), 100, 0.01, None, {"batch": (1, 16), "tokens": (4, 64)})
    w = _run_warnings(tmp_path, Profile({"verify": fast}))
    assert ("profile: prices a verify pass at 9.04 ms, below the 18.5 ms l40s takes to read "
            "qwen3-32b's weights once: it does not describe this hardware") in w
    assert not any("weights once" in x for x in _run_warnings(tmp_path, Profile({"verify": VERIFY})))
    # the same profile read for GPUs it can describe: no warning
    on_b200 = _run_warnings(tmp_path, Profile({"verify": fast}), "gpu=b200")
    assert not any("weights once" in x for x in on_b200)


@pytest.mark.parametrize("side", ["verify", "draft"])
def test_a_profile_of_1ns_kernels_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              side: str) -> None:
    """A trace whose kernels all took 1 ns calibrated to passes of 3 ns and ran at 8,718 tok/s,
    past what reading the weights allows: more than 10x below that floor is refused."""
    terms = {"verify": VERIFY, "draft": DRAFT,
             side: Term(side, (3e-9,) + (0.0,) * (len(FEATURES[side]) - 1), 40, 0.01, None)}
    path = write_file(tmp_path / "p1.json", Profile(terms).to_json())
    sets = ["--set", "requests=10", "--set", "output_len=16"]
    assert main(["run", "--no-write", "--profile", str(path), *sets]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"psdsim: error: profile: {path}: prices a {side} pass at 3e-06 ms, below the ")
    assert "over 10x below it" in err and err.count("\n") == 1


@pytest.mark.parametrize("terms, contention, side", [
    ({"verify": VERIFY, "draft": DRAFT}, {"verify": 0.1}, "verify"),
    ({"verify": VERIFY, "draft": DRAFT}, {"after_idle": {"verify": [[0.01, 0.1]]}}, "verify"),
    ({"verify": VERIFY, "draft": DRAFT, "prefill": Term("prefill", (1e-7, 0.0, 0.0, 0.0), 40, 0.01, None)},
     {}, "prefill"),
    ({"verify": VERIFY, "draft": DRAFT,
      "draft_prefill": Term("draft_prefill", (1e-9, 0.0, 0.0, 0.0), 40, 0.01, None)}, {}, "draft_prefill")])
def test_the_floor_holds_every_pass_at_its_fastest_factor(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          terms: dict[str, Term], contention: dict[str, Any],
                                                          side: str) -> None:
    """A contention or after-idle factor of 0.1 priced a 30 ms verify pass at 3 ms, and a prefill
    term of 0.1 us priced whole prompts at that: each below the weight-read floor, unchecked."""
    profile = Profile(terms, contention=contention)
    if side == "verify":   # 30.8 ms x 0.1 against 18.5 ms: under the floor, not 10x under it
        warnings = _run_warnings(tmp_path, profile, "drafter_gpu=l40s")
        assert any(w.startswith("profile: prices a verify pass at 3.08 ms, below the 18.5 ms")
                   for w in warnings)
        return
    path = write_file(tmp_path / "p.json", profile.to_json())
    assert main(["run", "--no-write", "--profile", str(path), "--set", "requests=10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"psdsim: error: profile: {path}: prices a {side} pass at "), err


def test_coefficients_the_run_takes_as_zero_are_noted(tmp_path: Path) -> None:
    """A profile listing fewer features than this psdsim's (the documented older-profile rule)
    and a term of zeros used to be taken as 0 without a word."""
    short = Term("verify", (0.03,), 100, 0.01, None)
    free = Term("broadcast", (0.0, 0.0), 100, 0.01, None)
    w = _run_warnings(tmp_path, Profile({"verify": short, "draft": DRAFT, "broadcast": free}))
    assert ("profile: verify lists 1 of this psdsim's features (an older psdsim's profile); tokens, ctx "
            "count 0") in w
    assert "profile: every broadcast coefficient is 0: that work costs nothing in this run" in w
    full = _run_warnings(tmp_path, Profile({"verify": VERIFY}))
    assert not any("count 0" in x or "costs nothing" in x for x in full)


def test_a_key_given_twice_is_refused_not_taken_last() -> None:
    text = _edited(lambda doc: None)
    assert '"coef": ' in text
    with pytest.raises(ScenarioError, match="key 'coef' given twice"):
        profile_from_json(text.replace('"coef": ', '"coef": [1.0], "coef": ', 1), "p.json")
