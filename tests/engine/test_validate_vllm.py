"""`psdsim validate --engine vllm`: the AR timings turned into a profile, the simulator's side of
the comparison, bad input, and (opt-in, needs vLLM) one whole validation.

Everything but the last test runs without vLLM: the measurements are synthetic, built from known
step costs, so the fit and the prediction can be checked against them exactly. The opt-in test:

    PSDSIM_VLLM=1 /tmp/vllm-venv/bin/python -m pytest tests/engine/test_validate_vllm.py
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from psdsim.calibration.trace_error import TraceError
from psdsim.cli import build_parser, main
from psdsim.engine.validate import vllm_profile, vllm_timing
from psdsim.engine.validate.reference import predicted_summary
from psdsim.engine.validate.report import error_interval
from psdsim.engine.validate.vllm import predict, table_lines
from psdsim.engine.validate.vllm_profile import split_steps, step_samples
from psdsim.engine.validate.vllm_timing import DEPTH, VllmValidateConfig
from psdsim.engine.vllm.config import VllmConfig
from psdsim.sim.profile_reader import load_profile
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
from tests.helpers.vllm_measurements import (
    DRAFT_LAYERS,
    FRAMEWORK,
    LAYERS,
    PROMPT,
    ar_steps,
    fake_run,
    measured,
    seconds,
    step,
    step_rows,
    vllm_config,
)


def test_the_timed_pairs_give_each_decode_and_prompt_step():
    decode, prompt = step_samples(step_rows("target"))
    assert len(decode) == len(prompt) == 8
    for s in decode[:4]:   # repeat 0: exact
        assert s.duration_s == pytest.approx(step("target", s.batch), rel=1e-9)
        assert s.tokens == s.batch and s.k == 0
    for s in prompt[:4]:
        want = FRAMEWORK[0] + FRAMEWORK[1] * s.batch + PROMPT[0] + PROMPT[1] * s.tokens
        assert s.duration_s == pytest.approx(want, rel=1e-6)


def test_the_deeper_target_splits_per_step_work_from_the_passes():
    """The per-step work comes out of the two depths, once; a draft pass costs the draft's layers,
    not a whole AR step (which is what the validation charged before: 4.4 ms per draft pass where
    an SD step grows by ~2.5 ms per draft token)."""
    split = split_steps(ar_steps())
    assert (split.framework.fixed, split.framework.per_request) == pytest.approx(FRAMEWORK, rel=0.02)
    terms = split.profile.terms
    assert terms["verify"].coef[:2] == pytest.approx(LAYERS, rel=0.02)
    assert terms["draft"].coef == pytest.approx((*DRAFT_LAYERS, 0.0, 0.0), rel=0.02, abs=1e-12)
    assert terms["prefill"].coef[:2] == pytest.approx(PROMPT, rel=0.02)
    assert terms["draft_prefill"].coef[:2] == pytest.approx(PROMPT, rel=0.02)
    assert terms["reject"].coef == (0.0, 0.0) and "overhead" not in terms   # the engine's, per step


def test_a_split_the_noise_decides_is_refused():
    """A deeper target timed no slower than the target leaves no layers to price."""
    steps = ar_steps()
    steps["deep"] = step_rows("target")
    with pytest.raises(TraceError, match="noise swamps the split"):
        split_steps(steps)


def test_noise_cannot_make_a_fitted_cost_negative(tmp_path: Path):
    """A deeper target whose steps grow faster with the batch than its layers can explain (noise,
    as measured on a loaded 2-core machine) would give a negative per-request cost taken apart
    model by model; the joint fit keeps every cost >= 0, and the catalog it writes loads."""
    steps = ar_steps()
    steps["deep"] = [{**row, "seconds": row["seconds"] + 1e-3 * row["batch"] * (row["output_len"] - 1)}
                     for row in steps["deep"]]
    split = split_steps(steps)
    assert split.framework.per_request == 0.0 and split.framework.fixed > 0
    assert min(split.profile.terms["verify"].coef + split.profile.terms["draft"].coef) >= 0
    report = predict(vllm_config(tmp_path), measured(ar_steps=steps))
    assert report["framework"]["step_request_us"] == 0.0


def test_timings_without_the_deeper_target_are_refused():
    steps = ar_steps()
    del steps["deep"]
    with pytest.raises(TraceError, match="no AR timings of the deep"):
        split_steps(steps)


def test_the_prediction_runs_the_fitted_steps(tmp_path: Path):
    """AR with every request in one batch: the simulated makespan is one prompt step and
    output_len - 1 decode steps, each the per-step work plus the target's layers."""
    report = predict(vllm_config(tmp_path), measured())
    rows = {r["run"]: r for r in report["rows"]}
    makespan = seconds("target", 4, 32, 16)
    ar = rows["ar"]["metrics"]["output_tok_s"]
    assert ar["predicted"] == pytest.approx(4 * 32 / makespan, rel=0.02)
    assert ar["error"] == pytest.approx((ar["predicted"] - 500.0) / 500.0)
    assert rows["ar"]["in_sample"] and rows["sd_k1"]["in_sample"] and not rows["sd_k3"]["in_sample"]
    assert report["engine_version"] == "test"
    assert report["framework"]["step_ms"] == pytest.approx(1e3 * FRAMEWORK[0], rel=0.02)
    for name in ("validate.json", "validate.png", "profile.json", "catalog.toml", "requests.jsonl",
                 "scenarios/sd_k3.toml"):
        assert (tmp_path / "v" / name).is_file(), name
    assert json.loads((tmp_path / "v" / "validate.json").read_text())["rows"] == report["rows"]


