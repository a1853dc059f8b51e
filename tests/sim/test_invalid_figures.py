"""No summary figure that is NaN, infinite or lost to the clock's rounding is printed or written:
inputs each reader accepts can still combine into such a run, and every way a summary is made
(the Python API, `psdsim run`, `psdsim compare`) refuses it by name in one place
(sim/valid_figures.py), while figures that do not apply stay None and pass."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.sim.costs import ConstantCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile_reader import MAX_COEF_S
from psdsim.sim.profile_schema import FEATURES, Profile, Term
from psdsim.sim.run import compare_methods, simulate
from psdsim.sim.scenario import Scenario, load_scenario
from psdsim.sim.valid_figures import valid_figures

SMALL = ["requests=20", "output_len=32"]


def _slowest_profile(tmp_path: Path) -> Path:
    """A profile each of whose values its reader accepts (an hour per cached token is its largest
    coefficient: every priced step stays finite) but whose runs take longer than the clock resolves."""
    verify = Term("verify", (0.03, 1e-4, MAX_COEF_S), 100, 0.01, None)
    return write_file(tmp_path / "p.json", Profile({"verify": verify}).to_json())


def test_run_compare_and_simulate_refuse_the_same_absurd_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs each reader accepts whose run passes the clock's horizon: each way a summary is made
    stops with one line naming the figure and the profile, and writes nothing."""
    monkeypatch.chdir(tmp_path)
    match = (r"makespan_s \d\.\d+e\+\d+ s from the scenario's values with profile .*p\.json is past "
             r"the 1e\+09 s")
    sets = ["requests=20", f"profile={_slowest_profile(tmp_path)}"]
    s = load_scenario(overrides=sets)
    with pytest.raises(ScenarioError, match=match) as exc:
        simulate(s)
    assert exc.value.field == "summary"
    with pytest.raises(ScenarioError, match=match):
        compare_methods(s, ["sd", "psd"])
    args = [arg for item in sets for arg in ("--set", item)]
    for command in (["run", *args], ["compare", "--methods", "sd,psd", *args]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.startswith("psdsim: error: summary: ") and err.count("\n") == 1, err
        assert "Warning" not in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()   # nothing half-written


@pytest.mark.parametrize("bandwidth", [1e-300, 1e-307])
def test_a_link_no_hardware_has_is_refused_where_the_catalog_names_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], bandwidth: float) -> None:
    """A link of 1e-300 GB/s printed a makespan of 301 digits (1e-307: inf) beside normal-looking
    figures, exit 0: the catalog reader now refuses it, naming the entry, before any run."""
    catalog = tmp_path / "slow.toml"
    catalog.write_text(f"""[links.slowlink]
name = "absurdly slow"
nvlink = false
p2p_latency_us = 10.0
p2p_bandwidth_gbps = {bandwidth!r}
allreduce_latency_us = 30.0
allreduce_busbw_gbps = 20.0
source = "a test"
""")
    sets = [*SMALL, f"catalog={catalog}", "link=slowlink"]
    assert main(["run", "--no-write", *(arg for item in sets for arg in ("--set", item))]) == 2
    err = capsys.readouterr().err
    assert "link 'slowlink': p2p_bandwidth_gbps" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("method", ["ar", "sd", "psd", "pearl"])
@pytest.mark.parametrize("verify_s", [math.inf, math.nan, 1e308])
def test_an_infinite_or_nan_cost_model_is_refused_not_a_crash(method: str, verify_s: float) -> None:
    """A cost model given to simulate that prices inf or NaN: its clock went infinite and the
    arrival count ran past the last request (RuntimeError: generator raised StopIteration), or
    its summary held inf and NaN; now the summary refuses the figure by name."""
    s = Scenario(requests=8, m=4, k=3, output_len=16, prompt_len=32, seed=2, method=method)
    with pytest.raises(ScenarioError, match=r"^summary: [a-z_.0-9]+ came out (inf|nan) from") as exc:
        simulate(s, cost=ConstantCost(draft_s=0.004, verify_s=verify_s, prefill_s=0.001))
    assert "\n" not in str(exc.value)


def test_figures_that_do_not_apply_stay_none_and_pass() -> None:
    """AR has no drafts (no k, VSR, drafting time) and no SLO is set: those figures are None,
    as SUMMARY_KEYS says, and the run is not refused for them."""
    summary = simulate(Scenario(requests=12, output_len=16, prompt_len=32, method="ar")).summary
    for key in ("k", "vsr", "vsr_trim80", "mean_draft_ms", "drafter_busy", "slo_attainment", "goodput_tok_s"):
        assert summary[key] is None, key
    assert valid_figures(Scenario(), summary) is summary


def test_a_nested_figure_is_named_by_its_path() -> None:
    summary = {"makespan_s": 1.0, "latency_ms": {"mean": 1.0, "p50": math.nan}, "vsr": None}
    with pytest.raises(ScenarioError, match=r"summary: latency_ms\.p50 came out nan from the scenario's"):
        valid_figures(Scenario(), summary)


@pytest.mark.parametrize("coef", [0.0, 1e-300])
def test_a_profile_that_prices_every_step_at_nothing_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], coef: float) -> None:
    """Zero (or 1e-300) coefficients in every term printed a makespan and latencies of 0, or a
    throughput of 1e302 tok/s, exit 0: a run whose steps took under a nanosecond each is refused."""
    terms = {name: Term(name, (coef,) * len(features), 10, 0.01, None) for name, features in FEATURES.items()}
    profile = write_file(tmp_path / "p0.json", Profile(terms).to_json())
    sets = [*SMALL, f"profile={profile}"]
    with pytest.raises(ScenarioError, match=r"^summary: makespan_s \S+ from .*p0\.json means its \d+ steps "
                                            r"took under 1e-09 s each"):
        simulate(load_scenario(overrides=sets))
    assert main(["run", "--out", str(tmp_path / "r"), *(a for item in sets for a in ("--set", item))]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_zero_latencies_with_steps_are_refused() -> None:
    summary = {"makespan_s": 1.0, "decode_steps": 4, "latency_ms": {"mean": 0.0}}
    with pytest.raises(ScenarioError, match=r"^summary: latency_ms\.mean 0 from .* 4 steps took under"):
        valid_figures(Scenario(), summary)
