"""`psdsim validate --engine vllm`: the AR timings turned into a profile, the simulator's side of
the comparison, bad input, and (opt-in, needs vLLM) one whole validation.

Everything but the last test runs without vLLM: the measurements are synthetic, built from known
step costs, so the fit and the prediction can be checked against them exactly. The opt-in test:

    PSDSIM_VLLM=1 /tmp/vllm-venv/bin/python -m pytest tests/test_validate_vllm.py
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from psdsim.engine.validate.vllm import (
    LONG,
    SHORT,
    VllmValidateConfig,
    assemble_profile,
    predict,
    step_samples,
)
from psdsim.engine.vllm.config import VllmConfig

from psdsim.cli import main

STEP = (2e-3, 1.5e-4)        # a decode step: per step + per request (seconds)
DRAFT_STEP = (1.2e-3, 1e-4)
PROMPT = (4e-3, 2e-5)        # the prompt step: per step + per prompt token


def _seconds(step: tuple[float, float], b: int, n: int, prompt_len: int) -> float:
    first = PROMPT[0] + PROMPT[1] * b * prompt_len
    return first + (n - 1) * (step[0] + step[1] * b)


def _rows(step: tuple[float, float], prompt_len: int = 16) -> list[dict[str, float]]:
    return [{"repeat": rep, "batch": b, "output_len": n, "prompt_len": prompt_len,
             "seconds": _seconds(step, b, n, prompt_len) * (1 + 0.002 * rep)}
            for rep in range(2) for b in (1, 2, 4, 8) for n in (SHORT, LONG)]


def test_the_timed_pairs_give_each_decode_and_prompt_step():
    decode, prompt = step_samples(_rows(STEP))
    assert len(decode) == len(prompt) == 8
    for s in decode[:4]:   # repeat 0: exact
        assert s.duration_s == pytest.approx(STEP[0] + STEP[1] * s.batch, rel=1e-9)
        assert s.tokens == s.batch and s.k == 0
    for s in prompt[:4]:
        assert s.duration_s == pytest.approx(PROMPT[0] + PROMPT[1] * s.tokens, rel=1e-6)


def test_the_profile_prices_draft_passes_at_the_drafts_own_steps():
    p = assemble_profile({"target": _rows(STEP), "draft": _rows(DRAFT_STEP)}, {"engine": "vllm"})
    assert p.terms["verify"].coef[:2] == pytest.approx(STEP, rel=0.01)
    assert p.terms["draft"].coef == pytest.approx((*DRAFT_STEP, 0.0, 0.0), rel=0.01, abs=1e-12)
    assert p.terms["prefill"].coef[:2] == pytest.approx(PROMPT, rel=0.01)
    assert p.terms["reject"].coef == (0.0, 0.0) and p.terms["overhead"].coef == (0.0,)


def _fake_run(tok_s: float, mal: float | None = None) -> dict[str, object]:
    return {"output_tok_s": tok_s, "e2el_ms": 10.0, "latency_ms": {"p50": 100.0, "p99": 120.0},
            "vsr": None if mal is None else 0.7, "mean_acceptance_length": mal, "engine_version": "test"}


def test_the_prediction_runs_the_fitted_steps(tmp_path: Path):
    """AR with every request in one batch: the simulated makespan is one prompt step and
    output_len - 1 decode steps, each as fitted; SD at larger k is predicted slower per step."""
    base = VllmConfig(m=4, requests=4, prompt_len=16, output_len=32)
    cfg = VllmValidateConfig(base, tmp_path / "v", ks=(1, 3))
    measured = {"ar_steps": {"target": _rows(STEP), "draft": _rows(DRAFT_STEP)},
                "runs": {"ar": _fake_run(500.0), "sd_k1": _fake_run(400.0, 1.8),
                         "sd_k3": _fake_run(450.0, 2.6)}}
    report = predict(cfg, measured)
    rows = {r["run"]: r for r in report["rows"]}
    makespan = _seconds(STEP, 4, 32, 16)
    ar = rows["ar"]["metrics"]["output_tok_s"]
    assert ar["predicted"] == pytest.approx(4 * 32 / makespan, rel=0.02)
    assert ar["error"] == pytest.approx((ar["predicted"] - 500.0) / 500.0)
    assert rows["ar"]["in_sample"] and not rows["sd_k3"]["in_sample"]
    assert report["engine_version"] == "test"
    for name in ("validate.json", "validate.png", "profile.json", "catalog.toml", "requests.jsonl",
                 "scenarios/sd_k3.toml"):
        assert (tmp_path / "v" / name).is_file(), name
    assert json.loads((tmp_path / "v" / "validate.json").read_text())["rows"] == report["rows"]


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