def test_an_sd_step_pays_the_per_step_work_once_and_k_draft_passes(tmp_path: Path):
    """The written SD scenario, simulated: every pure decode step's framework time is the per-step
    work of its running requests, its drafting k passes of the draft's layers plus the per-SD-step
    cost once, its target pass the target's layers over the positions it scores."""
    report = predict(vllm_config(tmp_path), measured())
    spec = report["spec_step"]["ms"] * 1e-3
    steps = simulate(load_scenario(tmp_path / "v" / "scenarios" / "sd_k3.toml")).steps
    decode = (steps["kind"] == "decode") & (steps["prefill_tokens"] == 0)
    assert decode.sum() > 10
    running, verified, scored = (steps[c][decode].astype(float) for c in ("running", "verified", "scored"))
    assert steps["framework_s"][decode] == pytest.approx(FRAMEWORK[0] + FRAMEWORK[1] * running, rel=0.03)
    assert steps["draft_s"][decode] == pytest.approx(
        spec + 3 * (DRAFT_LAYERS[0] + DRAFT_LAYERS[1] * verified), rel=0.03)
    assert steps["verify_s"][decode] == pytest.approx(LAYERS[0] + LAYERS[1] * scored, rel=0.03)


SPEC_STEP = 6e-3   # the known per-SD-step cost the synthetic SD runs below are made with (seconds)


def _sd_truth(tmp_path: Path) -> dict[str, float]:
    """SD throughput at k=1 and k=3 as an engine that pays SPEC_STEP once per SD step on top of the
    split would run: the written scenarios simulated with that cost in their profile."""
    predict(vllm_config(tmp_path / "truth"), measured())
    folder = tmp_path / "truth" / "v"
    profile = vllm_profile.with_spec_costs(load_profile(folder / "profile.json"),
                                           vllm_profile.SpecCosts(SPEC_STEP))
    (folder / "profile.json").write_text(profile.to_json())
    return {name: predicted_summary(load_scenario(folder / "scenarios" / f"{name}.toml"))["output_tok_s"]
            for name in ("sd_k1", "sd_k3")}


