"""What appears in an output's place while psdsim writes it, a full disk mid-write, and the record
by which psdsim knows a single file or a sweep's file as its own (docs/outputs.md)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output import atomic_writes, overwrite_guard, own_files, results
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.output.locks import lock_file
from psdsim.sim.output.overwrite_guard import check_output_file
from psdsim.sim.output.own_files import MARKER
from tests.helpers.cli import FAST, SIGTERMED, refused, snapshot, spec


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _staging_then(monkeypatch, act) -> None:
    """Run `act` once the results folder is staged, just before it is renamed into place."""
    staged = results._follow_umask

    def then(folder: Path) -> None:
        staged(folder)
        act()

    monkeypatch.setattr(results, "_follow_umask", then)


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


# ---------------------------------------------------------------------------------------------
# A results folder: what appears in its place while it is staged is kept

def _users_notes() -> None:
    Path("A").mkdir(exist_ok=True)
    Path("A/notes.txt").write_text("my only copy")


def test_a_folder_made_in_the_destination_while_staging_is_kept(capsys, monkeypatch, tmp_path):
    _staging_then(monkeypatch, _users_notes)
    assert "did not write" in refused(capsys, ["run", *FAST, "--out", "A"])
    assert (tmp_path / "A/notes.txt").read_text() == "my only copy"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A"]   # no staging, nothing set aside


def test_a_file_added_to_psdsim_s_own_folder_while_staging_is_kept(capsys, monkeypatch, tmp_path):
    assert main(["run", *FAST, "--out", "A"]) == 0
    before = snapshot(tmp_path / "A")
    _staging_then(monkeypatch, _users_notes)
    assert "files psdsim did not write (notes.txt)" in refused(capsys, ["run", *FAST, "--out", "A"])
    assert snapshot(tmp_path / "A") == {**before, "notes.txt": b"my only copy"}   # the old results too


def test_a_destination_inside_a_folder_another_psdsim_writes_is_refused(capsys, tmp_path):
    (tmp_path / "A").mkdir()
    fd = os.open(lock_file(tmp_path / "A"), os.O_RDWR | os.O_CREAT)   # another writer of A holds it
    try:
        os.write(fd, json.dumps({"pid": 4242, "mark": "0" * 12}).encode())
        fcntl.flock(fd, fcntl.LOCK_EX)
        err = refused(capsys, ["run", *FAST, "--out", "A/sub"])
    finally:
        os.close(fd)
    assert "lies in" in err and "(pid 4242) is writing" in err
    assert list((tmp_path / "A").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# A single file: replaced only when its record shows psdsim wrote it, unchanged

def test_a_file_made_where_the_trace_goes_while_the_run_writes_is_kept(capsys, monkeypatch, tmp_path):
    _staging_then(monkeypatch, lambda: Path("tl.json").write_text("my only copy"))
    err = refused(capsys, ["run", *FAST, "--trace", "tl.json", "--out", "res"])
    assert "'tl.json' is an existing file psdsim did not write" in err
    assert (tmp_path / "tl.json").read_text() == "my only copy"


def test_a_file_that_merely_names_a_psdsim_signature_is_kept(capsys, tmp_path):
    notes = tmp_path / "notebook.txt"
    notes.write_text('Lab notebook: grep for {"otherData":{"psdsim_version" and <testsuite name="psdsim '
                     'validate" in CI logs.\nIMPORTANT\n')
    before = notes.read_bytes()
    assert "did not write" in refused(capsys, ["run", *FAST, "--no-write", "--trace", "notebook.txt"])
    assert notes.read_bytes() == before


def test_an_edited_file_psdsim_wrote_is_kept_an_unchanged_one_replaced(capsys, tmp_path):
    assert main(["run", *FAST, "--no-write", "--trace", "t.json"]) == 0
    first = (tmp_path / "t.json").read_bytes()
    assert main(["run", *FAST, "--no-write", "--trace", "t.json"]) == 0   # unchanged: replaced
    assert (tmp_path / "t.json").read_bytes() == first
    (tmp_path / "t.json").write_bytes(first.replace(b'"traceEvents"', b'"note":"mine","traceEvents"'))
    edited = (tmp_path / "t.json").read_bytes()
    assert "has changed since psdsim wrote it" in refused(capsys, ["run", *FAST, "--no-write", "--trace",
                                                                     "t.json"])
    assert (tmp_path / "t.json").read_bytes() == edited


def test_write_trace_refuses_a_user_s_file_and_a_link(tmp_path):
    from psdsim import load_scenario, simulate, write_trace

    result = simulate(load_scenario(overrides=["requests=5"]), timeline=True)
    (tmp_path / "thesis.txt").write_text("thesis")
    (tmp_path / "link.json").symlink_to("tgt.txt")
    for name in ("thesis.txt", "link.json"):
        with pytest.raises(ScenarioError, match="psdsim never deletes or overwrites"):
            write_trace(result, tmp_path / name)
    assert (tmp_path / "thesis.txt").read_text() == "thesis" and (tmp_path / "link.json").is_symlink()
    assert not (tmp_path / "tgt.txt").exists()
    write_trace(result, tmp_path / "t.json")
    write_trace(result, tmp_path / "t.json")   # its own, unchanged: replaced


def test_a_single_file_s_record_is_its_size_and_sha256(tmp_path):
    from psdsim.sim.output.own_files import record_file

    write_file(tmp_path / "p.json", "{}\n")
    record = json.loads(record_file(tmp_path / "p.json").read_text())
    assert record == {"size": 3, "sha256": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356"}
    check_output_file(tmp_path / "p.json", "--out")


# ---------------------------------------------------------------------------------------------
# A sweep's folder: only the files it wrote, unchanged, are replaced or deleted

@pytest.fixture
def swept(tmp_path) -> tuple[Path, Path]:
    path = spec(tmp_path, "[grid]\nrate = [2.0, 4.0]\nmethod = [\"ar\", \"psd\"]\n")   # a figure
    assert main(["sweep", str(path), "--out", "ref", "--workers", "1"]) == 0
    return path, tmp_path / "ref"


def test_a_sweep_keeps_an_edited_table_and_figure(capsys, swept):
    path, out = swept
    with (out / "results.csv").open("a") as fh:
        fh.write("MY ANALYSIS\n")
    figure = next(p for p in (out / "figures").iterdir() if p.suffix == ".svg")
    figure.write_text("my edit")
    before = snapshot(out)
    err = refused(capsys, ["sweep", str(path), "--out", "ref", "--workers", "1"])
    assert "results.csv" in err and figure.name in err and "did not write, or changed since" in err
    assert snapshot(out) == before


def test_sweep_force_writes_beside_a_user_s_files_never_over_them(capsys, swept, tmp_path):
    path, out = swept
    (tmp_path / "uf" / "figures").mkdir(parents=True)
    for figure in (out / "figures").iterdir():
        (tmp_path / "uf" / "figures" / figure.name).write_text("mine")
    before = snapshot(tmp_path / "uf")
    assert "did not write" in refused(capsys, ["sweep", str(path), "--out", "uf", "--force"])
    assert snapshot(tmp_path / "uf") == before


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_user_s_sweep_json_is_named_as_theirs(capsys, tmp_path, force):
    path = spec(tmp_path, "[grid]\nk = [2, 3]\n")
    (tmp_path / "uf2").mkdir()
    (tmp_path / "uf2" / "sweep.json").write_text('{"my":"cfg"}')
    err = refused(capsys, ["sweep", str(path), "--out", "uf2", "--no-figures", *force])
    assert "holds sweep.json: files psdsim did not write" in err and "design None" not in err
    assert (tmp_path / "uf2" / "sweep.json").read_text() == '{"my":"cfg"}'


def test_a_file_where_the_sweep_s_figures_go_is_refused_before_any_run(capsys, tmp_path):
    path = spec(tmp_path, "[grid]\nk = [2, 3]\n")
    (tmp_path / "uf4").mkdir()
    (tmp_path / "uf4" / "figures").write_text("x")
    assert "holds a file 'figures'" in refused(capsys, ["sweep", str(path), "--out", "uf4", "--force"])
    assert sorted(p.name for p in (tmp_path / "uf4").iterdir()) == ["figures"]   # no results.csv


# ---------------------------------------------------------------------------------------------
# A full disk: one line naming the option, and all of a command's outputs or none

def test_a_full_disk_at_the_lock_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(results.os, "pwrite", _full_disk)
    err = refused(capsys, ["run", *FAST, "--out", "r"])
    assert err.startswith("psdsim: error: --out: cannot write 'r' (No space left on device)")
    assert list(tmp_path.iterdir()) == []


def test_a_results_folder_that_cannot_be_written_leaves_no_trace_either(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(results, "_write_recorded", _full_disk)
    err = refused(capsys, ["run", *FAST, "--trace", "tl.json", "--out", "res"])
    assert err.startswith("psdsim: error: --out: cannot write 'res' (No space left on device)")
    assert list(tmp_path.iterdir()) == []


def test_theory_figures_are_written_all_or_none(capsys, monkeypatch, tmp_path):
    stage = atomic_writes._stage

    def fills_at_the_third(path: Path, *args):
        if "theory_ratio.png" in path.name:   # the third figure (or its record)
            raise OSError(errno.ENOSPC, "No space left on device")
        return stage(path, *args)

    monkeypatch.setattr(atomic_writes, "_stage", fills_at_the_third)
    err = refused(capsys, ["theory", "--plot", "th"])
    assert not any(p.is_file() for p in tmp_path.rglob("*"))   # not the two figures before it either
    assert "--plot: cannot write 'th/theory_ratio.png' (No space left on device)" in err


# ---------------------------------------------------------------------------------------------
# The umask, and the signals that end a write

@pytest.mark.parametrize("mask", [0o277, 0o777])
def test_a_umask_that_takes_the_owner_s_write_permission_is_refused_before_any_work(capsys, tmp_path,
                                                                                    mask):
    old = os.umask(mask)
    try:
        assert main(["run", *FAST, "--out", "U"]) == 2
    finally:
        os.umask(old)
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdsim: error: umask: {mask:03o} takes your own write") and "umask 022" in err
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_results_file_is_named_as_unreadable(capsys, monkeypatch, tmp_path):
    assert main(["run", *FAST, "--out", "R"]) == 0
    readable = os.access
    monkeypatch.setattr(results.os, "access", lambda p, mode: Path(p).name != "summary.json"
                        and readable(p, mode))   # as chmod 000 is to anyone but root
    monkeypatch.setattr(overwrite_guard, "_matches", lambda path, entry: path.name != "summary.json")
    err = refused(capsys, ["run", *FAST, "--out", "R"])
    assert "holds files psdsim cannot read, so nothing shows it wrote them (summary.json)" in err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGHUP, 129), (signal.SIGQUIT, 131)])
def test_sighup_and_sigquit_while_writing_leave_nothing(tmp_path, signum, code):
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED, "run", *FAST, "--out", "R"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "staged"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.strip() == "psdsim: interrupted; nothing was written"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# What sits at the name of a lock, a record or a marker, when psdsim did not put it there: it is
# looked at before it is read (a pipe would hang psdsim, /dev/zero feed it without end), and kept

def _psdsim(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, under a memory cap and a timeout: the old code hung on a
    pipe and read a link to /dev/zero until memory ran out."""
    import resource

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    cli = "import sys; from psdsim.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", cli, *argv], capture_output=True, text=True,
                          timeout=30, preexec_fn=cap_memory)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2 and err.startswith("psdsim: error: --") and "\n" not in err, proc.stderr
    return err


