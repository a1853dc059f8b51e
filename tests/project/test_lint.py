"""The code base stays ruff-clean (ruff comes with the `test` extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import paths

ROOT = paths.ROOT


def test_ruff_is_clean():
    """Ruff of the interpreter running the tests (`sys.executable -m ruff`), not whichever `ruff` is
    first on PATH: a different version there would check with different rules."""
    if importlib.util.find_spec("ruff") is None:
        pytest.fail(f"ruff is not installed for {sys.executable}: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
