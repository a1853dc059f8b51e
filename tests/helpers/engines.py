"""Real engines' outputs without the engines: vLLM request outputs and the stored reference
validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from psdsim.cli import build_parser
from psdsim.commands.validate import validate_config
from psdsim.engine.validate.reference import predict
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
