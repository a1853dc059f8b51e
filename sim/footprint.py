"""How much memory and temporary disk a run will take, estimated before it starts, and how much
the machine has.

A run holds only its live requests (sim/requests.py: slots, a few dozen) and draws the others as
a stream; an ended request's row is kept in memory up to request_rows.SPILL_ROWS rows
(BYTES_PER_HELD_REQUEST each), then on temporary disk (DISK_BYTES_PER_REQUEST: its columns, then
their copy in request order). What grows with requests in memory is the end of the run:
BYTES_PER_REQUEST, the rows' sort (16 bytes a request) and the summary's latency columns
(tests/sim/test_request_slots.py measures ~20-30 bytes a request; summarize() alone peaks at 45).
Its step rows are packed in memory up to records.SPILL_ROWS, then moved to anonymous temporary
files (sim/records.py, sim/spill.py): in memory a step costs BYTES_PER_STEP up to that bound,
beyond it BYTES_PER_SPILLED_STEP (what summarize() gathers, a column at a time, from the table on
disk), and DISK_BYTES_PER_STEP of temporary disk. The constants are this code's own footprint,
rounded up: tests/sim/test_spill.py bounds summarize() at ~10 bytes a spilled step, a packed row is
277 bytes, benchmarks/million_requests.py measures whole runs (docs/measurements/million_requests.md).
The step count is bounded above (steps_bound): offline, by every running request gaining one token
per step in full batches of m (what AR does; speculative methods take fewer steps), so the
estimate errs high (3.6x the peak measured at 1 M requests of the default scenario, 2x its
temporary disk); with arrivals spread in time a request may run alone, so by a step a token
(tests/sim/test_footprint.py checks the bound against real runs of every method). A run that records its
timeline for `--trace` keeps every slice in memory and builds the trace document at the end:
BYTES_PER_TRACED_STEP more a step (measured on 300-request runs with tracemalloc: PSD, whose steps
have the most slices, 2.4 KB a step recorded and 8.8 KB more at the peak of writing the trace;
SD 1.3 KB, AR 0.7 KB recorded). The CLI refuses a
run whose estimate exceeds the memory or the temporary disk available, instead of letting the
kernel kill it after minutes (`--set requests=1000000000`).

The same step bound prices what a run leaves behind and how long it takes, so long work can say
so before it starts (docs/outputs.md, "Long runs"): a results folder holds a steps.csv row a step
(RESULT_BYTES_PER_STEP) and a requests.csv row a request (RESULT_BYTES_PER_REQUEST), and a
run takes about SECONDS_PER_BOUND_STEP of host time per bounded step. Both were measured on the
default scenario (1,000 requests, bound 17,000 steps): steps.csv rows of 216 bytes (AR), 233
(SD) and 298 (PSD), requests.csv rows of ~140 bytes; wall time 0.05 to 0.09 ms per bounded step
(AR to SD) on a shared 2-core machine. The time is a guess within a factor of a few (other
machines, other scenarios); the disk is an upper bound like the memory.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from psdsim.sim import records, request_rows
from psdsim.sim.errors import ScenarioError
from psdsim.sim.memory import plan_memory
from psdsim.sim.scenario import Scenario, catalog_for

BYTES_PER_REQUEST = 64
BYTES_PER_HELD_REQUEST = 256   # an ended request's row before they spill: 17 columns, ~140 bytes
DISK_BYTES_PER_REQUEST = 384   # its row on disk (16 x 8 + 1 bytes), then sorted (16 x 8 + 40)
BYTES_PER_STEP = 1024
BYTES_PER_SPILLED_STEP = 16
DISK_BYTES_PER_STEP = 288   # the step table's columns: 35 of 8 bytes or fewer, the kind (28)
BYTES_PER_TRACED_STEP = 16 * 1024   # timeline slices and the trace document (2.4 + 8.8 KB, rounded up)
# The adaptive mode's own step columns, never spilled: a byte each while it runs, then `mode` as
# 3-character strings (12 bytes), `switch` (1) and, with adaptive_m, `m` (2)
BYTES_PER_MODE_STEP = 16
# A decoupled service's steps: its five columns as 8-byte arrays while the replicas run, and the
# replicas' tables merged in memory (the step table's 288 bytes and the five columns again)
BYTES_PER_SERVICE_STEP = 5 * 8 + DISK_BYTES_PER_STEP + 5 * 8
# What a run allocates whatever its size (the workload's draws, the scheduler, the first packed
# chunk): small runs measured ~10 MB above the per-request and per-step terms.
BYTES_PER_RUN = 32 * 2**20
RESULT_BYTES_PER_STEP = 320
# --intervals' files: intervals.json, sensitivity.csv and sensitivity.png (~75 kB), rounded up
INTERVAL_FILES_BYTES = 256 * 1024
RESULT_BYTES_PER_REQUEST = 160
SECONDS_PER_BOUND_STEP = 1e-4
SIZE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def size_text(nbytes: float) -> str:
    """A size in the largest unit it fills at least once (812 kB, 1.7 MB, 15.3 GB): a refusal on
    a small disk must not read "needs 0.0 GB, has 0.0 GB"."""
    for unit, size in SIZE_UNITS:
        if abs(nbytes) >= size:
            return f"{nbytes / size:,.1f} {unit}"
    return f"{nbytes:,.0f} bytes"


def _full_batch(s: Scenario) -> int:
    """Requests that run together while others wait: m, or fewer where the KV cache cannot hold
    m requests at max_model_len (1 where the model does not fit: such a run takes no step)."""
    plan = plan_memory(s, catalog_for(s))
    if not plan.fits:
        return 1
    blocks_per_request = -(-(s.max_model_len + s.k + s.extra) // s.block_size)
    return max(1, min(s.m, plan.kv_blocks // blocks_per_request))


def _arrive_at_once(s: Scenario) -> bool:
    """Whether every request is there at the start (offline), so that the batch stays full until
    the queue is empty; Poisson arrivals (a rate) may leave one request alone. A trace's rows are
    read only when it runs, so its run is priced by the scenario's own requests and output_len,
    as an offline one."""
    return s.rate is None


def steps_bound(s: Scenario, requests: int | None = None) -> int:
    """An upper bound on the engine steps of s (with `requests` prompts, default s's). A decode
    step gives each request it verifies at least one token; a prompt takes at most
    ceil(max_model_len / max_num_batched_tokens) prefill steps. Arrivals spread in time may run
    each request alone (rate=0.01: one request a hundred seconds), so the bound is a step per
    output token; but no more steps than the arrivals' span allows (_arrival_steps) before the
    last one, after which the run drains as an offline one does. Offline, while requests wait a
    full batch runs, so the steps are the tokens over the batch, plus one output's worth for the
    last batch draining."""
    n = s.requests if requests is None else requests
    sequences = n * s.n
    prefills = sequences * -(-s.max_model_len // max(s.max_num_batched_tokens, 1))
    tokens = sequences * s.output_len
    full = tokens // _full_batch(s) + s.output_len
    if not _arrive_at_once(s):
        return min(tokens, full + _arrival_steps(s, n)) + prefills
    return min(tokens, full) + prefills


def _arrival_steps(s: Scenario, requests: int) -> int:
    """An upper bound on the steps taken while Poisson arrivals are still coming: their span over
    the shortest step the engine can take (one target pass of one token, which every decode step
    runs). The span is taken at four standard deviations above its mean (the sum of `requests`
    exponential gaps), so a run that arrives slowly by chance stays under it. A profile may
    price a pass below the analytic one: then no step count is bounded by time."""
    if s.profile or s.rate is None:
        return 1 << 62
    from psdsim.sim.execution import step_cost

    fastest = step_cost(s, catalog_for(s)).verify(1, 1, 0)
    if not fastest > 0:
        return 1 << 62
    span = (requests + 4 * requests ** 0.5 + 4) / s.rate
    return int(span / fastest) + 1


def _held_steps(steps: int) -> int:
    """Steps whose packed rows are in memory at once: up to SPILL_ROWS (and the chunk being
    filled); past it they are on disk."""
    return min(steps, records.SPILL_ROWS + records.CHUNK_ROWS)


def estimate_bytes(s: Scenario, requests: int | None = None, traced: bool = False) -> int:
    """The memory one run of s (with `requests` prompts, default s's) keeps at its peak;
    `traced`: it records its timeline and writes it as a trace (`psdsim run --trace`)."""
    n = s.requests if requests is None else requests
    steps = steps_bound(s, n)
    held = _held_steps(steps)
    sequences = n * s.n
    return (BYTES_PER_RUN + sequences * BYTES_PER_REQUEST
            + min(sequences, request_rows.SPILL_ROWS) * BYTES_PER_HELD_REQUEST
            + held * BYTES_PER_STEP + (steps - held) * BYTES_PER_SPILLED_STEP
            + (steps * BYTES_PER_MODE_STEP if s.method == "adaptive" else 0)
            + (steps * BYTES_PER_SERVICE_STEP if s.method == "decoupled" else 0)
            + (steps * BYTES_PER_TRACED_STEP if traced else 0))


def spill_bytes(s: Scenario, requests: int | None = None) -> int:
    """The temporary disk one run of s keeps at its end: the step rows past records.SPILL_ROWS
    and the ended requests' rows past request_rows.SPILL_ROWS (all of them, once they spill)."""
    steps = steps_bound(s, requests)
    sequences = (s.requests if requests is None else requests) * s.n
    return ((steps * DISK_BYTES_PER_STEP if steps > records.SPILL_ROWS else 0)
            + (sequences * DISK_BYTES_PER_REQUEST if sequences > request_rows.SPILL_ROWS else 0))


def _process_limits() -> list[int]:
    """What this process's own limits leave it: RLIMIT_AS (`ulimit -v`) less the address space
    it maps already (VmSize), RLIMIT_DATA less its data (VmData); none where unlimited."""
    try:
        import resource
    except ImportError:   # Windows: no such limits
        return []
    used: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmSize", "VmData"):
                    used[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    left = []
    for limit, key in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            left.append(soft - used.get(key, 0))
    return left


def available_bytes() -> int | None:
    """Memory this process can still take: the kernel's MemAvailable, capped by a cgroup's limit
    (containers) and by the process's own limits (`ulimit -v`); None where none can be read
    (then nothing is refused)."""
    limits = _process_limits()
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    cgroup = Path("/sys/fs/cgroup")
    try:
        cap = (cgroup / "memory.max").read_text().strip()
        if cap != "max":
            limits.append(int(cap) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def available_disk_bytes() -> int | None:
    """Free space where spilled tables go (tempfile.gettempdir(): TMPDIR); None if unknown."""
    try:
        return shutil.disk_usage(tempfile.gettempdir()).free
    except OSError:
        return None


def results_bytes(s: Scenario) -> int:
    """An upper bound on the bytes of s's results folder: its steps.csv and requests.csv."""
    return steps_bound(s) * RESULT_BYTES_PER_STEP + s.requests * s.n * RESULT_BYTES_PER_REQUEST


def seconds_estimate(s: Scenario) -> float:
    """About how long one run of s takes on this host (within a factor of a few); none for a
    scenario whose model does not fit the GPUs' memory, which ends before its first step."""
    if not plan_memory(s, catalog_for(s)).fits:
        return 0.0
    return steps_bound(s) * SECONDS_PER_BOUND_STEP


def _existing(path: Path) -> Path:
    """The path, or its first parent that exists: where a path not yet written would land."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def free_disk_bytes(path: Path) -> int | None:
    """Free space on the file system a path not yet written would land on; None if unknown."""
    try:
        return shutil.disk_usage(_existing(path)).free
    except OSError:
        return None


def _shares_temporary_disk(path: Path) -> bool:
    """Whether a path lands on the file system of the temporary folder (TMPDIR)."""
    try:
        return _existing(path).stat().st_dev == Path(tempfile.gettempdir()).stat().st_dev
    except OSError:
        return False


def check_results_disk(need: int, out: Path, field: str, fix: str, spilled: int = 0) -> None:
    """ScenarioError naming `field` when results of about `need` bytes cannot fit in the free
    space where `out` lands: refused before the run, not when the disk fills after hours.
    `spilled`: the temporary disk the runs still hold while their results are written, counted
    too where the temporary folder is on the same file system."""
    free = free_disk_bytes(out)
    held = spilled if spilled and _shares_temporary_disk(out) else 0
    if free is None or need + held <= free:
        return
    also = f" (and their temporary tables {size_text(held)} more, on the same disk)" if held else ""
    raise ScenarioError(field, f"the results would take up to {size_text(need)} in {str(out)!r}{also}, "
                        f"but its file system has {size_text(free)} free", fix)


def _most_requests(runs: list[Scenario], have: int | None, free: int | None, traced: bool) -> int:
    """The largest request count (at most the runs' own, at least 1) for which the runs'
    estimates together fit in the memory `have` and the temporary disk `free` (None: unknown)."""
    def fits(n: int) -> bool:
        cut = [(s, min(n, s.requests)) for s in runs]
        return ((have is None or sum(estimate_bytes(s, r, traced) for s, r in cut) <= have)
                and (free is None or sum(spill_bytes(s, r) for s, r in cut) <= free))

    lo, hi = 1, max(s.requests for s in runs)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def check_at_once(runs: list[Scenario], workers: int) -> None:
    """check_memory for up to `workers` of `runs` going at once, each as large as the largest."""
    check_memory([max(runs, key=estimate_bytes)] * min(workers, len(runs)), f"{workers} runs at once")


def check_memory(scenarios: Iterable[Scenario], held: str = "", traced: bool = False) -> None:
    """ScenarioError naming `requests` when the runs held together (`held` says why several are)
    cannot fit in the memory available (`traced`: each records its timeline for a trace), or their
    spilled tables in the temporary disk; the fix names the largest request count that fits
    both."""
    runs = list(scenarios)
    s = runs[0]
    notes = [held] if held else []
    if traced:
        notes.append("with the timeline for --trace")
    why = f" ({', '.join(notes)})" if notes else ""
    have, free = available_bytes(), available_disk_bytes()
    need, disk = sum(estimate_bytes(r, traced=traced) for r in runs), sum(spill_bytes(r) for r in runs)
    short_of_memory, short_of_disk = have is not None and need > have, free is not None and disk > free
    if not (short_of_memory or short_of_disk):
        return
    most = _most_requests(runs, have, free, traced)
    if short_of_memory:
        raise ScenarioError("requests", f"{s.requests:,} requests × {s.output_len} tokens need about "
                            f"{size_text(need)} of memory{why}, but {size_text(have)} are available",
                            f"lower requests to about {most:,}, or run with more memory (a larger machine, "
                            "a higher `ulimit -v`)")
    raise ScenarioError("requests", f"{s.requests:,} requests × {s.output_len} tokens need about "
                        f"{size_text(disk)} of temporary disk for their step and request tables{why}, but "
                        f"{tempfile.gettempdir()} has {size_text(free)} free",
                        f"lower requests to about {most:,}, or set TMPDIR to a folder on a larger disk")
