"""How much memory a run will take, estimated before it starts, and how much the machine has.

A run keeps per-request columns and one packed row per engine step until it ends (sim/requests.py,
sim/records.py), so its memory grows with both. BYTES_PER_REQUEST and BYTES_PER_STEP are this
code's own footprint, measured by benchmarks/memory_footprint.py (peak RSS over runs of
1,000-4,000 requests, AR and PSD, least squares: ~1.8 KB a request and ~0.64 KB a step), rounded
up. The step count is bounded above by every running request gaining one token per step in
batches of m (what AR does; speculative methods take fewer steps), so the estimate errs high,
by up to ~3-5x for PSD. The CLI refuses a run whose estimate exceeds the memory available,
instead of letting the kernel kill it after minutes (issue #14: `--set requests=1000000000`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from psdsim.sim.errors import ScenarioError
from psdsim.sim.scenario import Scenario

BYTES_PER_REQUEST = 2048
BYTES_PER_STEP = 1024
# What a run allocates whatever its size (the workload's draws, the scheduler, the first packed
# chunk): small runs measured ~10 MB above the per-request and per-step terms.
BYTES_PER_RUN = 32 * 2**20
GB = 1e9


def steps_bound(s: Scenario) -> int:
    """An upper bound on the engine steps: each verification batch of m requests gains one token
    per request per step, plus one prefill step per request."""
    sequences = s.requests * s.n
    return sequences * s.output_len // max(s.m, 1) + sequences


def estimate_bytes(s: Scenario) -> int:
    """The memory one run of s keeps at its peak (records of every request and step)."""
    return BYTES_PER_RUN + s.requests * s.n * BYTES_PER_REQUEST + steps_bound(s) * BYTES_PER_STEP


def available_bytes() -> int | None:
    """Memory this process can still take: the kernel's MemAvailable, capped by a cgroup's limit
    (containers); None where neither can be read (then nothing is refused)."""
    limits = []
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


def check_memory(scenarios: Iterable[Scenario], held: str = "") -> None:
    """ScenarioError naming `requests` when the runs held in memory together (`held` says why
    several are) cannot fit in the memory available."""
    runs = list(scenarios)
    need = sum(estimate_bytes(s) for s in runs)
    have = available_bytes()
    if have is None or need <= have:
        return
    s = runs[0]
    fixed = BYTES_PER_RUN * len(runs)   # the rest grows in proportion to requests
    fits = max(int(s.requests * max(have - fixed, 0) / (need - fixed)), 1)
    why = f" ({held})" if held else ""
    raise ScenarioError("requests", f"{s.requests:,} requests × {s.output_len} tokens need about "
                        f"{need / GB:,.1f} GB of memory{why}, but {have / GB:,.1f} GB are available",
                        f"lower requests to about {fits:,}, or run on a machine with more memory")
