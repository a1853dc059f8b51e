"""What `psdsim validate --engine vllm` measures, made up with known costs: AR step timings of
the three models, runs' summaries and a small configuration, so its fit and prediction can be
worked out by hand."""

from __future__ import annotations

from pathlib import Path

from psdsim.engine.validate.vllm_timing import DEPTH, LONG, ROLES, SHORT, VllmValidateConfig
from psdsim.engine.vllm.config import VllmConfig

FRAMEWORK = (1.5e-3, 1.0e-4)    # per-step work: per step + per running request (seconds)



LAYERS = (0.8e-3, 0.6e-4)       # the target's layers in one pass: per pass + per token



DRAFT_LAYERS = (0.5e-3, 0.5e-4)



PROMPT = (4e-3, 2e-5)           # a prompt pass: per pass + per prompt token



# an AR decode step = the per-step work + one pass of the model's layers
STEPS = {"target": LAYERS, "deep": (DEPTH * LAYERS[0], DEPTH * LAYERS[1]), "draft": DRAFT_LAYERS}



def step(role: str, b: int) -> float:
    layers = STEPS[role]
    return FRAMEWORK[0] + FRAMEWORK[1] * b + layers[0] + layers[1] * b



def seconds(role: str, b: int, n: int, prompt_len: int) -> float:
    first = FRAMEWORK[0] + FRAMEWORK[1] * b + PROMPT[0] + PROMPT[1] * b * prompt_len
    return first + (n - 1) * step(role, b)



def step_rows(role: str, prompt_len: int = 16) -> list[dict[str, float]]:
    return [{"repeat": rep, "batch": b, "output_len": n, "prompt_len": prompt_len,
             "seconds": seconds(role, b, n, prompt_len) * (1 + 0.002 * rep)}
            for rep in range(2) for b in (1, 2, 4, 8) for n in (SHORT, LONG)]



def ar_steps() -> dict[str, list[dict[str, float]]]:
    return {role: step_rows(role) for role in ROLES}



def fake_run(tok_s: float, mal: float | None = None, p50: float = 100.0) -> dict[str, object]:
    return {"output_tok_s": tok_s, "e2el_ms": 10.0, "latency_ms": {"p50": p50, "p99": 120.0},
            "vsr": None if mal is None else 0.7, "mean_acceptance_length": mal, "engine_version": "test"}



def measured(**extra: object) -> dict[str, object]:
    return {"ar_steps": ar_steps(), "runs": {"ar": fake_run(500.0), "sd_k1": fake_run(400.0, 1.8),
                                              "sd_k3": fake_run(450.0, 2.6)}, **extra}



def vllm_config(tmp_path: Path) -> VllmValidateConfig:
    base = VllmConfig(m=4, requests=4, prompt_len=16, output_len=32)
    return VllmValidateConfig(base, tmp_path / "v", ks=(1, 3))