def test_the_per_sd_step_cost_is_fitted_at_k1_and_predicts_the_other_k(tmp_path: Path):
    """SD runs that pay a known cost per SD step, which AR runs cannot show: the fit recovers it
    from k=1 alone (in-sample) and predicts k=3 with it (held out); the split alone misses k=3."""
    truth = _sd_truth(tmp_path)
    runs = {"ar": fake_run(500.0), "sd_k1": fake_run(truth["sd_k1"], 1.8),
            "sd_k3": fake_run(truth["sd_k3"], 2.6)}
    report = predict(vllm_config(tmp_path), measured(runs=runs))
    assert report["spec_step"]["ms"] == pytest.approx(1e3 * SPEC_STEP, rel=0.02)
    assert report["profile"]["draft"]["coef"][3] == pytest.approx(SPEC_STEP, rel=0.02)
    rows = {r["run"]: r for r in report["rows"]}
    assert rows["sd_k1"]["in_sample"] and not rows["sd_k3"]["in_sample"]
    assert abs(rows["sd_k1"]["metrics"]["output_tok_s"]["error"]) < 0.01
    assert abs(rows["sd_k3"]["metrics"]["output_tok_s"]["error"]) < 0.01
    lines = "\n".join(table_lines(report))
    assert "sd_k1*" in lines and "sd_k3 " in lines and "fitted to sd_k1; every other k held out" in lines
    # without the term (a k=1 run that hides nothing) the same k=3 is over-predicted
    fast = predict(VllmValidateConfig(vllm_config(tmp_path).base, tmp_path / "w", ks=(3,)),
                   measured(runs={"ar": runs["ar"], "sd_k3": runs["sd_k3"]}))
    assert fast["rows"][1]["metrics"]["output_tok_s"]["error"] > 0.1


def test_without_a_k1_run_nothing_is_fitted_and_the_report_says_so_once(tmp_path: Path):
    runs = {"ar": fake_run(500.0), "sd_k3": fake_run(450.0, 2.6)}
    cfg = VllmValidateConfig(vllm_config(tmp_path).base, tmp_path / "v", ks=(3,))
    report = predict(cfg, measured(runs=runs))
    assert report["spec_step"]["ms"] is None and report["profile"]["draft"]["coef"][3] == 0.0
    assert not any(r["in_sample"] for r in report["rows"] if r["method"] == "sd")
    said = [line for line in table_lines(report) if "k=1" in line]
    assert len(said) == 1 and "not fitted" in said[0]


def test_the_per_sd_step_cost_is_never_negative(tmp_path: Path):
    """SD at k=1 measured faster than the split predicts leaves nothing to charge: 0, not less."""
    runs = {"ar": fake_run(500.0), "sd_k1": fake_run(1e6, 1.8), "sd_k3": fake_run(450.0, 2.6)}
    assert predict(vllm_config(tmp_path), measured(runs=runs))["spec_step"]["ms"] == 0.0


def test_repeated_runs_give_each_metric_its_interval(tmp_path: Path):
    repeats = {"ar": [fake_run(490.0), fake_run(510.0)],
               "sd_k1": [fake_run(380.0, 1.8, 90.0), fake_run(420.0, 1.8, 110.0)],
               "sd_k3": [fake_run(440.0, 2.6), fake_run(460.0, 2.6)]}
    report = predict(vllm_config(tmp_path), measured(repeats=repeats))
    cell = next(r for r in report["rows"] if r["run"] == "sd_k1")["metrics"]["latency_ms.p50"]
    assert cell["repeats"] == [90.0, 110.0]
    assert cell["interval"] == error_interval([90.0, 110.0], cell["predicted"])
    assert cell["repeat_errors"] == pytest.approx([cell["predicted"] / 90 - 1, cell["predicted"] / 110 - 1])
    lines = "\n".join(table_lines(report))
    assert "sd_k1 error with the 95% interval of the mean: throughput" in lines
    assert "per-step work" in lines


