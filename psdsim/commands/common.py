"""What several commands share: scenario flags, default output folders, guarded writes, progress.

Only the standard library is imported at module level: the dispatcher imports this for every
command, `psdsim --help` included.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# How long work goes before its progress appears: shorter work prints no progress on stderr.
PROGRESS_AFTER_S = 2.0
LOG_EVERY = 0.1          # off a terminal: a progress line each tenth of the work...
LOG_AT_LEAST_S = 60.0    # ... or each minute, whichever comes first
# Work estimated to take longer than this, or to write more, says so before it starts.
LONG_WORK_S = 10.0
LONG_WORK_BYTES = 100e6
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
    """The exit code of an interrupted command: 130 for Ctrl-C; a SIGTERM, SIGHUP or SIGQUIT that a
    write turned into an exception (sim.output.locks.Terminated) carries its own, 128 + signal."""
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
    in results/plan-HASH, not results/plan-plan-HASH. A spec's name may take the file system's
    255 bytes: the folder's is then cut short (fitting_name), the tail's hash kept."""
    from psdsim.sim.output.locks import fitting_name

    stem = [] if spec.stem == command else [spec.stem]
    return Path("results") / fitting_name("-".join([command, *stem]), tail)


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


@dataclass(frozen=True)
class Work:
    """What a command is about to simulate, estimated before it starts (sim/footprint.py)."""

    what: str               # e.g. "10,000,000 requests" or "144 runs"
    seconds: float          # host time, within a factor of a few
    disk_bytes: int = 0     # an upper bound on what it writes
    where: str = ""         # where that lands

    def is_long(self) -> bool:
        """Worth saying before it starts (the thresholds are read when asked, so tests lower them)."""
        return self.seconds > LONG_WORK_S or self.disk_bytes > LONG_WORK_BYTES


def duration(seconds: float) -> str:
    """A duration a person reads at a glance: 45 s, 12 min, 3.4 h, 21 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}" if unit != "min" else f"{seconds / size:.0f} min"
    return f"{seconds:.0f} s"


def announce(work: Work, stream: Any = None) -> None:
    """Say on stderr (stdout may hold --json) what long work will take before it starts, so a
    mistyped size is seen in a second, not after hours; short work says nothing."""
    if not work.is_long():
        return
    from psdsim.sim.footprint import size_text

    disk = (f" and up to {size_text(work.disk_bytes)} of results in {work.where}"
            if work.disk_bytes > LONG_WORK_BYTES else "")
    (stream or sys.stderr).write(f"psdsim: {work.what}: about {duration(work.seconds)} of simulation "
                                 f"(a rough estimate, within a factor of a few){disk}; Ctrl-C stops it\n")


def drawn_seconds(seconds_each: float, draws: int, workers: int | None = None) -> float:
    """The host time of `draws` more runs of `seconds_each`, which go `workers` at once (default:
    one a core, as --intervals' draws do in run, compare and plan)."""
    return seconds_each * draws / workers_used(workers or os.cpu_count() or 1, max(draws, 1))


def before_scenario_runs(s: Any, runs: int, out: Path | None, draws: int | None = None) -> None:
    """For `runs` runs of scenario s (run: one; compare: one a method, all held until written),
    then `draws` draws of them all (--intervals), whose results folder, unless None, is out:
    refuse results that cannot fit in the free space where they land (with the temporary tables
    the runs hold meanwhile, on the same disk), then announce the work if it is long."""
    from psdsim.sim.footprint import (
        INTERVAL_FILES_BYTES,
        check_results_disk,
        results_bytes,
        seconds_estimate,
        spill_bytes,
    )

    what = (f"{s.requests:,} requests" + (f" × {runs} methods" if runs > 1 else "")
            + (f", then {draws:,} draws of them" if draws else ""))
    each = runs * seconds_estimate(s)
    disk = runs * results_bytes(s) + (INTERVAL_FILES_BYTES if draws else 0)
    work = Work(what, each + drawn_seconds(each, draws or 0), disk if out else 0, str(out))
    if out is not None:
        check_results_disk(work.disk_bytes, out, "requests",
                           "lower requests, write elsewhere with --out DIR, or add --no-write",
                           runs * spill_bytes(s))
    announce(work)


def workers_used(workers: int, runs: int) -> int:
    """How many runs go at once: no more than the runs, the workers or the cores."""
    return max(1, min(workers, runs, os.cpu_count() or 1))


class Progress:
    """Progress on stderr, shown only once the work has run `after_s` seconds and never with
    --json (stdout then holds the JSON alone): on a terminal a bar redrawn in place; in a pipe
    or a log file a plain line every LOG_EVERY of the work or LOG_AT_LEAST_S seconds, so a log
    does not fill with carriage returns. `total` and `unit` turn a fraction into counts ("300/1,000
    requests"); the time left is extrapolated from the progress made since the first report."""

    def __init__(self, enabled: bool, stream: Any = None, total: int = 0, unit: str = "",
                 after_s: float | None = None, work: Work | None = None) -> None:
        self.stream = stream or sys.stderr
        self.work = work   # announced at the first report, once the work's refusals are all past
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.total, self.unit = total, unit
        self.after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self.began = time.perf_counter()
        self.shown = False
        self.label = ""
        self.origin = (self.began, 0.0)    # (time, fraction) the time left is measured from
        self.logged = (self.began, 0.0)    # the last plain line's (time, fraction)

    def __call__(self, label: str, fraction: float, note: str = "") -> None:
        if self.work is not None:
            announce(self.work, self.stream)
            self.work = None
        if not self.enabled:
            return
        now = time.perf_counter()
        done = min(max(fraction, 0.0), 1.0)
        if label != self.label:   # a new piece of work (compare's next method) starts at its own pace
            self.label, self.origin = label, (now, done)
        elapsed = now - self.began
        if not self.shown and (elapsed < self.after_s or done >= 1.0):
            return
        if not self.tty and self.shown and done < 1.0 and not self._log_due(now, done):
            return
        self.shown = True
        self.logged = (now, done)
        left = self._left(now, done)
        self.stream.write(self._bar(label, done, elapsed, left, note) if self.tty
                          else self._line(label, done, elapsed, left, note))
        self.stream.flush()

    def _log_due(self, now: float, done: float) -> bool:
        at, last = self.logged
        return done - last >= LOG_EVERY or now - at >= LOG_AT_LEAST_S

    def _left(self, now: float, done: float) -> float | None:
        """Seconds left at the pace since the first report of this label (None: no pace yet)."""
        at, first = self.origin
        if not first < done < 1.0:
            return None
        return (now - at) * (1.0 - done) / (done - first)

    def _counts(self, done: float, note: str) -> str:
        counts = f" {round(done * self.total):,}/{self.total:,} {self.unit}" if self.total else ""
        return counts + (f", {note}" if note else "")

    def _bar(self, label: str, done: float, elapsed: float, left: float | None, note: str) -> str:
        filled = int(done * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        eta = f", {left:4.0f} s left" if left is not None else ""
        end = "\n" if done >= 1.0 else ""
        return f"\r  {label} [{bar}] {done:6.1%}{self._counts(done, note)} {elapsed:5.0f} s{eta}" + end

    def _line(self, label: str, done: float, elapsed: float, left: float | None, note: str) -> str:
        eta = f", about {duration(left)} left" if left is not None else ""
        return f"  {label}: {done:.0%}{self._counts(done, note)}, {duration(elapsed)} elapsed{eta}\n"
