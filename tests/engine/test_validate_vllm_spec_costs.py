"""The vLLM validation's two spec-decode costs (engine/validate/vllm_profile.py, step 3): one per
SD step and one per draft pass, fitted to the SD runs at k=1 and k=2 and holding out k=3.

Synthetic SD runs are made by an engine that pays known costs on top of the AR split (the written
scenarios simulated with them), so the fit can be checked against the truth. No vLLM needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from psdsim.engine.validate import vllm_profile
from psdsim.engine.validate.reference import predicted_summary
from psdsim.engine.validate.vllm import predict, table_lines
from psdsim.engine.validate.vllm_timing import VllmValidateConfig
from psdsim.sim.profile_reader import load_profile
from psdsim.sim.scenario import load_scenario
from tests.helpers.vllm_measurements import fake_run, measured, vllm_config

TRUTH = vllm_profile.SpecCosts(per_step=4e-3, per_pass=0.8e-3)
ACCEPTED = {1: 1.8, 2: 2.3, 3: 2.6}   # mean acceptance length of each k's synthetic run


def _cfg(tmp_path: Path) -> VllmValidateConfig:
    return VllmValidateConfig(vllm_config(tmp_path).base, tmp_path / "v", ks=(1, 2, 3))


def _runs(tmp_path: Path, truth: vllm_profile.SpecCosts) -> dict[str, dict[str, object]]:
    """Each k's throughput as an engine paying `truth` would run it."""
    placeholder = {"ar": fake_run(500.0), **{f"sd_k{k}": fake_run(400.0, a) for k, a in ACCEPTED.items()}}
    predict(_cfg(tmp_path / "truth"), measured(runs=placeholder))
    folder = tmp_path / "truth" / "v"
    split = replace(vllm_profile.split_steps(measured()["ar_steps"]).profile,
                    source=load_profile(folder / "profile.json").source)
    (folder / "profile.json").write_text(vllm_profile.with_spec_costs(split, truth).to_json())
    return {"ar": fake_run(500.0), **{
        f"sd_k{k}": fake_run(predicted_summary(load_scenario(folder / "scenarios" / f"sd_k{k}.toml"))
                              ["output_tok_s"], a) for k, a in ACCEPTED.items()}}


def test_both_costs_come_back_from_k1_and_k2_and_predict_k3(tmp_path: Path):
    report = predict(_cfg(tmp_path), measured(runs=_runs(tmp_path, TRUTH)))
    spec = report["spec_step"]
    assert spec["fitted_on"] == ["sd_k1", "sd_k2"]
    assert spec["ms"] == pytest.approx(1e3 * TRUTH.per_step, rel=0.03)
    assert spec["pass_ms"] == pytest.approx(1e3 * TRUTH.per_pass, rel=0.05)
    rows = {r["run"]: r for r in report["rows"]}
    assert rows["sd_k1"]["in_sample"] and rows["sd_k2"]["in_sample"] and not rows["sd_k3"]["in_sample"]
    assert abs(rows["sd_k3"]["metrics"]["output_tok_s"]["error"]) < 0.01
    said = "\n".join(table_lines(report))
    assert "per draft pass, fitted to sd_k1 and sd_k2; every other k held out" in said


def test_a_per_pass_cost_that_only_k1_sees_is_missed_at_k3(tmp_path: Path):
    """Fitted to k=1 alone, the per-pass cost hides inside the per-step one and k=3, which pays it
    three times, is over-predicted: why k=2 is fitted too."""
    runs = _runs(tmp_path, TRUTH)
    cfg = VllmValidateConfig(vllm_config(tmp_path).base, tmp_path / "one", ks=(1, 3))
    report = predict(cfg, measured(runs={name: runs[name] for name in ("ar", "sd_k1", "sd_k3")}))
    assert report["spec_step"]["fitted_on"] == ["sd_k1"] and report["spec_step"]["pass_ms"] is None
    k3 = next(r for r in report["rows"] if r["run"] == "sd_k3")
    assert k3["metrics"]["output_tok_s"]["error"] > 0.02


def test_a_run_that_pays_nothing_more_fits_zero_costs(tmp_path: Path):
    report = predict(_cfg(tmp_path), measured(runs=_runs(tmp_path, vllm_profile.SpecCosts(0.0, 0.0))))
    assert report["spec_step"]["ms"] == pytest.approx(0.0, abs=1e-3)
    assert report["spec_step"]["pass_ms"] == pytest.approx(0.0, abs=1e-3)