def test_measure_repeats_the_ar_timings_and_every_run_in_rounds(tmp_path: Path, monkeypatch):
    """--repeats N: N rounds of the three models' AR timings and of every measured run; the runs'
    summaries are averaged, each repeat kept."""
    from psdsim.engine.vllm import models, runner

    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(runner, "require_vllm", lambda cfg: "test")
    monkeypatch.setattr(runner, "set_environment", lambda cfg, needs_rpc: None)
    monkeypatch.setattr(runner, "model_paths", lambda cfg: ("T", "D", 1024))
    monkeypatch.setattr(models, "build_tiny", lambda spec, root: (Path(f"deep{spec.layers}"), Path("x")))

    def timed(cfg, model, vocab, rep):
        calls.append(("time", model))
        return [{"repeat": rep, "model": model}]

    def run(cfg):
        calls.append((f"{cfg.method}{cfg.k if cfg.method == 'sd' else ''}", None))
        return fake_run(100.0 * (1 + sum(1 for c in calls if c[0] != "time")), 2.0)

    monkeypatch.setattr(vllm_timing, "time_ar_steps", timed)
    monkeypatch.setattr(runner, "run", run)
    cfg = VllmValidateConfig(VllmConfig(m=4, requests=4), tmp_path / "v", ks=(1, 3), repeats=2)
    doc = vllm_timing.measure(cfg)
    order = [name if model is None else model for name, model in calls]
    deep = f"deep{DEPTH * 2}"   # the tiny target has 2 layers
    assert order == ["T", deep, "D"] * 2 + ["ar", "sd1", "sd3"] * 2
    assert [len(doc["repeats"][name]) for name in ("ar", "sd_k1", "sd_k3")] == [2, 2, 2]
    assert doc["runs"]["sd_k3"]["output_tok_s"] == pytest.approx(np.mean([400.0, 700.0]))
    assert doc["ar_steps"]["deep"] == [{"repeat": 0, "model": deep}, {"repeat": 1, "model": deep}]
    stored = json.loads((tmp_path / "v" / "measured.json").read_text())
    assert stored["repeats"]["ar"][1]["output_tok_s"] == 500.0


def test_models_dir_reaches_the_vllm_configuration(tmp_path: Path):
    from psdsim.commands.validate import vllm_validate_config

    argv = ["validate", "--engine", "vllm", "--models-dir", str(tmp_path)]
    cfg = vllm_validate_config(build_parser(argv).parse_args(argv))
    assert cfg.base.models_dir == tmp_path


HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAVE_VLLM, reason="checks the message shown where vLLM is missing")
def test_without_vllm_validate_says_what_to_install(capsys, tmp_path):
    assert main(["validate", "--engine", "vllm", "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vllm" in err[0].lower() and "pip install" in err[0]
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize(("args", "field"), [
    (["--k", "0"], "--k"), (["--methods", "psd"], "--methods"), (["--set", "nosuch=1"], "nosuch"),
    (["--set", "model.layers=0"], "model.layers"), (["--repeats", "0"], "--repeats"),
    (["--set", "engine.target=/models/qwen3-8b"], "engine.target"), (["--set", "engine.k=2"], "engine.k"),
    (["--set", "target=/models/qwen3-8b"], "target"), (["--set", "engine.nosuch=1"], "engine.nosuch"),
])
def test_bad_vllm_validate_input_is_one_line(capsys, tmp_path, args, field):
    assert main(["validate", "--engine", "vllm", "--out", str(tmp_path / "v"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"psdsim: error: {field}"), err


@pytest.mark.skipif(not (HAVE_VLLM and os.environ.get("PSDSIM_VLLM") == "1"),
                    reason="opt-in: PSDSIM_VLLM=1 with vLLM installed (docs/engines.md: The vLLM runner)")
def test_vllm_sd_is_predicted_from_vllm_ar(tmp_path):
    out = tmp_path / "v"
    code = main(["validate", "--engine", "vllm", "--k", "1,3", "--requests", "8", "--output-len", "32",
                 "--repeats", "1", "--out", str(out), "--json"])
    assert code == 0
    report = json.loads((out / "validate.json").read_text())
    runs = {r["run"]: r for r in report["rows"]}
    assert set(runs) == {"ar", "sd_k1", "sd_k3"}
    for r in runs.values():
        cell = r["metrics"]["output_tok_s"]
        assert cell["measured"] > 0 and cell["predicted"] > 0
        assert 1 / 3 < cell["predicted"] / cell["measured"] < 3, (r["run"], cell)   # a sanity bound
    assert runs["sd_k3"]["metrics"]["vsr"]["measured"] > 0.2   # the temperature fix is on
