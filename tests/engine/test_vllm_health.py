"""engine/vllm/health.py on fake /proc folders: the worker found by its title, its CPU share from
stat's utime + stime, and the restart of a starved instance. No vLLM needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.engine.vllm.health import STARVED_SHARE, ProcReader, run_with_its_core, worker_share

TICKS = 100.0


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int) -> str:
    # fields 1-2, then state (3), ppid (4), 9 more up to field 13, utime (14), stime (15), the rest
    return f"{pid} ({comm}) S {ppid} " + " ".join(["0"] * 9) + f" {utime} {stime} " + " ".join(["0"] * 37)


class FakeProc:
    """A /proc folder whose processes' CPU times the test moves forward."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[int, tuple[str, int, str]] = {}
        self.ticks: dict[int, int] = {}

    def add(self, pid: int, ppid: int, title: str, comm: str = "python3") -> None:
        self.procs[pid] = (comm, ppid, title)
        self.ticks[pid] = 0
        self.write(pid)

    def write(self, pid: int) -> None:
        comm, ppid, title = self.procs[pid]
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        half = self.ticks[pid] // 2
        (folder / "stat").write_text(_stat(pid, comm, ppid, self.ticks[pid] - half, half))
        (folder / "cmdline").write_bytes(title.replace(" ", "\0").encode() + b"\0")

    def spend(self, pid: int, seconds: float) -> None:
        self.ticks[pid] += round(seconds * TICKS)
        self.write(pid)

    def reader(self) -> ProcReader:
        return ProcReader(self.root, TICKS)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path)
    fake.add(100, 1, "python driver.py")
    fake.add(101, 100, "VLLM::EngineCore", comm="VLLM::EngineCor")
    fake.add(102, 101, "VLLM::Worker")
    fake.add(200, 1, "other agent's job")
    return fake


def test_cpu_seconds_adds_user_and_system_time_and_survives_a_command_name_with_spaces(tmp_path: Path):
    fake = FakeProc(tmp_path)
    fake.add(7, 1, "x", comm="a b) c")
    fake.spend(7, 1.23)
    assert fake.reader().cpu_seconds(7) == pytest.approx(1.23)
    assert fake.reader().parent(7) == 1


def test_descendants_are_the_whole_tree_below_and_nothing_else(proc: FakeProc):
    assert proc.reader().descendants(100) == [101, 102]
    assert proc.reader().descendants(102) == []


def _work(proc: FakeProc, clock: Clock, seconds: float, worker_share_of_core: float):
    """A generate of `seconds` wall time in which the engine core polls a whole core and the
    worker gets `worker_share_of_core` of its own."""
    def work() -> None:
        clock.now += seconds
        proc.spend(101, seconds)
        proc.spend(102, seconds * worker_share_of_core)
    return work


def test_the_worker_not_the_polling_engine_core_says_whether_the_instance_has_its_core(proc: FakeProc):
    clock = Clock()
    starved = worker_share(_work(proc, clock, 2.0, 0.4), proc.reader(), driver=100, clock=clock)
    assert starved.pid == 102 and starved.window_s == pytest.approx(2.0)
    assert starved.share == pytest.approx(0.4) and starved.starved   # the engine core used 1.0
    fine = worker_share(_work(proc, clock, 2.0, 0.95), proc.reader(), driver=100, clock=clock)
    assert fine.share == pytest.approx(0.95) and not fine.starved


def test_without_a_worker_process_the_driver_itself_is_watched(proc: FakeProc):
    clock = Clock()

    def work() -> None:
        clock.now += 1.0
        proc.spend(200, 0.9)
    health = worker_share(work, proc.reader(), driver=200, clock=clock)
    assert health.pid is None and health.share == pytest.approx(0.9)


@pytest.mark.parametrize("shares, kept, stops", [
    ([0.9], 0, 0),               # first instance fine: kept, none stopped
    ([0.3, 0.5, 0.97], 2, 2),    # two starved instances stopped, the third kept
    ([0.2, 0.2, 0.2], 2, 2),     # all starved: the last is kept anyway and said to be starved
])
def test_a_starved_instance_is_stopped_and_another_started(proc: FakeProc, shares, kept, stops):
    started, stopped = [], []
    clock, clock_shares = Clock(), iter(shares)

    def start() -> int:
        started.append(len(started))
        return started[-1]

    def probe(instance: int) -> None:
        _work(proc, clock, 1.0, next(clock_shares))()

    def check(work):
        return worker_share(work, proc.reader(), driver=100, clock=clock)
    checked = run_with_its_core(start, probe, stopped.append, check, attempts=3)
    assert checked.instance == kept and stopped == list(range(stops))
    assert len(checked.checks) == kept + 1
    assert checked.starved == (checked.checks[-1].share < STARVED_SHARE)
