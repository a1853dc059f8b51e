"""Running independent jobs: in this process, on a local process pool, or on Ray.

Every executor yields `(index, result)` pairs as jobs finish (completion order; callers wanting
input order place results by index). A job is a module-level function of one picklable argument.
Only a bounded window of jobs is in flight at a time, so a design of 10^5 runs does not queue
10^5 pickled scenarios. `psdsim paper` and `psdsim sweep` both run through here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from psdsim.sim.errors import ScenarioError

T = TypeVar("T")
R = TypeVar("R")
EXECUTORS = ("local", "ray")
RAY_INSTALL = "pip install 'psdsim[ray]'"
IN_FLIGHT_PER_WORKER = 4


class WorkerDied(RuntimeError):
    """A pool worker process died (killed, out of memory): the pool cannot go on."""


def run_serial(fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
    for i, item in enumerate(items):
        yield i, fn(item)


def _worker_init(parent: int) -> None:
    """In each pool worker: leave Ctrl-C to the parent, and exit once the parent is gone (even
    after `kill -9`, which gives the parent no chance to stop its pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="psdsim-parent-watch").start()


def run_local(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[tuple[int, R]]:
    """`workers` processes (serial in this process when 1); results as they finish."""
    if workers <= 1 or len(items) <= 1:
        yield from run_serial(fn, items)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(items)), initializer=_worker_init,
                               initargs=(os.getpid(),))
    todo = iter(enumerate(items))
    pending: dict[Future[R], int] = {}

    def fill() -> None:
        while len(pending) < workers * IN_FLIGHT_PER_WORKER:
            nxt = next(todo, None)
            if nxt is None:
                return
            pending[pool.submit(fn, nxt[1])] = nxt[0]

    finished = False
    try:
        fill()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=pending.__getitem__):
                i = pending.pop(fut)
                try:
                    result = fut.result()
                except BrokenProcessPool as exc:
                    raise WorkerDied(f"a worker process died ({exc})") from None
                yield i, result
            fill()
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose results are no longer wanted (Ctrl-C, an error, a caller that stopped
    reading) at once. Waiting for the jobs in flight made Ctrl-C take a whole run, and a second
    Ctrl-C during that wait left idle workers that the interpreter's exit then joined forever.
    ProcessPoolExecutor has no public way to stop its workers before Python 3.14."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def require_ray() -> None:
    if not ray_available():
        raise ScenarioError("--executor", "ray is not installed", RAY_INSTALL)


def run_ray(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None,
            address: str | None = None,
            on_crash: Callable[[BaseException], R] | None = None) -> Iterator[tuple[int, R]]:
    """One Ray task per item: on a local Ray instance (`workers` CPUs), or on the cluster at
    `address`. A task whose worker crashed yields `on_crash(exception)` when given."""
    require_ray()
    import ray

    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR",
                                   "configure_logging": False}
        if address:
            options["address"] = address
        elif workers:
            options["num_cpus"] = workers
        ray.init(**options)
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(fn)
        window = max(2, int(ray.cluster_resources().get("CPU", 1))) * IN_FLIGHT_PER_WORKER
        todo = iter(enumerate(items))
        pending: dict[Any, int] = {}
        while True:
            while len(pending) < window:
                nxt = next(todo, None)
                if nxt is None:
                    break
                pending[remote.remote(nxt[1])] = nxt[0]
            if not pending:
                return
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the task's worker died, or the object was lost
                    if on_crash is None:
                        raise
                    result = on_crash(exc)
                yield i, result
    finally:
        if started:
            ray.shutdown()
