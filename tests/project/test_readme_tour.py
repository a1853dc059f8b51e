"""Every command of the README runs as written, in order, as on a fresh clone: in a temporary
working directory holding a copy of examples/, with `psdsim` this checkout's, each line must
exit 0 (a line that needs a file an earlier line makes must come after it)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import BASH_BLOCK, SETUP, readme_commands
from tests.helpers.paths import README, ROOT


def test_the_readme_blocks_hold_the_setup_lines_and_the_tour() -> None:
    text = README.read_text(encoding="utf-8")
    every = [line.strip() for block in BASH_BLOCK.findall(text) for line in block.splitlines() if line]
    assert every[:2] == list(SETUP), "the first block is the set-up; keep SETUP in step with it"
    commands = readme_commands(text)
    assert len(commands) >= 10 and all(line.startswith("psdsim ") for line in commands)


def _checkout_psdsim(bin_dir: Path) -> None:
    """A `psdsim` on PATH that is this interpreter running this checkout, whatever else is installed."""
    bin_dir.mkdir()
    shim = bin_dir / "psdsim"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m psdsim "$@"\n')
    shim.chmod(0o755)


@pytest.mark.slow
def test_every_readme_command_runs_in_order_on_a_fresh_copy(tmp_path: Path) -> None:
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")
    _checkout_psdsim(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in readme_commands(README.read_text(encoding="utf-8")):
        proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert (work / "results").is_dir() and (work / "profile.json").is_file()


def test_the_shipped_sample_trace_is_what_its_script_writes(tmp_path: Path) -> None:
    """examples/sample-trace.sqlite is generated, not hand-made: `python examples/sample_trace.py`
    writes it byte for byte (rerun it after changing the writer or the cost model)."""
    spec = importlib.util.spec_from_file_location("sample_trace", ROOT / "examples" / "sample_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.write_sample(tmp_path / "sample-trace.sqlite")
    shipped = ROOT / "examples" / "sample-trace.sqlite"
    assert fresh.read_bytes() == shipped.read_bytes(), "run `python examples/sample_trace.py` and commit it"
    assert shipped.stat().st_size <= 320_000   # 14 link messages a PSD step (sim/messages.py)
