"""Every benchmark script still imports: a name moved to another module (a split, a rename)
breaks a script nobody runs in the suite, and its next user finds out. Each script is loaded as
a module, which runs its imports and definitions but not its `__main__` block."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.helpers import paths

BENCHMARKS = paths.ROOT / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_benchmark_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))   # the scripts import their siblings by name
    name = f"benchmark_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)   # dataclasses look their module up by name
    spec.loader.exec_module(module)
