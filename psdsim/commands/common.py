"""What several commands share: scenario flags, default output folders, guarded writes, progress.

Only the standard library is imported at module level: the dispatcher imports this for every
command, `psdsim --help` included.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# How long a run goes before the progress bar appears: shorter runs print nothing on stderr.
PROGRESS_AFTER_S = 2.0
BAR_WIDTH = 30
SET_HELP = ("scenario field, e.g. --set k=4 --set link=nvlink4 (`psdsim scenario` lists them with "
            "their values; repeatable). The same everywhere: validate and engine run also take "
            "engine.FIELD and model.FIELD for the real engine's own settings")

T = TypeVar("T")


def user_error(field: str, problem: str, fix: str) -> Exception:
    """The one error type a user sees (psdsim.sim.errors.ScenarioError), imported on demand."""
    from psdsim.sim.errors import ScenarioError

    return ScenarioError(field, problem, fix)


def interrupted_exit(exc: KeyboardInterrupt) -> int:
    """The exit code of an interrupted command: 130 for Ctrl-C; a SIGTERM that a write turned into
    an exception (sim.output.results.Terminated) carries its own, 143."""
    return int(getattr(exc, "exit_code", EXIT_INTERRUPTED))


def add_set(p: argparse.ArgumentParser, help_text: str = SET_HELP) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help=help_text)


def add_preset(p: argparse.ArgumentParser, default: str | None = None,
               help_text: str = "start from one of the paper's configurations (file and --set apply on top)"
               ) -> None:
    from psdsim.sim.presets import PRESETS

    p.add_argument("--preset", choices=list(PRESETS), default=default, help=help_text)


def add_scenario_args(p: argparse.ArgumentParser) -> None:
    """The scenario, its overrides and the output flags of run and compare."""
    p.add_argument("scenario", nargs="?", help="scenario TOML file (default: the built-in scenario)")
    add_preset(p)
    add_set(p)
    p.add_argument("--profile", metavar="PROFILE.json",
                   help="price steps with a fitted profile from `psdsim calibrate` (= --set profile=…)")
    p.add_argument("--out", type=Path, help="results folder (default: results/NAME-METHOD-HASH)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout only")


def overrides(args: argparse.Namespace) -> list[str]:
    """--set values, with --profile as one more."""
    return [*args.overrides, *([f"profile={args.profile}"] if args.profile else [])]


def default_out(s: Any, label: str) -> Path:
    """results/NAME-LABEL-HASH for a scenario: the same scenario lands in the same folder."""
    return Path("results") / f"{s.name}-{label}-{s.digest()}"


def study_out(command: str, spec: Path, *tail: str) -> Path:
    """results/COMMAND-STEM-TAIL for a study's spec file, naming the command once: plan.toml lands
    in results/plan-HASH, not results/plan-plan-HASH."""
    stem = [] if spec.stem == command else [spec.stem]
    return Path("results") / "-".join([command, *stem, *tail])


def guarded_write(out: Path, write: Callable[[], T], option: str = "--out",
                  fix: str = "choose a writable folder with --out DIR") -> T:
    """write(), with an OSError (a read-only folder, a full disk) turned into one line naming option."""
    try:
        return write()
    except OSError as exc:
        raise user_error(option, f"cannot write {str(out)!r} ({exc.strerror or exc})", fix) from None


def check_workers(workers: int) -> None:
    if workers < 1:
        raise user_error("--workers", f"must be >= 1, got {workers}", "write --workers 2")


class Progress:
    """A progress bar on stderr, shown only once the work has run PROGRESS_AFTER_S seconds, only
    when stderr is a terminal and never with --json (stdout then holds the JSON alone, and a pipe
    or a log file should not fill with carriage returns)."""

    def __init__(self, enabled: bool, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.began = time.perf_counter()
        self.shown = False

    def __call__(self, label: str, fraction: float) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.began
        if not self.shown and (elapsed < PROGRESS_AFTER_S or fraction >= 1.0):
            return
        self.shown = True
        done = min(max(fraction, 0.0), 1.0)
        filled = int(done * BAR_WIDTH)
        eta = f", {elapsed / done - elapsed:4.0f} s left" if 0 < done < 1 else ""
        end = "\n" if done >= 1.0 else ""
        self.stream.write(f"\r  {label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done:6.1%}"
                          f" {elapsed:5.0f} s{eta}" + end)
        self.stream.flush()
