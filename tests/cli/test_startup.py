"""The front door loads only what a command needs: `psdsim --help` no
simulator at all, `psdsim run` no scipy at all (not the theory's or the calibration's fits, and
the prompt lengths' normal distribution comes from the standard library), and the lazy public API
still resolves every name. Times are in benchmarks/startup.py, not here."""

from __future__ import annotations

import subprocess
import sys

import pytest

import psdsim
from psdsim.cli import COMMANDS, main

RUN = ["run", "--set", "requests=6", "--set", "output_len=4", "--set", "prompt_len=8", "--no-write", "--json"]


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import contextlib, io, sys\nfrom psdsim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    code = main(sys.argv[1:])\n"
            "assert code == 0, code\nprint(' '.join(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["engine", "run", "--help"]])
def test_help_loads_no_simulator(argv):
    loaded = _modules_after(argv)
    assert not {"numpy", "simpy", "scipy", "matplotlib", "psdsim.sim.run"} & loaded


def test_run_never_imports_the_theory_or_the_fitting():
    loaded = _modules_after(RUN)
    assert "psdsim.sim.run" in loaded   # it did simulate
    heavy = {"scipy.stats", "scipy.optimize", "matplotlib", "psdsim.theory", "psdsim.calibration",
             "psdsim.studies", "psdsim.engine"}
    assert not heavy & loaded, sorted(heavy & loaded)


@pytest.mark.parametrize("argv", [RUN, RUN[:1] + RUN[3:]], ids=["fixed-prompts", "dataset-prompts"])
def test_run_never_imports_scipy(argv):
    """Not even where prompt lengths are drawn from a dataset profile (sim/workload.py uses the
    standard library's normal distribution: scipy.special cost ~0.3-0.4 s of start-up)."""
    assert not {m for m in _modules_after(argv) if m.split(".")[0] == "scipy"}


def test_python_m_psdsim_is_the_command():
    proc = subprocess.run([sys.executable, "-m", "psdsim", "--help"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and "usage: psdsim" in proc.stdout and "engine" in proc.stdout


def test_the_public_api_resolves_lazily():
    for name in psdsim.__all__:
        assert getattr(psdsim, name) is not None
    assert set(psdsim.__all__) <= set(dir(psdsim))
    with pytest.raises(AttributeError):
        psdsim.no_such_name  # noqa: B018


@pytest.mark.parametrize("argv", [[c, "--help"] for c in COMMANDS if c != "engine"]
                         + [["engine", "run", "--help"], ["engine", "run", "--engine", "vllm", "--help"]])
def test_every_command_has_its_own_help(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: psdsim {' '.join(a for a in argv if a in COMMANDS or a == 'run')}")
    assert "--" in out   # its flags are listed
