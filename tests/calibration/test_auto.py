"""`psdsim calibrate` without --ranges: the range preset is picked from the trace's own names and
the notes say which."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.calibration.calibrate import _pick_preset, calibrate
from psdsim.calibration.synthetic import write_cost_trace
from psdsim.calibration.trace_error import TraceError
from tests.helpers.traces import KinetoTrace, unmatched


def _vllm_trace(path: Path) -> Path:
    t = KinetoTrace()
    t.annotate("execute_context_0(0)_generation_16(64)", 0.0, 500.0)
    t.annotate("gpu_model_runner: forward", 100.0, 300.0)
    t.launch(110.0, 120.0, 180.0)
    return t.write(path)


def test_a_vllm_trace_is_read_with_the_vllm_preset(tmp_path: Path) -> None:
    preset, first = _pick_preset([[_vllm_trace(tmp_path / "v.json")]], [])
    assert preset == "vllm"
    assert first is not None and [s.kind for s in first[1][0].samples] == ["verify"]


def test_a_trace_no_preset_reads_lists_its_range_names(tmp_path: Path) -> None:
    import json
    path = tmp_path / "u.json"
    path.write_text(json.dumps(unmatched()))
    with pytest.raises(TraceError, match=r"most common names: 'my_model\.forward'"):
        _pick_preset([[path]], [])


def test_calibrate_says_which_preset_it_chose(tmp_path: Path) -> None:
    calls = [("draft", {"batch": b, "k": 3, "ctx": 1000.0 * b}, 1e-3 * (5 + b)) for b in range(1, 13)]
    calls += [("verify", {"batch": b, "tokens": 4 * b, "ctx": 1000.0 * b}, 1e-3 * (20 + b))
              for b in range(1, 13)]
    write_cost_trace(calls, tmp_path / "t.sqlite")
    cal = calibrate([tmp_path / "t.sqlite"])
    assert cal.profile.source["ranges"] == "psdsim"
    assert any(n.startswith("ranges: the psdsim preset") for n in cal.notes)
    assert not any(n.startswith("ranges:") for n in calibrate([tmp_path / "t.sqlite"], preset="psdsim").notes)
