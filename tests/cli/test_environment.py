"""The `psdsim` command in a hostile environment: an ASCII-only terminal, stdout on a full disk or
a pipe whose reader went away, an MPLBACKEND matplotlib does not know. Each is a real process
(the environment is read at interpreter start), each small and fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from psdsim.terminal import EXIT_OUTPUT_LOST

FAST = ["--set", "requests=8", "--set", "output_len=8", "--set", "prompt_len=16", "--set", "m=4"]
ASCII_ONLY = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
              "PYTHONIOENCODING": ""}


def _psdsim(args: list[str], cwd: Path, env: dict[str, str] | None = None,
            stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    """psdsim with buffered stdout unless env asks otherwise (PYTHONUNBUFFERED=1)."""
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run([sys.executable, "-m", "psdsim", *args], cwd=cwd, stdout=stdout,
                          stderr=subprocess.PIPE, env={**inherited, **(env or {})}, timeout=300)


# Buffered, a small output fails only at the flush after the command; unbuffered, at its write.
BUFFERING = pytest.mark.parametrize("env", [{}, {"PYTHONUNBUFFERED": "1"}], ids=["buffered", "unbuffered"])


def test_an_ascii_only_terminal_gets_ascii_spellings_not_a_traceback(tmp_path):
    proc = _psdsim(["compare", *FAST, "--no-write"], tmp_path, ASCII_ONLY)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    out = proc.stdout.decode("ascii")   # every byte ASCII
    assert "^ higher is better, v lower is better" in out
    assert "psdsim compare . " in out and "x" in out


def test_an_ascii_only_terminal_gets_the_error_line_in_ascii_too(tmp_path):
    (tmp_path / "null.json").write_text("null")
    proc = _psdsim(["run", "--no-write", "--profile", "null.json"], tmp_path, ASCII_ONLY)
    assert proc.returncode == 2
    assert proc.stderr.decode("ascii").endswith("give a profile written by `psdsim calibrate ... --out "
                                                "profile.json`\n")


def test_an_ascii_only_terminal_still_gets_valid_json(tmp_path):
    proc = _psdsim(["compare", *FAST, "--no-write", "--json"], tmp_path, ASCII_ONLY)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert isinstance(json.loads(proc.stdout.decode("ascii")), dict)


def test_an_ascii_only_terminal_keeps_the_bytes_of_a_non_utf8_file_name(tmp_path):
    """Such a locale reads argv's undecodable bytes as surrogates; they are written back as the
    same bytes, so a printed path is the path on disk."""
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(folder)
    proc = subprocess.run([sys.executable, "-m", "psdsim", "run", *FAST, "--out", folder + b"/r"],
                          cwd=tmp_path, capture_output=True, env={**os.environ, **ASCII_ONLY}, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert b"caf\xe9/r" in proc.stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@BUFFERING
@pytest.mark.parametrize("args", [["run", *FAST, "--no-write"], ["catalog"], ["scenario"]])
def test_stdout_on_a_full_disk_is_one_line_and_its_own_exit_code(tmp_path, args, env):
    with open("/dev/full", "wb") as full:
        proc = _psdsim(args, tmp_path, env, stdout=full)
    err = proc.stderr.decode()
    lines = [line for line in err.splitlines() if line.startswith("psdsim: error:")]
    assert proc.returncode == EXIT_OUTPUT_LOST, err[-2000:]
    assert lines == ["psdsim: error: stdout: cannot write the output (No space left on device); fix: send "
                     "the output where it can be written (a disk with free space, an open stdout)"]
    assert "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.parametrize("args", [["catalog"], ["run", *FAST, "--no-write", "--json"]])
def test_a_closed_stdout_is_one_line_and_the_same_exit_code(tmp_path, args):
    """`psdsim catalog >&-`: Python then has no sys.stdout at all (None)."""
    proc = subprocess.run([sys.executable, "-m", "psdsim", *args], cwd=tmp_path, stderr=subprocess.PIPE,
                          preexec_fn=lambda: os.close(1), timeout=300)
    assert proc.returncode == EXIT_OUTPUT_LOST, proc.stderr.decode()[-2000:]
    err = proc.stderr.decode()
    assert err.startswith("psdsim: error: stdout: cannot write the output (stdout is closed)"), err


@BUFFERING
@pytest.mark.parametrize("args", [["catalog", "--json"], ["scenario"]])
def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path, args, env):
    """`psdsim catalog | head -1` when head has gone before psdsim writes (or flushes)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _psdsim(args, tmp_path, env, stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()


@pytest.mark.parametrize("args", [
    ["run", *FAST, "--plots", "--out", "out"],
    ["theory", "--plot", "out"],
])
def test_an_unknown_mplbackend_does_not_stop_figures_written_to_files(tmp_path, args):
    """psdsim only writes figure files (with Agg); MPLBACKEND names a backend for windows."""
    proc = _psdsim(args, tmp_path, {"MPLBACKEND": "nonsense"})
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert any(p.suffix == ".png" for p in (tmp_path / "out").iterdir())


# A matplotlibrc that changes every figure: a font not installed (matplotlib then logs a
# `findfont:` line per text), thick lines, a coloured background, and a key it does not know.
CUSTOM_RC = "font.family: NoSuchFont\nlines.linewidth: 7\naxes.facecolor: pink\nbogus.key: 3\n"
PLOTS = ["run", *FAST, "--plots", "--out"]


@pytest.mark.parametrize("where", ["working folder", "MATPLOTLIBRC", "MPLCONFIGDIR"])
def test_a_users_matplotlibrc_changes_no_figure_and_prints_nothing(tmp_path, where):
    """psdsim's figures take matplotlib's defaults wherever a user's rc file is found, so the same
    figure is the same bytes; and matplotlib's warnings stay off stderr."""
    plain = _psdsim([*PLOTS, "plain"], tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()[-2000:]
    (tmp_path / "rc").mkdir()
    (tmp_path / "rc" / "matplotlibrc").write_text(CUSTOM_RC)
    cwd, env = {"working folder": (tmp_path / "rc", {}),
                "MATPLOTLIBRC": (tmp_path, {"MATPLOTLIBRC": str(tmp_path / "rc" / "matplotlibrc")}),
                "MPLCONFIGDIR": (tmp_path, {"MPLCONFIGDIR": str(tmp_path / "rc")})}[where]
    custom = _psdsim([*PLOTS, str(tmp_path / "custom")], cwd, env)
    assert custom.returncode == 0 and custom.stderr == plain.stderr, custom.stderr.decode()[-2000:]
    figure = "occupancy.png"
    assert (tmp_path / "custom" / figure).read_bytes() == (tmp_path / "plain" / figure).read_bytes()


def test_an_unusable_mplconfigdir_prints_no_warnings(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    proc = _psdsim([*PLOTS, "out"], tmp_path, {"MPLCONFIGDIR": str(tmp_path / "afile" / "mpl")})
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()[-2000:]
    assert (tmp_path / "out" / "occupancy.png").is_file()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_matplotlibrc_that_never_ends_does_not_hang_the_figures(tmp_path):
    """MATPLOTLIBRC=/dev/zero, or a pipe (used here: it holds no memory while it waits), is read
    by `import matplotlib` until it ends."""
    os.mkfifo(tmp_path / "rc")
    proc = subprocess.run([sys.executable, "-m", "psdsim", *PLOTS, "out"], cwd=tmp_path, capture_output=True,
                          env={**os.environ, "MATPLOTLIBRC": str(tmp_path / "rc")}, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert (tmp_path / "out" / "occupancy.png").is_file()
