"""The layering of docs/design.md §1, checked on the source: an import may only point down
`psdsim → {studies, engine} → calibration → sim → theory` (studies and engine are siblings and do
not import each other), and the layout section of the design names every package folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import paths

ROOT = paths.ROOT
RANK = {"theory": 0, "sim": 1, "calibration": 2, "studies": 3, "engine": 3, "psdsim": 4}
FOLDERS = ("theory", "sim", "calibration", "studies", "engine", "psdsim")


def _layer(module: str) -> str | None:
    """The layer of a dotted module name of ours (psdsim.sim.x → sim; psdsim.cli → psdsim)."""
    parts = module.split(".")
    if parts[0] != "psdsim":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK and parts[1] != "psdsim" else "psdsim"


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def _edges() -> list[tuple[str, int, str, str]]:
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, module in _imports(path):
                target = _layer(module)
                if target is not None:
                    out.append((str(path.relative_to(ROOT)), line, folder, target))
    return out


def test_imports_point_down_only() -> None:
    wrong = [f"{path}:{line}: {src} imports {dst}" for path, line, src, dst in _edges()
             if dst != src and (RANK[dst] >= RANK[src])]
    assert not wrong, "imports against psdsim → {studies, engine} → calibration → sim → theory:\n" + \
        "\n".join(wrong)


def test_no_module_imports_the_old_top_level_names() -> None:
    """Everything imports through the one installed name (psdsim.sim, not sim)."""
    old = [f"{p.relative_to(ROOT)}:{line}: {m}" for folder in (*FOLDERS, "tests", "benchmarks")
           for p in sorted((ROOT / folder).rglob("*.py")) for line, m in _imports(p)
           if m.split(".")[0] in RANK and m.split(".")[0] != "psdsim"]
    assert not old, "\n".join(old)


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_design_names_every_package_folder(folder: str) -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("## 1. Architecture"):text.index("## 2.")]
    for package in sorted(p.parent for p in (ROOT / folder).rglob("__init__.py")):
        name = package.relative_to(ROOT).as_posix() + "/"
        assert re.search(rf"(^|\s){re.escape(name)}", section), f"docs/design.md §1 does not name {name}"



LONG = 400   # lines: a module past this says at its top why it stays one module
REASON = "Why one module:"


def long_modules_without_a_reason(root: Path) -> list[str]:
    out = []
    for folder in (*FOLDERS, "benchmarks", "docs"):
        for path in sorted((root / folder).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            if len(lines) > LONG and not any(REASON in line for line in lines[:30]):
                out.append(f"{path.relative_to(root)}: {len(lines)} lines")
    return out


def test_a_module_over_400_lines_says_why_at_its_top() -> None:
    """One job per module keeps modules short; one that is not says why in its docstring's first
    lines (`Why one module: ...`), so a reader knows the length is a decision, not drift."""
    long = long_modules_without_a_reason(ROOT)
    assert not long, f"split these, or say `{REASON} ...` at the top:\n" + "\n".join(long)


def test_the_module_length_check_finds_a_long_module(tmp_path) -> None:
    """The check reads what it should: a long module without the line is named, with it is not."""
    (tmp_path / "sim").mkdir()
    module = tmp_path / "sim" / "long.py"
    body = "\n".join(f"x{i} = {i}" for i in range(LONG + 1))
    module.write_text(f'"""A long one."""\n{body}\n', encoding="utf-8")
    assert long_modules_without_a_reason(tmp_path) == [f"sim/long.py: {LONG + 2} lines"]
    module.write_text(f'"""A long one.\n\n{REASON} a table.\n"""\n{body}\n', encoding="utf-8")
    assert long_modules_without_a_reason(tmp_path) == []
