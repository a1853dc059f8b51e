"""Real engines' outputs without the engines: vLLM request outputs and the stored reference
validation."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from psdsim.cli import build_parser
from psdsim.commands.validate import validate_config, vllm_validate_config
from psdsim.engine.validate.reference import predict
from psdsim.engine.validate.vllm import predict as predict_vllm
from tests.helpers import paths


def request_output(prompt: int, generated: int, arrival: float, first_latency: float, first_ts: float,
            last_ts: float) -> SimpleNamespace:
    metrics = SimpleNamespace(arrival_time=arrival, first_token_latency=first_latency,
                              first_token_ts=first_ts, last_token_ts=last_ts)
    return SimpleNamespace(prompt_token_ids=list(range(prompt)),
                           outputs=[SimpleNamespace(token_ids=list(range(generated)))], metrics=metrics)


VALIDATE_SMALL = paths.DATA / "validate_small"


ARGS = ["validate", "--k", "1,2", "--m", "2", "--requests", "6", "--output-len", "12",
        "--set", "prompt_len=8",
        "--set", "engine.prompt_len_max=16", "--set", "engine.warmup_passes=1"]


def stored_report(out: Path) -> dict[str, Any]:
    """The validation's report from the stored measurements, its profiles and scenarios written
    to `out` (benchmarks/interval_coverage.py draws them)."""
    shutil.copytree(VALIDATE_SMALL / "traces", out / "traces")
    measured = json.loads((VALIDATE_SMALL / "measured.json").read_text(encoding="utf-8"))
    for runs in measured["repeats"].values():
        for run in runs:
            run["trace"] = str(out / run["trace"])
    args = build_parser(ARGS).parse_args([*ARGS, "--out", str(out)])
    return predict(validate_config(args), measured)


# Calibration fits its costs with scipy's least squares and the summary takes numpy's percentiles:
# their last bits differ between releases (scipy 1.17 / numpy 2.4 moved them by 1-4 ulp, the same
# simulator). Any change of the simulator's own moves a prediction by far more than this.
REL = 1e-12


def same(recorded: Any, now: Any) -> bool:
    """Equal, floats to within REL (nested in dicts and lists as the summary nests them)."""
    if isinstance(recorded, float) and isinstance(now, float):
        return math.isclose(recorded, now, rel_tol=REL) or recorded == now or (recorded != recorded
                                                                                and now != now)
    if isinstance(recorded, dict) and isinstance(now, dict):
        return recorded.keys() == now.keys() and all(same(recorded[k], now[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(now, list):
        return len(recorded) == len(now) and all(same(a, b) for a, b in zip(recorded, now, strict=True))
    return recorded == now


VALIDATE_VLLM = paths.DATA / "validate_vllm"
VLLM_ARGS = ["validate", "--engine", "vllm", "--repeats", "1"]


def stored_vllm_report(out: Path) -> dict[str, Any]:
    """The validation's report from the stored measurements, its profile and scenarios written to
    `out` (benchmarks/interval_coverage.py draws them)."""
    measured = json.loads((VALIDATE_VLLM / "measured.json").read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    args = build_parser(VLLM_ARGS).parse_args([*VLLM_ARGS, "--out", str(out), "--models-dir", str(out)])
    return predict_vllm(vllm_validate_config(args), measured)
