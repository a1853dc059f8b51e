"""`psdsim plan`: the plan file, the rate search, the Pareto front and the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.commands.common import study_out
from psdsim.sim.errors import ScenarioError
from psdsim.sim.profile_schema import FEATURES
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
from psdsim.studies.plan import configurations, load_plan, max_rate, violations
from psdsim.studies.plan_verdict import CONFIG_KEYS, _regimes, pareto, verdicts

PLAN = """
[base]
requests = 40
output_len = 32

[space]
method = ["ar", "sd", "psd"]
k = [2, 3]

[slo]
latency_p99_ms = 20000

[search]
tolerance = 0.05
"""


def _plan(tmp_path: Path, text: str = PLAN) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "match"), [
    ("[nope]\n", r"^\[nope\]: unknown table"),
    ("[space]\nkk = [1]\n[slo]\nlatency_p99_ms = 1\n", r"^space.kk: unknown scenario field"),
    ("[space]\nk = []\n[slo]\nlatency_p99_ms = 1\n", r"^space.k: must be a non-empty list"),
    ("[space]\nrate = [1.0]\n[slo]\nlatency_p99_ms = 1\n", r"^space.rate: the plan searches the rate"),
    ("[slo]\nqueue_p99_ms = 5\n", r"^slo: no latency objective"),
    ("[slo]\nttft_p99_ms = -3\n", r"^slo.ttft_p99_ms: must be a positive number"),
    ("[slo]\nlatency_p99_ms = 5\n[search]\ntolerance = 2\n", r"^search.tolerance"),
    ("[base]\nkk = 3\n[slo]\nlatency_p99_ms = 5\n", r"^kk: unknown field"),
    ('[slo]\nlatency_p99_ms = 5\n[search]\ntolerance = "abc"\n', r"^search.tolerance: must be a finite"),
    ("[slo]\nlatency_p99_ms = 5\n[search]\nrate_min = [1]\n", r"^search.rate_min: must be a finite number"),
    # bounds past what a run takes: the search failed midway naming `rate`, a field the plan forbids
    ("[slo]\nlatency_p99_ms = 5\n[search]\nrate_max = 1e300\n", r"^search.rate_max: 1e\+300 is past 1e\+09"),
    ("[base]\nrequests = 30\n[slo]\nlatency_p99_ms = 5\n[search]\nrate_min = 1e-300\n",
     r"^search.rate_min: 30 requests at 1e-300 .* fix: set rate_min to at least 8.03e-08$"),
    ("[base]\nrequests = 30\n[space]\nrequests = [30, 60]\n[slo]\nlatency_p99_ms = 5\n[search]\n"
     "rate_min = 8.03e-8\n", r"^search.rate_min: 60 requests at 8.03e-08"),
])
def test_bad_plans_are_one_line_errors(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match) as exc:
        load_plan(_plan(tmp_path, text))
    assert "\n" not in str(exc.value)


def test_an_unreadable_plan_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe")
    for path, why in ((tmp_path, "is a folder"),
                      (tmp_path / "bad.toml", r"cannot read .*\(UnicodeDecodeError\)")):
        with pytest.raises(ScenarioError, match=rf"^plan: .*{why}"):
            load_plan(path)


def test_the_space_runs_ar_once_and_reports_invalid_combinations(tmp_path: Path) -> None:
    spec = load_plan(_plan(tmp_path, PLAN.replace('k = [2, 3]', 'k = [2, 3]\ntensor_parallel_size = [4, 3]')))
    valid, invalid = configurations(spec)
    assert sorted((s.method, s.k if s.speculates else None) for s in valid) == [
        ("ar", None), ("psd", 2), ("psd", 3), ("sd", 2), ("sd", 3)]
    assert len(invalid) == 5 and all("tensor_parallel_size" in why for _, why in invalid)


def test_the_rate_search_brackets_the_objective() -> None:
    s = load_scenario(overrides=["requests=60", "output_len=32", "method=sd", "rate=1.0"])
    objectives = {"latency_p99_ms": 8000.0, "queue_p99_ms": 1e9}
    found = max_rate(s, objectives, tolerance=0.05)
    assert found.rate is not None and found.failing_rate is not None
    assert found.failing_rate <= found.rate * 1.05
    at = simulate(s.replace(rate=found.rate)).summary
    above = simulate(s.replace(rate=found.rate * 1.05)).summary
    assert violations(at, objectives) == []
    assert violations(above, objectives) and "p99 end-to-end latency" in violations(above, objectives)[0]
    assert at["latency_ms"]["p99"] <= 8000 < above["latency_ms"]["p99"]


def test_a_configuration_that_never_meets_the_objective_has_no_rate() -> None:
    s = load_scenario(overrides=["requests=20", "output_len=32", "method=ar", "rate=1.0"])
    found = max_rate(s, {"tpot_p99_ms": 0.001, "queue_p99_ms": 1e9}, rate_min=0.5)
    assert found.rate is None and found.failing_rate == 0.5
    assert "p99 time per output token" in found.failing[0]


def test_pareto_front() -> None:
    rows = [{"gpus": 4, "max_rate_req_s": 2.0, "latency_p99_ms": 100.0},
            {"gpus": 5, "max_rate_req_s": 3.0, "latency_p99_ms": 100.0},
            {"gpus": 5, "max_rate_req_s": 2.5, "latency_p99_ms": 120.0},   # beaten by the one above
            {"gpus": 4, "max_rate_req_s": 1.0, "latency_p99_ms": 50.0},
            {"gpus": 4, "max_rate_req_s": None, "latency_p99_ms": None}]
    assert pareto(rows) == [0, 1, 3]


def _pair(**psd: object) -> tuple[dict, dict]:
    base = {"preemptions": 0, "kv_peak": 0.3, "link_share": 0.05, "parallelization_rate": 0.99, "gpus": 5}
    sd = {"mean_draft_ms": 10.0, "mean_verify_ms": 30.0, "gpus": 4}
    return {**base, **psd}, sd


@pytest.mark.parametrize(("psd", "sd_draft", "regime"), [
    ({"preemptions": 12}, 10.0, "KV-bound"),
    ({"kv_peak": 0.97}, 10.0, "KV-bound"),
    ({"link_share": 0.2}, 10.0, "communication-bound"),
    ({"parallelization_rate": 0.6}, 10.0, "tail-bound"),
    ({}, 3.0, "compute-bound"),
    ({}, 10.5, "compute-bound"),     # ceiling 1.35x < 1.1 x 1.25x
    ({}, 45.0, "drafter-bound"),
    ({}, 15.0, "draft-hiding"),
])
def test_regimes_name_the_metric_that_crossed(psd: dict, sd_draft: float, regime: str) -> None:
    p, sd = _pair(**psd)
    sd["mean_draft_ms"] = sd_draft
    found = _regimes(p, sd)
    assert found[0][0] == regime
    assert any(ch.isdigit() for ch in found[0][1])   # the evidence quotes the number


def test_cli_plan_writes_table_json_figures_and_verdicts(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["plan", str(_plan(tmp_path)), "--out", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "when PSD's extra GPU pays off" in text and "Pareto front" in text
    assert "costs: PSD's link holds" in text
    report = json.loads((out / "plan.json").read_text())
    assert len(report["rows"]) == 5 and len(report["verdicts"]) == 2
    assert all(r["max_rate_req_s"] > 0 for r in report["rows"])
    assert (out / "plan.csv").read_text().startswith("method,gpu,")
    for name in ("pareto", "latency_vs_rate", "latency_cdf"):
        assert (out / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (out / "figures" / f"{name}.svg").read_bytes()[:400]
    assert main(["plan", str(_plan(tmp_path)), "--out", str(out), "--json", "--no-figures"]) == 0
    assert json.loads(capsys.readouterr().out)["verdicts"][0]["why"].startswith("PSD sustains")


def test_prices_rank_by_requests_per_dollar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = PLAN.replace("[space]", "[price]\nl40s = 2.0\n\n[space]")
    assert main(["plan", str(_plan(tmp_path, text)), "--out", str(tmp_path / "o"), "--json",
                 "--no-figures"]) == 0
    report = json.loads(capsys.readouterr().out)
    for r in report["rows"]:
        assert r["usd_per_hour"] == 2.0 * r["gpus"]
        assert r["requests_per_usd"] == pytest.approx(r["max_rate_req_s"] * 3600 / r["usd_per_hour"])
    assert all("per dollar" in v["why"] for v in report["verdicts"])
    with pytest.raises(ScenarioError, match=r"^price\.l40s"):
        load_plan(_plan(tmp_path, PLAN + "\n[price]\nl40s = -1\n"))


def test_cli_plan_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(_plan(tmp_path, "[slo]\n")), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no latency objective" in err
    assert not (tmp_path / "o").exists()


QUEUE_BOUND = """
[base]
requests = 40
output_len = 64
m = 4

