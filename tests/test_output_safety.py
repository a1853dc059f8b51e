"""psdsim never deletes or overwrites what it did not write (issue 14's data-loss rule).

For every command that writes: an existing file, a folder holding a user's files and the working
directory itself are refused with exit 2 and one line on stderr, and every byte is still there.
A results folder a command wrote itself may be replaced by the same command, and only by it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from psdsim.sim.output.results import MARKER, check_output_file, write_folder

from psdsim.cli import main

FAST = ["--set", "requests=12", "--set", "output_len=8", "--set", "m=2", "--set", "prompt_len=16"]
PLAN = Path(__file__).resolve().parents[1] / "examples" / "plan.toml"

# Each command that writes a results folder, with the arguments of a fast call.
COMMANDS = {
    "run": ["run", *FAST],
    "compare": ["compare", *FAST],
    "paper": ["paper", "--preset", "setting2", "--quick"],
    "plan": ["plan", str(PLAN)],
    "validate": ["validate"],  # refused before the engine starts
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: --") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_existing_file_is_refused_and_kept(capsys, tmp_path, command):
    mine = tmp_path / "myfile.txt"
    mine.write_bytes(b"my notes\n")
    err = _refused(capsys, [*COMMANDS[command], "--out", str(mine)])
    assert "existing file" in err
    assert mine.read_bytes() == b"my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myfile.txt"]  # nothing else written


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_with_foreign_files_is_refused_and_kept(capsys, tmp_path, command):
    folder = tmp_path / "mydir"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.bin").write_bytes(bytes(range(256)))
    before = _snapshot(tmp_path)
    err = _refused(capsys, [*COMMANDS[command], "--out", str(folder)])
    assert "did not write" in err
    assert _snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("spelling", [".", "absolute", "parent"])
def test_the_working_directory_is_refused_and_kept(capsys, tmp_path, command, spelling):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("keep")
    os.chdir(work)
    out = {".": ".", "absolute": str(work), "parent": ".."}[spelling]
    before = _snapshot(tmp_path)
    err = _refused(capsys, [*COMMANDS[command], "--out", out])
    assert "working directory" in err
    assert _snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no ..old.XXXX left behind


def test_the_same_command_replaces_its_own_folder_and_no_other(capsys, tmp_path):
    assert main(["run", *FAST, "--out", "res"]) == 0
    assert (tmp_path / "res" / MARKER).is_file()
    assert main(["run", *FAST, "--set", "k=2", "--out", "res"]) == 0  # its own: replaced
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["k"] == 2
    capsys.readouterr()
    err = _refused(capsys, ["compare", *FAST, "--out", "res"])  # another command's folder
    assert "psdsim run" in err
    (tmp_path / "res" / "notes.txt").write_text("mine")  # a user's file added to it
    err = _refused(capsys, ["run", *FAST, "--out", "res"])
    assert "notes.txt" in err and (tmp_path / "res" / "notes.txt").read_text() == "mine"


def test_compare_can_rerun_into_its_own_folder(tmp_path):
    assert main(["compare", *FAST, "--out", "cmp"]) == 0
    assert main(["compare", *FAST, "--out", "cmp"]) == 0
    assert (tmp_path / "cmp" / "psd" / "summary.json").is_file()


def test_an_empty_folder_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["run", *FAST, "--out", "empty"]) == 0
    assert (tmp_path / "empty" / "summary.json").is_file()


def test_results_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_folder(tmp_path / "out", {"a.txt": "x"}, "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "out" / "a.txt").stat().st_mode) == 0o644


def test_single_output_files_are_replaced_only_when_psdsim_wrote_them(capsys, tmp_path):
    trace = tmp_path / "timeline.json"
    trace.write_text('{"mine": true}')
    err = _refused(capsys, ["run", *FAST, "--no-write", "--trace", str(trace)])
    assert "--trace" in err and trace.read_text() == '{"mine": true}'
    trace.unlink()
    assert main(["run", *FAST, "--no-write", "--trace", str(trace)]) == 0
    first = trace.read_bytes()
    assert main(["run", *FAST, "--no-write", "--trace", str(trace)]) == 0  # its own: replaced
    assert trace.read_bytes() == first


def test_a_figure_psdsim_wrote_names_it(tmp_path):
    import matplotlib
    from psdsim.sim.output.plots import figure_formats
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for fmt, data in figure_formats(plt.figure()).items():
        path = tmp_path / f"f.{fmt}"
        path.write_bytes(data)
        check_output_file(path, "--plot")  # recognised as psdsim's own: no error


@pytest.mark.parametrize("option", ["--out", "--plot", "--samples"])
def test_calibrate_keeps_foreign_files(capsys, tmp_path, option):
    mine = tmp_path / "mine.dat"
    mine.write_bytes(b"\x00precious")
    args = ["calibrate", str(tmp_path / "absent.sqlite"), "--out", str(tmp_path / "p.json")]
    args += [option, str(mine)] if option != "--out" else []
    if option == "--out":
        args[-1] = str(mine)
    err = _refused(capsys, args)
    assert option in err and mine.read_bytes() == b"\x00precious"


def test_a_user_file_that_mentions_psdsim_is_not_taken_for_ours(capsys, tmp_path):
    notes = tmp_path / "timeline.json"
    notes.write_text('{"my notes": "psdsim run --trace wrote here once"}')
    err = _refused(capsys, ["run", *FAST, "--no-write", "--trace", str(notes)])
    assert "--trace" in err and "psdsim run --trace wrote" in notes.read_text()
