"""The documentation a fresh clone reads: generated parts match the code, links resolve, the README
stays a first page whose set-up commands are the ones CI runs."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from psdsim.cli import build_parser
from psdsim.sim.metrics import SUMMARY_KEYS
from psdsim.sim.run import simulate
from psdsim.sim.scenario import FIELDS, Scenario
from tests.helpers import paths

ROOT = paths.ROOT
README = ROOT / "README.md"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "measurements").glob("*.md")), README]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _load(name: str, path: Path):
    """A script that is not in a package (docs/generate.py, benchmarks/recording.py), as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = _load("docs_generate", ROOT / "docs" / "generate.py")


@pytest.mark.parametrize("page", ["scenario.md", "summary.md"])
def test_generated_reference_pages_match_the_code(page):
    """Regenerate with `python docs/generate.py` after changing a field, a default or a summary key."""
    path = ROOT / "docs" / page
    expected = {"scenario.md": GENERATE.scenario_md, "summary.md": GENERATE.summary_md}[page]()
    assert path.read_text(encoding="utf-8") == expected, (
        f"docs/{page} is out of date: run `python docs/generate.py` and commit it")


def test_readme_compare_block_is_what_compare_prints_now():
    """The README's one table is `psdsim compare --no-write` on this checkout, exactly."""
    readme = README.read_text(encoding="utf-8")
    assert readme == GENERATE.readme_with_compare(readme, GENERATE.compare_output()), (
        "README.md's compare block is out of date: run `python docs/generate.py` and commit it")
    assert "throughput tok/s (decode)" in readme


def test_every_field_and_summary_key_is_documented():
    text = (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in text for name in FIELDS)
    summary = simulate(Scenario(requests=12, output_len=8, m=4)).summary
    assert list(summary) == list(SUMMARY_KEYS), "a summary key lacks its meaning in sim/metrics.py"
    assert all(meaning.strip() for meaning in SUMMARY_KEYS.values())


def test_readme_compare_block_is_replaced_not_appended():
    text = f"a\n{GENERATE.BEGIN}\nold\n{GENERATE.END}\nb\n"
    once = GENERATE.readme_with_compare(text, "new table")
    assert GENERATE.readme_with_compare(once, "new table") == once
    assert "old" not in once and once.startswith("a\n") and once.endswith("\nb\n")
    with pytest.raises(ValueError, match="BEGIN compare"):
        GENERATE.readme_with_compare("no markers", "x")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    """A fresh clone follows every link: no link to a page that does not exist."""
    missing = []
    for target, _anchor in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_readme_is_a_first_page_with_the_ci_test_command():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines: move reference material into docs/"
    setup = [line for line in lines if line.startswith("python3 -m venv .venv")]
    assert setup == ["python3 -m venv .venv && . .venv/bin/activate && pip install -e . && psdsim run",
                     "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"pip install --quiet -e '\.\[test[^']*\]' && pytest\s*$", ci), (
        ".ci/run must end with the README's test command (pytest, everything, no marker filter)")


def test_record_writes_the_table_under_date_commit_machine_and_command(tmp_path, monkeypatch):
    recording = _load("benchmarks_recording", ROOT / "benchmarks" / "recording.py")
    monkeypatch.setattr(recording, "MEASUREMENTS", tmp_path)
    monkeypatch.setattr("sys.argv", ["benchmarks/sim_speed.py", "--record"])
    text = recording.write("x", "Title", ["a  b", "1  2"], "what was run").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "# Title"
    assert re.fullmatch(r"- measured: \d{4}-\d\d-\d\d \d\d:\d\d UTC", lines[2])
    assert re.match(r"- commit: [0-9a-f]{7,}", lines[3]) and lines[4].startswith("- machine: ")
    assert lines[5] == "- command: `python benchmarks/sim_speed.py --record`"
    assert text.endswith("what was run\n\n```\na  b\n1  2\n```\n")


# The index and the H200 page (which names its own provenance) are not benchmark records.
RECORDS = sorted(p for p in (ROOT / "docs" / "measurements").glob("*.md")
                 if p.name not in ("README.md", "h200_passes.md"))


@pytest.mark.parametrize("page", RECORDS, ids=lambda p: p.name)
def test_every_measurement_names_date_commit_machine_and_command(page):
    head = page.read_text(encoding="utf-8").splitlines()[:12]
    for key in ("measured", "commit", "machine", "command"):
        assert any(line.startswith(f"- {key}: ") for line in head), f"{page.name} lacks '- {key}:'"


BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def psdsim_command_lines(text: str) -> list[list[str]]:
    """Each `psdsim ...` command of the ```bash blocks as argv (after `psdsim`): comments dropped,
    `a && b` split, a redirection and what follows it cut."""
    found = []
    for block in BASH_BLOCK.findall(text):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["psdsim"]:
                    cut = next((i for i, w in enumerate(words) if w.startswith((">", "<", "|"))), len(words))
                    found.append(words[1:cut])
    return found


PAGES_WITH_COMMANDS = [p for p in DOCS if psdsim_command_lines(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_psdsim_command_parses(page):
    """A page's commands name real subcommands and flags (running them is the README tour's test,
    tests/project/test_readme_tour.py; the engine pages' need torch or vLLM)."""
    for argv in psdsim_command_lines(page.read_text(encoding="utf-8")):
        try:
            build_parser(argv).parse_args(argv)
        except Exception as exc:
            pytest.fail(f"{page.name}: `psdsim {shlex.join(argv)}` does not parse: {exc}")


def _skip_calls(path: Path) -> list[ast.Call]:
    """The pytest.mark.skipif(...) and pytest.skip(...) calls of a test file."""
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("skipif", "skip")]


def test_skipped_tests_print_why():
    """The README promises that tests without their extras skip, saying so: pytest prints the
    reasons (-rs), and every skip gives one."""
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    assert "-rs" in pytest_ini["ini_options"]["addopts"].split()
    silent = [f"{path.name}:{call.lineno}" for path in sorted((ROOT / "tests").rglob("test_*.py"))
              for call in _skip_calls(path)
              if not any(k.arg in ("reason", "msg") for k in call.keywords)
              and not (call.func.attr == "skip" and call.args)]
    assert not silent, f"skips without a reason: {silent}"