[space]
method = ["sd"]

[slo]
latency_p99_ms = 1e9
"""


def test_a_default_objective_that_limits_a_configuration_says_it_is_a_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The plan sets only a latency objective no rate misses, so psdsim's own queueing bound is
    what limits: the table must not present it as the planner's objective."""
    spec = load_plan(_plan(tmp_path, QUEUE_BOUND))
    assert spec.defaults == {"queue_p99_ms"} and spec.objectives["queue_p99_ms"] == 10_000
    assert main(["plan", str(_plan(tmp_path, QUEUE_BOUND)), "--out", str(tmp_path / "o"), "--workers", "1",
                 "--no-figures"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "  objectives: p99 end-to-end latency <= 1,000,000,000 ms"
    assert lines[2] == ("  default:    p99 queueing delay <= 10,000 ms (not set in the plan file: "
                        "set [slo] queue_p99_ms to change it);")
    row = next(line for line in lines if line.lstrip().startswith("1"))
    assert row.endswith(" > 10,000 ms (default)") and "p99 queueing delay" in row


def test_an_objective_the_plan_sets_is_not_called_a_default(tmp_path: Path) -> None:
    spec = load_plan(_plan(tmp_path, QUEUE_BOUND + "queue_p99_ms = 10000\n"))
    assert spec.defaults == frozenset()
    found = max_rate(spec.base.replace(method="sd"), spec.objectives, defaults=spec.defaults)
    assert found.failing and not any("default" in why for why in found.failing)


@pytest.mark.parametrize(("command", "spec", "tail", "folder"), [
    ("plan", "examples/plan.toml", ("6b357a90",), "results/plan-6b357a90"),
    ("plan", "mine.toml", ("6b357a90",), "results/plan-mine-6b357a90"),
    ("sweep", "examples/sweep.toml", (), "results/sweep"),
    ("sweep", "grid.toml", (), "results/sweep-grid"),
])
def test_a_study_folder_names_its_command_once(command: str, spec: str, tail: tuple[str, ...],
                                               folder: str) -> None:
    assert study_out(command, Path(spec), *tail) == Path(folder)


def test_the_default_plan_folder_for_plan_toml_has_no_doubled_word(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(_plan(tmp_path)), "--workers", "1", "--no-figures", "--json"]) == 0
    (folder,) = (tmp_path / "results").iterdir()
    assert folder.name.startswith("plan-") and not folder.name.startswith("plan-plan-")
    assert len(folder.name) == len("plan-") + 8


def test_a_profile_that_prices_work_at_nothing_is_one_line_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile of zero coefficients ran in no time and the rate search divided by its makespan
    (ZeroDivisionError): now the run's summary is refused by name, and plan says so in one line."""
    terms = {name: {"features": list(features), "coef": [0.0] * len(features)}
             for name, features in FEATURES.items()}
    (tmp_path / "p0.json").write_text(json.dumps({"format": "psdsim-profile", "version": 1, "terms": terms}))
    plan = _plan(tmp_path, f'[base]\nrequests = 10\noutput_len = 16\nprofile = "{tmp_path / "p0.json"}"\n'
                           '[space]\nk = [2, 3]\n[slo]\nlatency_p99_ms = 60000\n')
    assert main(["plan", str(plan), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: summary: makespan_s 0 ") and err.count("\n") == 1, err


def test_a_run_that_took_no_time_starts_the_search_at_the_top() -> None:
    """An offline run in which no step ran (makespan 0) names no capacity to halve."""
    s = load_scenario(overrides=["requests=4", "output_len=8", "method=ar", "rate=1.0"])
    summary = {"fits": True, "requests": 4, "makespan_s": 0.0, "latency_ms": {"p99": 1.0}}
    found = max_rate(s, {"latency_p99_ms": 10.0}, rate_max=64.0, run=lambda sc: summary)
    assert found.rate == 64.0 and found.failing_rate is None


def test_a_refusal_of_too_slow_a_rate_suggests_a_rate_that_is_taken() -> None:
    """30 requests: 30 / 1e9 printed as 3e-08, and 30 / 3e-08 is a hair past 1e9 s, so the fix
    the refusal gave was itself refused."""
    from psdsim.sim.scenario import MAX_SPAN_S, Scenario, validate
    from psdsim.sim.scenario_values import least_rate

    for requests in (1, 7, 30, 999, 12345):
        text = least_rate(requests)
        assert requests / float(text) <= MAX_SPAN_S
        validate(Scenario(requests=requests, rate=float(text)))
    with pytest.raises(ScenarioError, match=r"fix: raise rate to at least 8.03e-08$"):
        validate(Scenario(requests=30, rate=3e-08))


def test_a_psd_configuration_with_psds_own_fields_is_judged_against_its_sd_twin(tmp_path: Path) -> None:
    """SD refuses PSD's own fields (a pre-drafted tail, balancing by KV): the twin of every PSD
    configuration is SD with them at SD's values, and the verdict names the tail it judged."""
    text = PLAN.replace('method = ["ar", "sd", "psd"]\nk = [2, 3]',
                        'method = ["sd", "psd"]\ntail = ["sd", "pre-draft"]\nbalance_by = ["requests", "kv"]')
    configs, invalid = configurations(load_plan(_plan(tmp_path, text)))
    assert sorted((s.method, s.tail, s.balance_by) for s in configs) == [
        ("psd", t, b) for t in ("pre-draft", "sd") for b in ("kv", "requests")] + [("sd", "sd", "requests")]
    assert len(invalid) == 3 and all(why.startswith(("tail", "balance_by")) for _, why in invalid)
    rows = [{**{key: getattr(s, key) for key in CONFIG_KEYS}, "max_rate_req_s": None, "limit": "-"}
            for s in configs]
    judged = verdicts(configs, rows)
    assert sorted(v["config"]["tail"] for v in judged) == ["pre-draft", "pre-draft", "sd", "sd"]


def test_adaptive_is_judged_against_sd_and_the_verdicts_name_the_balance(tmp_path: Path) -> None:
    """The adaptive mode runs on PSD's GPUs: each of its configurations gets a verdict against its
    SD twin, named for itself, and configurations that differ only in balance_by stay apart."""
    text = PLAN.replace('method = ["ar", "sd", "psd"]\nk = [2, 3]',
                        'method = ["sd", "psd", "adaptive"]\nbalance_by = ["requests", "kv"]')
    configs, _ = configurations(load_plan(_plan(tmp_path, text)))
    gpus = [4 if s.method == "sd" else 5 for s in configs]
    rows = [{**{key: getattr(s, key) for key in CONFIG_KEYS}, "max_rate_req_s": 1.0 + i,
             "rate_req_s_per_gpu": (1.0 + i) / gpus[i], "gpus": gpus[i],
             "requests_per_usd": None, "preemptions": 0, "kv_peak": 0.1, "link_share": 0.01,
             "parallelization_rate": 0.99, "mean_draft_ms": 1.0, "mean_verify_ms": 2.0, "limit": "-"}
            for i, s in enumerate(configs)]
    judged = verdicts(configs, rows)
    assert sorted((v["method"], v["config"]["balance_by"]) for v in judged) == [
        ("adaptive", "kv"), ("adaptive", "requests"), ("psd", "kv"), ("psd", "requests")]
    for v in judged:
        assert v["why"].startswith("adaptive sustains" if v["method"] == "adaptive" else "PSD sustains")