def test_a_user_s_file_at_a_lock_s_name_is_neither_emptied_nor_removed(capsys, tmp_path):
    Path(".K4.psdsim-lock").write_text("my precious data")
    err = refused(capsys, ["run", *FAST, "--out", "K4"])
    assert "/.K4.psdsim-lock', where psdsim keeps the lock of 'K4', is a file psdsim did not write" in err
    assert Path(".K4.psdsim-lock").read_text() == "my precious data"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".K4.psdsim-lock"]


def test_a_lock_file_a_psdsim_left_is_still_taken_over(tmp_path):
    Path(".K5.psdsim-lock").write_text(json.dumps({"pid": 4242, "mark": "0" * 12}) + "\n")
    assert main(["run", *FAST, "--out", "K5"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["K5"]


@pytest.mark.parametrize("lock", ["of the folder above", "of the destination"])
def test_a_pipe_at_a_lock_s_name_is_refused_and_kept(tmp_path, lock):
    Path("A").mkdir()
    where = tmp_path / (".A.psdsim-lock" if lock == "of the folder above" else "A/.sub.psdsim-lock")
    os.mkfifo(where)
    err = _one_line(_psdsim("run", *FAST, "--out", "A/sub"))
    assert f"{str(where)!r}, where psdsim keeps the lock of" in err and "is not a regular file" in err
    assert where.exists() and not (tmp_path / "A" / "sub").exists()


def test_a_lock_whose_folder_takes_no_file_is_one_line_not_a_loop(tmp_path):
    """Creating the lock in a folder that is gone (or in /proc, which takes no new file) fails
    with ENOENT, which the lock's open read as "removed meanwhile, make it again": psdsim spun
    for ever on `--out /proc/x` (run, compare, engine run --trace-dir ...)."""
    with pytest.raises(FileNotFoundError):
        own_files.open_own_file(tmp_path / "gone" / ".x.psdsim-lock", own_files.LOCK_CAP,
                                os.O_RDWR | os.O_CREAT)
    assert own_files.open_own_file(tmp_path / "absent", own_files.LOCK_CAP) is None   # reading: nothing there
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system to write into")
    err = _one_line(_psdsim("run", *FAST, "--out", "/proc/psdsim-out"))
    assert err.startswith("psdsim: error: --out: cannot write '/proc/psdsim-out' (No such file or directory)")


def test_a_pipe_or_a_link_to_dev_zero_as_a_single_file_s_record_is_refused(tmp_path):
    write_file(Path("p.json"), "{}\n")
    record = own_files.record_file(tmp_path / "p.json")
    record.unlink()
    os.mkfifo(record)
    err = _one_line(_psdsim("run", *FAST, "--no-write", "--trace", "p.json"))
    assert "'.p.json.psdsim.json' that is not a regular file" in err
    record.unlink()
    record.symlink_to("/dev/zero")
    assert "'.p.json.psdsim.json' that is a link" in _one_line(_psdsim("run", *FAST, "--no-write",
                                                                        "--trace", "p.json"))
    assert Path("p.json").read_text() == "{}\n" and record.is_symlink()


def test_a_pipe_as_a_results_folder_s_marker_is_refused(tmp_path):
    assert main(["run", *FAST, "--out", "R1"]) == 0
    (tmp_path / "R1" / MARKER).unlink()
    os.mkfifo(tmp_path / "R1" / MARKER)
    assert "'R1' is a folder psdsim did not write" in _one_line(_psdsim("run", *FAST, "--out", "R1"))


def test_a_record_larger_than_any_psdsim_writes_is_not_read(tmp_path):
    write_file(Path("p.json"), "{}\n")
    own_files.record_file(tmp_path / "p.json").write_bytes(b" " * (own_files.RECORD_CAP + 1))
    with pytest.raises(ScenarioError, match="more than psdsim ever writes there"):
        write_file(Path("p.json"), "{}\n")


@pytest.mark.parametrize("kind", ["note", "link", "folder"])
def test_what_is_at_a_record_s_name_is_kept_unless_it_is_psdsim_s_record(tmp_path, kind):
    record = tmp_path / ".p.json.psdsim.json"
    {"note": lambda: record.write_text("my precious record"), "link": lambda: record.symlink_to("victim"),
     "folder": record.mkdir}[kind]()
    with pytest.raises(ScenarioError) as refusal:
        write_file(Path("p.json"), "{}\n")
    assert f"{str(record)!r}, where psdsim keeps the record of 'p.json'" in refusal.value.problem
    assert "free some space" not in refusal.value.fix
    assert not (tmp_path / "p.json").exists()
    assert {"note": lambda: record.read_text() == "my precious record", "link": record.is_symlink,
            "folder": record.is_dir}[kind]()


def test_a_record_left_without_its_file_is_psdsim_s_and_is_replaced(tmp_path):
    write_file(Path("p.json"), "old\n")
    Path("p.json").unlink()   # the user deleted the file, not its hidden record
    write_file(Path("p.json"), "new\n")
    assert overwrite_guard.is_own_file(tmp_path / "p.json")


def test_a_sweep_keeps_a_user_s_note_at_a_run_s_record_name(capsys, swept):
    path, out = swept
    run = next(p for p in (out / "runs").iterdir() if not p.name.startswith("."))
    run.unlink()
    own_files.record_file(run).write_text("my notes")
    err = refused(capsys, ["sweep", str(path), "--out", "ref", "--workers", "1"])
    assert f"keeps the record of {str(run)!r}, is not a record psdsim wrote" in err
    assert own_files.record_file(run).read_text() == "my notes"
    assert capsys.readouterr().out == ""


def test_only_names_a_killed_writer_s_staging_has_exactly_are_removed(tmp_path):
    mark = "0123456789ab"
    Path(".R.psdsim-lock").write_text(json.dumps({"pid": 4242, "mark": mark}) + "\n")
    staging = [tmp_path / f".R.psdsim-{mark}-abcd_123", tmp_path / f".R.psdsim-{mark}-zzzzzzzz"]
    copies = [tmp_path / f".R.psdsim-{mark}-abcd_123.mycopy", tmp_path / f".R.psdsim-{mark}-abcd12"]
    for folder in (staging[0], *copies):
        folder.mkdir()
        (folder / "summary.json").write_text("{}")
    staging[1].write_text("{}")
    assert main(["run", *FAST, "--out", "R"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["R", *(p.name for p in copies)])
