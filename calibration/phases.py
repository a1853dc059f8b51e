"""From ranges with their GPU work to step samples: shared by the Nsight and Kineto readers.

A reader finds the ranges a rule names (calibration.ranges), and for each the GPU operations its
CUDA calls launched (matched by correlation id, so an op belongs to its range even when it runs
after the CPU range closed: async launches, CPU run-ahead). Here the ranges become samples:

- a phase's duration is GPU busy time, the union of its ops' intervals (ops on several streams
  overlap), never the CPU range length; overhead ranges, which do CPU work, use their CPU length;
- phases inherit the attributes of the step range open on their thread (vLLM's batch facts);
- ranks of one TP group each time their own copy of a pass: when every process has the same
  number of samples of a kind, the i-th of each merge into one (the slowest rank sets the time).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from psdsim.calibration.ranges import STEP, step_attributes
from psdsim.calibration.samples import StepSample

# Kernels that move data between GPUs (docs/reference/nsight_vllm.md §4.3).
COMM_KERNEL = re.compile(r"nccl|cross_device_reduce|all_?reduce|allgather|sendrecv", re.IGNORECASE)


class GpuWork:
    """Accumulates a range's GPU ops, fed in order of start time: busy = union of intervals.

    Ops arrive in the trace's own time unit (nsys: integer ns since session start); `origin` and
    `scale` turn them into seconds on the way out, so the per-op work is plain comparisons."""

    __slots__ = ("_busy", "_comm", "_cur_end", "_cur_start", "_first", "_last", "copy_bytes", "devices",
                 "ops", "origin", "scale")

    def __init__(self, origin: float = 0.0, scale: float = 1.0) -> None:
        self.origin, self.scale = origin, scale
        self._busy = self._comm = 0
        self._first = self._last = self._cur_start = self._cur_end = 0
        self.ops = 0
        self.copy_bytes = 0
        self.devices: set[int] = set()

    def add(self, start: float, end: float, device: int, nbytes: int = 0, comm: bool = False) -> None:
        if end < start:
            end = start
        if not self.ops:
            self._first = self._cur_start = start
            self._last = self._cur_end = end
        elif start > self._cur_end:
            self._busy += self._cur_end - self._cur_start
            self._cur_start, self._cur_end = start, end
        elif end > self._cur_end:
            self._cur_end = end
        if end > self._last:
            self._last = end
        self.ops += 1
        self.devices.add(device)
        if nbytes:
            self.copy_bytes += nbytes
        if comm:
            self._comm += end - start

    @property
    def busy_s(self) -> float:
        """Union of the ops' intervals (includes the interval still open)."""
        return (self._busy + self._cur_end - self._cur_start) * self.scale

    @property
    def comm_s(self) -> float:
        return self._comm * self.scale

    @property
    def start_s(self) -> float:
        return (self._first - self.origin) * self.scale

    @property
    def end_s(self) -> float:
        return (self._last - self.origin) * self.scale


@dataclass
class TimedRange:
    """A range a rule matched: where it ran, its CPU interval (s), and its GPU work."""

    name: str
    kind: str
    attrs: dict[str, float]
    thread: int
    process: int
    cpu_start: float
    cpu_end: float
    gpu: GpuWork


@dataclass
class TraceInfo:
    """What the trace says about itself, for the profile's provenance and the report."""

    format: str
    version: str = ""
    gpus: dict[int, str] = field(default_factory=dict)
    kernel_s: float = 0.0            # all kernel time in the trace
    attributed_s: float = 0.0        # time of kernels launched inside a matched range (each once)
    notes: list[str] = field(default_factory=list)


@dataclass
class Built:
    samples: list[StepSample]
    dropped: Counter[str]
    notes: list[str]


def _sample(r: TimedRange, attrs: dict[str, float], source: str) -> StepSample | str:
    """The sample of one phase range, or why it was dropped."""
    kind, g = r.kind, r.gpu
    if kind == "overhead":
        start, end = r.cpu_start, r.cpu_end
        busy = span = end - start
    elif g.ops == 0:
        return f"{kind}: range launched no GPU work"
    else:
        start, end, busy = g.start_s, g.end_s, g.busy_s
        span = end - start
    attrs = dict(attrs)
    mixed = False
    prefill_tokens = attrs.pop("prefill_tokens", 0.0)
    attrs.pop("prefill_reqs", None)
    if kind == "verify" and prefill_tokens:
        if attrs.get("batch"):
            mixed = True
        else:
            kind = "prefill"
            attrs["tokens"] = prefill_tokens
            attrs.pop("batch", None)
    if kind in ("comm", "broadcast") and "nbytes" not in attrs and g.copy_bytes:
        attrs["nbytes"] = float(g.copy_bytes)
    if kind == "reject" and "positions" not in attrs and "tokens" in attrs:
        attrs["positions"] = attrs["tokens"]
    device = min(g.devices) if g.devices else -1
    sample = StepSample(kind, start, end, busy, span, device, r.process, mixed=mixed,
                        source=f"{source}:{r.name}")
    return sample.with_attrs(attrs)


def build_samples(ranges: list[TimedRange], source: str) -> Built:
    """Samples from matched ranges (any order), with the reasons ranges were dropped."""
    dropped: Counter[str] = Counter()
    per_process: dict[str, dict[int, list[StepSample]]] = defaultdict(lambda: defaultdict(list))
    by_thread: dict[int, list[TimedRange]] = defaultdict(list)
    for r in ranges:
        by_thread[r.thread].append(r)
    for thread_ranges in by_thread.values():
        thread_ranges.sort(key=lambda r: r.cpu_start)
        step: dict[str, float] = {}
        for r in thread_ranges:
            if r.kind == STEP:
                step = step_attributes(r.attrs)
                continue
            made = _sample(r, {**step, **r.attrs}, source)
            if isinstance(made, str):
                dropped[made] += 1
            else:
                per_process[made.kind][made.process].append(made)
    samples: list[StepSample] = []
    notes: list[str] = []
    for kind, procs in per_process.items():
        counts = {len(v) for v in procs.values()}
        if len(procs) > 1 and len(counts) == 1:
            notes.append(f"{kind}: {len(procs)} processes time each pass; merged rank by rank "
                         "(the slowest rank sets the time)")
            samples.extend(_merge(group) for group in zip(*procs.values(), strict=True))
        else:
            if len(procs) > 1:
                notes.append(f"{kind}: processes disagree on the number of passes "
                             f"({sorted(counts)}); kept every rank's samples unmerged")
            for group in procs.values():
                samples.extend(group)
    samples.sort(key=lambda s: (s.start_s, s.kind))
    return Built(samples, dropped, notes)


def _merge(group: tuple[StepSample, ...]) -> StepSample:
    slowest = max(group, key=lambda s: s.duration_s)
    return replace(slowest, start_s=min(s.start_s for s in group), end_s=max(s.end_s for s in group),
                   span_s=max(s.span_s for s in group), device=min(s.device for s in group))
