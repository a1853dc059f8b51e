"""psdsim never deletes or overwrites what it did not write: the data-loss rule of docs/outputs.md.

For every command that writes: an existing file, a folder holding a user's files and the working
directory itself are refused with exit 2 and one line on stderr, and every byte is still there.
A results folder a command wrote itself may be replaced by the same command, and only by it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.commands import common
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.overwrite_guard import check_output_file
from psdsim.sim.output.own_files import MARKER
from psdsim.sim.output.results import write_folder
from tests.helpers import paths
from tests.helpers.cli import FAST, SIGTERMED, refused, snapshot

PLAN = paths.ROOT / "examples" / "plan.toml"

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


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_existing_file_is_refused_and_kept(capsys, tmp_path, command):
    mine = tmp_path / "myfile.txt"
    mine.write_bytes(b"my notes\n")
    err = refused(capsys, [*COMMANDS[command], "--out", str(mine)])
    assert "existing file" in err
    assert mine.read_bytes() == b"my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myfile.txt"]  # nothing else written


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_with_foreign_files_is_refused_and_kept(capsys, tmp_path, command):
    folder = tmp_path / "mydir"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.bin").write_bytes(bytes(range(256)))
    before = snapshot(tmp_path)
    err = refused(capsys, [*COMMANDS[command], "--out", str(folder)])
    assert "did not write" in err
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("spelling", [".", "absolute", "parent"])
def test_the_working_directory_is_refused_and_kept(capsys, tmp_path, command, spelling):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("keep")
    os.chdir(work)
    out = {".": ".", "absolute": str(work), "parent": ".."}[spelling]
    before = snapshot(tmp_path)
    err = refused(capsys, [*COMMANDS[command], "--out", out])
    assert "working directory" in err
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no ..old.XXXX left behind


def test_the_same_command_replaces_its_own_folder_and_no_other(capsys, tmp_path):
    assert main(["run", *FAST, "--out", "res"]) == 0
    assert (tmp_path / "res" / MARKER).is_file()
    assert main(["run", *FAST, "--set", "k=2", "--out", "res"]) == 0  # its own: replaced
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["k"] == 2
    capsys.readouterr()
    err = refused(capsys, ["compare", *FAST, "--out", "res"])  # another command's folder
    assert "psdsim run" in err
    (tmp_path / "res" / "notes.txt").write_text("mine")  # a user's file added to it
    err = refused(capsys, ["run", *FAST, "--out", "res"])
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
    err = refused(capsys, ["run", *FAST, "--no-write", "--trace", str(trace)])
    assert "--trace" in err and trace.read_text() == '{"mine": true}'
    trace.unlink()
    assert main(["run", *FAST, "--no-write", "--trace", str(trace)]) == 0
    first = trace.read_bytes()
    assert main(["run", *FAST, "--no-write", "--trace", str(trace)]) == 0  # its own: replaced
    assert trace.read_bytes() == first


def test_a_figure_is_psdsim_s_by_its_record_not_by_its_metadata(tmp_path):
    import matplotlib

    from psdsim.sim.output.atomic_writes import write_file
    from psdsim.sim.output.plots import figure_formats
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for fmt, data in figure_formats(plt.figure()).items():
        ours, copied = tmp_path / f"f.{fmt}", tmp_path / f"copy.{fmt}"
        write_file(ours, data)
        check_output_file(ours, "--plot")  # written with its record: psdsim's own, no error
        copied.write_bytes(data)   # the same bytes, psdsim's metadata and all, but no record
        with pytest.raises(ScenarioError, match="did not write"):
            check_output_file(copied, "--plot")


@pytest.mark.parametrize("option", ["--out", "--plot", "--samples"])
def test_calibrate_keeps_foreign_files(capsys, tmp_path, option):
    mine = tmp_path / "mine.dat"
    mine.write_bytes(b"\x00precious")
    args = ["calibrate", str(tmp_path / "absent.sqlite"), "--out", str(tmp_path / "p.json")]
    args += [option, str(mine)] if option != "--out" else []
    if option == "--out":
        args[-1] = str(mine)
    err = refused(capsys, args)
    assert option in err and mine.read_bytes() == b"\x00precious"


def test_a_user_file_that_mentions_psdsim_is_not_taken_for_ours(capsys, tmp_path):
    notes = tmp_path / "timeline.json"
    notes.write_text('{"my notes": "psdsim run --trace wrote here once"}')
    err = refused(capsys, ["run", *FAST, "--no-write", "--trace", str(notes)])
    assert "--trace" in err and "psdsim run --trace wrote" in notes.read_text()


# Paths are checked where the write lands, not as spelled: `new/../mydir` is mydir once new/ is made,
# and before this rule such a path replaced (deleted) a user's folder or file.


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_path_through_a_missing_folder_is_checked_where_it_lands(capsys, tmp_path, command):
    (tmp_path / "mydir").mkdir()
    (tmp_path / "mydir" / "notes.txt").write_text("precious")
    err = refused(capsys, [*COMMANDS[command], "--out", "new/../mydir"])
    assert "did not write" in err
    assert (tmp_path / "mydir" / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]


def test_sweep_checks_its_folder_where_it_lands(capsys, tmp_path):
    (tmp_path / "mydir").mkdir()
    (tmp_path / "mydir" / "results.csv").write_text("my table")
    err = refused(capsys, ["sweep", str(PLAN.with_name("sweep.toml")), "--out", "new/../mydir"])
    assert "holds results.csv: files psdsim did not write" in err
    assert (tmp_path / "mydir" / "results.csv").read_text() == "my table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]


def test_a_single_file_is_checked_where_it_lands(capsys, tmp_path):
    (tmp_path / "notes.json").write_text('{"mine": true}')
    err = refused(capsys, ["calibrate", "absent.json", "--out", "new/../notes.json"])
    assert "did not write" in err and (tmp_path / "notes.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]


def test_a_name_the_system_cannot_take_is_one_line(capsys):
    err = refused(capsys, ["calibrate", "absent.json", "--out", "p" * 300 + ".json"])
    assert err.startswith("psdsim: error: --out: cannot use")


# An output never lands on an input, nor two outputs on one file, even where psdsim wrote the input
# (a psdsim timeline is a Kineto trace that calibrate reads; a profile is what run reads).


def _timeline(capsys) -> Path:
    assert main(["run", *FAST, "--no-write", "--trace", "t.json"]) == 0
    capsys.readouterr()
    return Path("t.json")


@pytest.mark.parametrize("spelling", ["t.json", "new/../t.json", "absolute"])
def test_calibrate_never_writes_over_its_trace(capsys, tmp_path, spelling):
    trace = _timeline(capsys)
    before = trace.read_bytes()
    out = str(tmp_path / "t.json") if spelling == "absolute" else spelling
    for option in ("--out", "--samples"):
        args = ["calibrate", "t.json", option, out] + (["--out", "p.json"] if option != "--out" else [])
        err = refused(capsys, args)
        assert err.startswith(f"psdsim: error: {option}: ") and "would overwrite the input" in err
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.json.psdsim.json", "t.json"]   # and its record


def test_a_run_re_runs_its_own_scenario_into_its_own_folder(capsys, tmp_path):
    assert main(["run", *FAST, "--out", "res"]) == 0
    assert main(["run", "res/scenario.toml", "--out", "res"]) == 0   # the input is read before


def test_a_timeline_inside_the_results_folder_is_refused(capsys, tmp_path):
    assert main(["run", *FAST, "--out", "res"]) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)
    err = refused(capsys, ["run", *FAST, "--out", "res", "--trace", "res/t.json"])
    assert err.startswith("psdsim: error: --out: ") and "--trace" in err   # the folder would take it along
    assert snapshot(tmp_path) == before


def test_two_outputs_on_one_file_are_refused(capsys, tmp_path):
    err = refused(capsys, ["calibrate", "absent.json", "--out", "same.csv", "--samples", "same.csv"])
    assert err.startswith("psdsim: error: --samples: ") and "--out" in err
    assert list(tmp_path.iterdir()) == []


def test_run_never_writes_its_timeline_over_its_profile(capsys, tmp_path):
    from tests.helpers.traces import write_trace

    write_trace(tmp_path / "m.jsonl", bundles=3)
    assert main(["calibrate", "m.jsonl", "--out", "p.json"]) == 0
    before = (tmp_path / "p.json").read_bytes()
    err = refused(capsys, ["run", *FAST, "--no-write", "--profile", "p.json", "--trace", "p.json"])
    assert "would overwrite the input" in err and (tmp_path / "p.json").read_bytes() == before


def test_calibrate_writes_all_of_its_files_or_none(capsys, tmp_path):
    from tests.helpers.traces import write_trace

    write_trace(tmp_path / "m.jsonl", bundles=3)
    (tmp_path / "afile").write_text("a file where a folder should be")
    err = refused(capsys, ["calibrate", "m.jsonl", "--out", "p.json", "--plot", "afile/fit.png"])
    assert err.startswith("psdsim: error: --plot: cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "m.jsonl"]   # no p.json


@pytest.mark.parametrize(("name", "magic"),
                         [("fit.png", b"\x89PNG"), ("fit.svg", b"<?xml"), ("fit.pdf", b"%PDF")])
def test_calibrate_writes_the_figure_type_its_name_says(capsys, tmp_path, name, magic):
    from tests.helpers.traces import write_trace

    write_trace(tmp_path / "m.jsonl", bundles=3)
    assert main(["calibrate", "m.jsonl", "--out", "p.json", "--plot", name]) == 0
    assert (tmp_path / name).read_bytes().startswith(magic)
    # and the figure is its own to replace on a re-run (a PDF names psdsim in its trailer, at its end)
    assert main(["calibrate", "m.jsonl", "--out", "p.json", "--plot", name]) == 0
    capsys.readouterr()
    err = refused(capsys, ["calibrate", "m.jsonl", "--out", "p.json", "--plot", "fit.gif"])
    assert "--plot" in err and "FILE.pdf" in err


def test_theory_writes_its_figures_beside_a_users_files_never_over_them(capsys, tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "notes.txt").write_text("mine")
    assert main(["theory", "--plot", "figs"]) == 0          # beside them
    assert (tmp_path / "figs" / "notes.txt").read_text() == "mine"
    assert main(["theory", "--plot", "figs"]) == 0          # its own figures: replaced
    capsys.readouterr()
    (tmp_path / "figs" / "theory_ratio.png").write_bytes(b"my own figure")
    err = refused(capsys, ["theory", "--plot", "figs"])
    assert "theory_ratio.png" in err
    assert (tmp_path / "figs" / "theory_ratio.png").read_bytes() == b"my own figure"


def test_sweep_force_writes_beside_a_users_files_never_over_them(capsys, tmp_path):
    (tmp_path / "mydir").mkdir()
    (tmp_path / "mydir" / "results.csv").write_text("my table")
    err = refused(capsys, ["sweep", str(PLAN.with_name("sweep.toml")), "--out", "mydir", "--force"])
    assert "results.csv" in err and "did not write" in err
    assert (tmp_path / "mydir" / "results.csv").read_text() == "my table"
    assert sorted(p.name for p in (tmp_path / "mydir").iterdir()) == ["results.csv"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_is_refused_as_an_output_or_a_scenario(capsys, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    err = refused(capsys, ["calibrate", "absent.json", "--out", "pipe"])   # reading its head would block
    assert "not a regular file" in err
    assert main(["run", "pipe"]) == 2 and "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["run", *FAST, "--out", "afile/res"],
                                  ["calibrate", "absent.json", "--out", "afile/p.json"],
                                  ["validate", "--traces", "sd", "--out", "afile/res"]])
def test_an_output_under_a_file_is_refused_before_any_work(capsys, tmp_path, argv):
    (tmp_path / "afile").write_text("a file")
    err = refused(capsys, argv)
    assert "'afile' is a file" in err or "is a file, not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("junit", ["out/validate.json", "out/sub/j.xml", "sd"])
def test_validate_writes_its_junit_file_over_neither_its_report_nor_a_trace(capsys, tmp_path, junit):
    (tmp_path / "sd").mkdir()
    err = refused(capsys, ["validate", "--traces", "sd", "--out", "out", "--junit", junit])
    assert err.startswith("psdsim: error: --junit: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sd"]


def test_files_written_as_one_refuse_a_folder_in_the_way(tmp_path):
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.output.atomic_writes import write_files

    (tmp_path / "report.json").mkdir()
    with pytest.raises(ScenarioError, match="--out"):
        write_files([("--out", tmp_path / "a.txt", "a"), ("--out", tmp_path / "report.json", "{}")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]   # a.txt not written either


def test_validate_takes_every_traces_flag(tmp_path):
    from psdsim.cli import build_parser

    argv = ["validate", "--traces", "a", "b", "--traces", "c"]
    assert build_parser(argv).parse_args(argv).traces == [Path("a"), Path("b"), Path("c")]


@pytest.mark.parametrize("argv", [["calibrate", "m.jsonl", "--out", "new/../p.json"],
                                  ["run", *FAST, "--out", "new/../res"]])
def test_a_path_through_a_missing_folder_leaves_no_stray_folder(capsys, tmp_path, argv):
    from tests.helpers.traces import write_trace

    write_trace(tmp_path / "m.jsonl", bundles=3)
    assert main(argv) == 0
    assert not (tmp_path / "new").exists() and (tmp_path / argv[-1].removeprefix("new/../")).exists()


# Two writers, killed writers, forged markers: every write holds its destination's lock from its
# checks to its last rename, and replaces only what the marker proves psdsim wrote.

HOLD = """
import sys, tempfile
from pathlib import Path
from psdsim.sim.output.locks import output_lock, staging_prefix
with output_lock(Path(sys.argv[1])) as real:
    if sys.argv[2:] == ["beside"]:   # what a writer killed in the middle of its rename leaves
        staged = Path(tempfile.mkdtemp(prefix=staging_prefix(real), dir=real.parent))
        (staged / "summary.json").write_text("half")
    elif sys.argv[2:] == ["inside"]:   # ... and one filling its folder file by file (validate)
        real.mkdir()
        tempfile.mkstemp(prefix=staging_prefix(real / "validate.json"), dir=real)
    print("held", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def _held_elsewhere(path: str, *extra: str) -> Iterator[subprocess.Popen]:
    """The lock of `path` held by another process (which may leave staging behind)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, path, *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.parametrize("argv", [["run", *FAST, "--out", "SAME"],
                                  ["calibrate", "m.jsonl", "--out", "SAME"],
                                  ["sweep", str(PLAN.with_name("sweep.toml")), "--out", "SAME"]])
def test_a_second_writer_is_refused_at_once_naming_the_first(capsys, tmp_path, monkeypatch, argv):
    from tests.helpers.traces import write_trace

    write_trace(tmp_path / "m.jsonl", bundles=3)
    monkeypatch.setattr("psdsim.sim.run.simulate", lambda *a, **k: pytest.fail("worked before refusing"))
    with _held_elsewhere("SAME") as holder:
        err = refused(capsys, argv)
        assert f"'SAME' is being written by another psdsim (pid {holder.pid})" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]   # its lock file gone with it


def test_a_lock_left_by_a_killed_writer_is_taken_and_its_staging_removed(capsys, tmp_path):
    decoys = [tmp_path / ".R.psdsim-0123456789ab-mine", tmp_path / ".R.backup"]   # the user's
    for decoy in decoys:
        decoy.mkdir()
    with _held_elsewhere("R", "beside") as holder:
        assert len(list(tmp_path.glob(".R.psdsim-*-*"))) == 2
        holder.kill()
        holder.wait()
    assert (tmp_path / ".R.psdsim-lock").exists()   # SIGKILL: nothing could clean up
    assert main(["run", *FAST, "--out", "R"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["R", *(d.name for d in decoys)])


def test_a_killed_writers_staging_inside_its_folder_is_removed(tmp_path):
    from psdsim.sim.output.atomic_writes import claim_folder

    with _held_elsewhere("V", "inside") as holder:
        assert [p.name.startswith(".validate.json.psdsim-") for p in (tmp_path / "V").iterdir()] == [True]
        holder.kill()
        holder.wait()
    claim_folder(Path("V"), "validate")   # refused, were the staged file taken for the user's
    assert sorted(p.name for p in (tmp_path / "V").iterdir()) == [MARKER]


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")
def test_sigterm_while_writing_leaves_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED, "run", *FAST, "--out", "R"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "staged"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip() == "psdsim: interrupted; nothing was written"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("files", "why"), [
    (["important.txt"], "records no sizes or hashes"),   # an earlier psdsim's marker, or a forged one
    ({"important.txt": {"size": 5, "sha256": "0" * 64}}, "changed since psdsim wrote them (important.txt)")])
def test_a_forged_marker_deletes_nothing(capsys, tmp_path, files, why):
    (tmp_path / "F").mkdir()
    (tmp_path / "F" / "important.txt").write_text("mine\n")
    (tmp_path / "F" / MARKER).write_text(json.dumps({"command": "run", "files": files}))
    before = snapshot(tmp_path)
    assert why in refused(capsys, ["run", *FAST, "--out", "F"])
    assert snapshot(tmp_path) == before


def test_a_results_file_the_user_edited_is_kept(capsys, tmp_path):
    assert main(["run", *FAST, "--out", "res"]) == 0
    summary = tmp_path / "res" / "summary.json"
    summary.write_text(summary.read_text().replace('"k": 3', '"k": 3, "note": "mine"'))
    before = snapshot(tmp_path)
    capsys.readouterr()
    err = refused(capsys, ["run", *FAST, "--out", "res"])
    assert "changed since psdsim wrote them (summary.json)" in err
    assert snapshot(tmp_path) == before


def test_a_folder_the_user_made_in_a_results_folder_is_kept(capsys, tmp_path):
    assert main(["compare", *FAST, "--out", "res"]) == 0   # its own sub-folders (psd/, sd/) are fine
    (tmp_path / "res" / "notes").mkdir()
    capsys.readouterr()
    err = refused(capsys, ["compare", *FAST, "--out", "res"])
    assert "folders psdsim did not make (notes/)" in err and (tmp_path / "res" / "notes").is_dir()


@pytest.mark.parametrize("failing", [1, 2])   # setting the old folder aside; putting the new one in
def test_a_failed_swap_keeps_the_old_results_and_leaves_nothing(capsys, tmp_path, monkeypatch, failing):
    from psdsim.sim.output import results

    assert main(["run", *FAST, "--out", "R"]) == 0
    before = snapshot(tmp_path)
    calls, replace = [], os.replace

    def read_only(src, dst):   # what a read-only --out or a umask of 777 gives a rename
        calls.append(src)
        if len(calls) == failing:
            raise PermissionError(13, "Permission denied")
        return replace(src, dst)

    monkeypatch.setattr(results.os, "replace", read_only)
    capsys.readouterr()
    err = refused(capsys, ["run", *FAST, "--set", "k=2", "--out", "R"])
    assert "cannot write 'R' (Permission denied)" in err
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R"]   # no .R.old.XXXX, no staging


def test_sweep_on_a_full_disk_leaves_no_empty_folder(capsys, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("psdsim.studies.sweep.write_file", full)
    err = refused(capsys, ["sweep", str(PLAN.with_name("sweep.toml")), "--out", "new/sw"])
    assert "No space left on device" in err
    assert list(tmp_path.iterdir()) == []


def test_a_disk_that_fills_during_a_sweep_is_one_line(capsys, tmp_path, monkeypatch):
    from psdsim.studies import sweep

    def full_once_running(path, content, *args, **kwargs):
        if sweep.RUNS in Path(path).parts:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_file(path, content, *args, **kwargs)

    write_file = sweep.write_file
    monkeypatch.setattr(sweep, "write_file", full_once_running)
    monkeypatch.setattr(common, "LONG_WORK_S", math.inf)   # no estimate line before the error
    err = refused(capsys, ["sweep", str(PLAN.with_name("sweep.toml")), "--out", "sw", "--workers", "1"])
    assert err.startswith("psdsim: error: --out: cannot write 'sw' (No space left on device)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sw"]   # its lock let go, the sweep resumable


def test_a_file_validate_wrote_and_the_user_edited_is_kept(tmp_path):
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.output.atomic_writes import claim_folder, write_file
    from psdsim.sim.output.locks import output_lock

    with output_lock(Path("V")):   # as validate runs: its folder claimed, then filled file by file
        claim_folder(Path("V"), "validate")
        write_file(Path("V/scenarios/sd_k1.toml"), "[run]\n")
    claim_folder(Path("V"), "validate")   # its own files, as it wrote them: written into again
    (tmp_path / "V" / "notes.txt").write_text("mine")   # beside them: never touched
    (tmp_path / "V" / "scenarios" / "sd_k1.toml").write_text("[run]\nk = 2\n")
    before = snapshot(tmp_path)
    with pytest.raises(ScenarioError, match=r"changed since psdsim wrote them \(scenarios/sd_k1.toml\)"):
        claim_folder(Path("V"), "validate")
    assert snapshot(tmp_path) == before
