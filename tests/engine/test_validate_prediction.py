"""The whole prediction of `psdsim validate --engine reference`, from stored measurements.

Why: the end-to-end validation runs the engine and so is noisy; this test takes one real run's
measurements (tests/data/validate_small: measured.json and the engine's MineDraft traces, made
by the command below on this project's CPU machine) and checks that calibrating on them and
simulating every run gives the recorded predictions (to 1e-12 relative: see REL). A change of
the simulator, the calibration or the cost model that moves a prediction fails here; a change
meant to move it regenerates the record with

    python -m tests.engine.test_validate_prediction --regenerate

and says in its commit message what moved. The data was made by
`psdsim validate --k 1,2 --m 2 --requests 6 --output-len 12 --set prompt_len=8
--set engine.prompt_len_max=16 --set engine.warmup_passes=1 --out DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.helpers.engines import VALIDATE_SMALL, same, stored_report

RECORD = VALIDATE_SMALL / "predicted.json"


def predictions(out: Path) -> dict[str, Any]:
    """Each run's predicted cells (and the fitted acceptance) from the stored measurements."""
    report = stored_report(out)
    doc = {"predicted": report["predicted"], "acceptance": report["acceptance"]}
    return json.loads(json.dumps(doc, allow_nan=True))  # the form the record holds




def test_the_prediction_from_stored_measurements_is_the_recorded_one(tmp_path: Path) -> None:
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    now = predictions(tmp_path / "v")
    assert set(now["predicted"]) == set(recorded["predicted"])
    for run, summary in recorded["predicted"].items():
        moved = {key: (value, now["predicted"][run].get(key)) for key, value in summary.items()
                 if not same(value, now["predicted"][run].get(key))}
        assert not moved, f"{run}: recorded vs now {moved}"
    assert same(recorded["acceptance"], now["acceptance"])


def test_the_comparison_catches_a_moved_prediction() -> None:
    assert same({"a": [1.0, {"p50": 2.0}]}, {"a": [1.0, {"p50": 2.0 * (1 + 1e-14)}]})
    assert not same({"a": [1.0, {"p50": 2.0}]}, {"a": [1.0, {"p50": 2.0 * (1 + 1e-9)}]})
    assert not same({"a": 1.0}, {"a": 1.0, "b": 2.0})


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.engine.test_validate_prediction --regenerate")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.write_text(json.dumps(predictions(Path(tmp) / "v"), indent=1, sort_keys=True) + "\n",
                          encoding="utf-8")
    print(f"wrote {RECORD}")
