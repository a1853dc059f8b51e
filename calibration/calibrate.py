"""Traces in, profile out: detect each file's format, read it, fit every term, record provenance.

Formats are told apart by content, not name: a SQLite header is an Nsight Systems export, a gzip
or JSON document with traceEvents is a Kineto trace, JSON lines are MineDraft's step trace. When
MineDraft JSONL comes together with an nsys or Kineto trace it supplies the batch facts the
MineDraft NVTX ranges lack (joined step by step); alone, its own timers are the samples.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.fit import (
    BOOTSTRAP_SEED,
    MIN_BOOTSTRAP_SAMPLES,
    MIN_SAMPLES,
    RANGE_ATTRIBUTE,
    TermFit,
    acceptance_stats,
    bootstrap_term,
    check_k,
    fit_term,
)
from psdsim.calibration.kineto import GZIP_MAGIC, read_kineto
from psdsim.calibration.minedraft import read_minedraft
from psdsim.calibration.minedraft_join import join_step_attributes
from psdsim.calibration.minedraft_records import read_minedraft_steps
from psdsim.calibration.nsys import SQLITE_MAGIC, read_nsys
from psdsim.calibration.phases import Built, TraceInfo
from psdsim.calibration.ranges import AUTO_ORDER, parse_rules
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_path
from psdsim.sim.profile_reader import profile_from_json
from psdsim.sim.profile_schema import TERMS, Bootstrap, Profile

SNIFF_BYTES = 1 << 20
MINEDRAFT_KEYS = (b'"traces"', b'"start_us"', b'"is_prompt_run"')
TIMINGS = ("busy", "span")


TRACE_FILE = ("a trace file", "give the path of a trace file")   # what a trace path must name; the fix


def check_trace_path(path: Path) -> None:
    """Refuse, in one line naming it, a trace path the system cannot follow (a loop of links, a
    folder on the way psdsim may not search): checked before the outputs are compared with the
    traces; what the path names is detect_format's to check."""
    input_path(path, str(path), TRACE_FILE[1])


def detect_format(path: Path) -> str:
    """'nsys', 'kineto' or 'minedraft', from the file's first bytes (a MineDraft bundle or a
    compact Kineto trace is one long line, so keys are looked for, not whole lines parsed). A
    folder, a pipe or a device is refused before it is opened: reading a pipe would wait forever."""
    input_file(path, str(path), *TRACE_FILE)   # a pipe would be read forever
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})", "make the file readable") from None
    if not head.strip():
        raise TraceError(path, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        return "kineto"
    text = head.lstrip()
    if text.startswith(b"[") or (text.startswith(b"{") and b'"traceEvents"' in head):
        return "kineto"
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        if any(key in first for key in MINEDRAFT_KEYS):
            return "minedraft"
        try:
            json.loads(first)
        except (ValueError, RecursionError):
            return "kineto"  # a multi-line JSON document (whose traceEvents come later)
        return "minedraft"
    raise TraceError(path, "not a trace psdsim reads (nsys SQLite export, Kineto JSON, MineDraft JSONL)")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Calibration:
    """A fitted profile with everything its report shows."""

    profile: Profile
    fits: dict[str, TermFit]
    samples: list[StepSample]
    dropped: Counter[str]
    notes: list[str]
    traces: list[tuple[Path, TraceInfo]] = field(default_factory=list)


def calibrate(paths: Sequence[Path] | Sequence[Sequence[Path]], *, preset: str | None = None,
              ranges: list[str] | None = None, timing: str = "busy",
              source: dict[str, Any] | None = None) -> Calibration:
    """Read every trace, fit every term that has samples, and build the profile. `paths` is
    either trace files read together (an nsys or Kineto export is joined with the MineDraft JSONL
    beside it), or one list of files per run (psdsim validate --traces): each run's files are
    read and joined on their own, and their samples pooled (a join is by order within one run).
    `preset` names the range-name preset; None: the first of AUTO_ORDER whose rules match the
    first nsys or Kineto trace, said in the notes."""
    if not paths:
        raise TraceError("traces", "no trace given", "pass one or more trace files")
    if timing not in TIMINGS:
        raise TraceError("--timing", f"unknown timing {timing!r}",
                         "use busy (GPU busy time) or span (first to last GPU op)")
    rules = parse_rules(preset or AUTO_ORDER[0], ranges or [])   # bad --range rules fail first
    runs = [list(paths)] if any(isinstance(p, str | Path) for p in paths) else [list(r) for r in paths]

    samples: list[StepSample] = []
    dropped: Counter[str] = Counter()
    notes: list[str] = []
    traces: list[tuple[Path, TraceInfo]] = []
    first: tuple[Path, tuple[Built, TraceInfo]] | None = None
    if preset is None:
        preset, first = _pick_preset(runs, ranges or [])
        rules = parse_rules(preset, ranges or [])
        if first is not None:
            notes.append(f"ranges: the {preset} preset, the first of {', '.join(AUTO_ORDER)} whose range "
                         f"names match {first[0].name}; give --ranges to choose another")
    for run in runs:
        formats = {Path(p): detect_format(Path(p)) for p in run}
        jsonl = [p for p, f in formats.items() if f == "minedraft"]
        gpu_traces = [p for p, f in formats.items() if f != "minedraft"]
        run_samples: list[StepSample] = []
        for p in gpu_traces or jsonl:
            built, info = first[1] if first is not None and p == first[0] else _read(p, formats[p], rules)
            run_samples += built.samples
            dropped.update(built.dropped)
            notes += built.notes
            traces.append((p, info))
        if gpu_traces and jsonl:
            steps = [s for p in jsonl for s in read_minedraft_steps(p)]
            run_samples, joined = join_step_attributes(run_samples, steps)
            notes += joined
            traces += [(p, TraceInfo("minedraft")) for p in jsonl]
        samples += run_samples
    if not samples:
        why = ", ".join(f"{reason} ({n})" for reason, n in dropped.most_common(3)) or "no matching ranges"
        raise TraceError("traces", f"no usable samples: {why}")
    check_k(samples)

    fits: dict[str, TermFit] = {}
    for term in TERMS:
        of_kind = [s for s in samples if s.kind == term]
        fitted = fit_term(term, of_kind, timing) if of_kind else None
        if fitted is not None:
            fits[term] = fitted
            notes += fitted.notes
        elif of_kind:
            notes.append(f"{term}: {len(of_kind)} samples, fewer than {MIN_SAMPLES} usable once mixed "
                         "passes and samples missing an attribute are dropped; not fitted")
    if not fits:
        read = ", ".join(f"{n} {term}" for term, n in Counter(s.kind for s in samples).items())
        raise TraceError("traces", f"no term had enough samples to fit (read {read}; at least {MIN_SAMPLES} "
                         "usable per term, once mixed passes and samples missing an attribute are dropped)",
                         "record more steps of each phase")
    _check_finite(fits)
    bootstrap = bootstrap_fits(fits)
    notes += [f"{name}: {n} samples, fewer than {MIN_BOOTSTRAP_SAMPLES} to bootstrap; its fit's uncertainty "
              "is not recorded (--intervals keeps it fixed)" for name, n in bootstrap.too_few.items()]
    prov = {
        "traces": [{"path": str(p), "format": info.format, "sha256": sha256(p), "bytes": p.stat().st_size,
                    "version": info.version, "gpus": {str(k): v for k, v in info.gpus.items()}}
                   for p, info in traces],
        "timing": timing,
        "ranges": preset,
        **{k: v for k, v in (source or {}).items() if v not in (None, "")},
    }
    profile = Profile({name: f.term for name, f in fits.items()}, prov, acceptance_stats(samples),
                      tuple(notes), bootstrap=bootstrap)
    _check_readable(profile, fits)
    return Calibration(profile, fits, samples, dropped, notes, traces)


def bootstrap_fits(fits: dict[str, TermFit], seed: int = BOOTSTRAP_SEED) -> Bootstrap:
    """Every fitted term's bootstrap, each from its own Generator seeded by (seed, the term's place
    in TERMS): a term's resamples do not depend on which other terms the traces hold."""
    resamples, too_few = {}, {}
    for name, fitted in fits.items():
        if len(fitted.times) < MIN_BOOTSTRAP_SAMPLES:
            too_few[name] = len(fitted.times)
        else:
            resamples[name] = bootstrap_term(fitted, np.random.default_rng([seed, TERMS.index(name)]))
    return Bootstrap(seed, resamples, too_few)


# Where the profile reader names a fitted term's value: terms.verify.coef[0], terms.comm.ranges.bytes[1].
_TERM_VALUE = re.compile(r"terms\.(?P<term>\w+)\.(?P<part>coef|ranges)(\.(?P<var>\w+))?\[(?P<end>\d)\]")


def _check_readable(profile: Profile, fits: dict[str, TermFit]) -> None:
    """The profile as `psdsim run --profile` will read it, by the reader's own rules: one it
    would refuse (a range of 1e300 tokens, a negative byte count, an hour per pass from a kernel
    that started before the epoch) is never written; the error names the sample behind it."""
    try:
        profile_from_json(profile.to_json(), "the profile it would write")
    except ScenarioError as exc:
        raise TraceError("traces", f"{exc.problem}{_behind(exc.problem, fits)}",
                         "remove the corrupt steps from the trace, or record it again") from None


def _behind(problem: str, fits: dict[str, TermFit]) -> str:
    """The sample that gave the refused value: the one at the refused end of a fitted range, or
    the longest of a refused coefficient's fit."""
    m = _TERM_VALUE.search(problem)
    if m is None or m["term"] not in fits:
        return ""
    kept = fits[m["term"]].kept
    if m["part"] == "coef":
        s = max(kept, key=lambda s: s.duration_s)
        return f", from the {m['term']} samples (the longest: {_where(s)}, {s.duration_s:.3g} s)"
    low, high = fits[m["term"]].term.ranges[m["var"]]
    value = high if m["end"] == "1" else low
    attr = RANGE_ATTRIBUTE.get(m["var"], m["var"])
    s = next((s for s in kept if getattr(s, attr) == value), None)
    return "" if s is None else f", from the {m['term']} sample at {_where(s)}"


def _where(s: StepSample) -> str:
    return s.source or f"{s.start_s:.9g} s into the trace"


def _check_finite(fits: dict[str, TermFit]) -> None:
    """A fit whose coefficients or error overflowed (a step timed at 1e308 s) is no profile: the
    trace is corrupt, and a profile file cannot hold an infinity."""
    for name, fitted in fits.items():
        t = fitted.term
        numbers = [*t.coef, t.mape, *([t.cv_mape] if t.cv_mape is not None else []),
                   *(x for span in t.ranges.values() for x in span)]
        if not all(math.isfinite(x) for x in numbers):
            raise TraceError("traces", f"the {name} fit overflowed (a coefficient, its error or its range is "
                             "not finite): a sample's time or size is absurd",
                             "remove the corrupt steps from the trace, or record it again")


def _pick_preset(runs: list[list[Any]],
                 extra: list[str]) -> tuple[str, tuple[Path, tuple[Built, TraceInfo]] | None]:
    """The first preset of AUTO_ORDER that reads the first nsys or Kineto trace, with what it
    read; without one, psdsim (MineDraft JSONL alone needs no range rules). When no preset
    matches, the first one's error, which lists the trace's most common range names."""
    found = next(((Path(p), fmt) for run in runs for p in run
                  if (fmt := detect_format(Path(p))) != "minedraft"), None)
    if found is None:
        return "psdsim", None
    path, fmt = found
    first_error: TraceError | None = None
    for name in AUTO_ORDER:
        try:
            return name, (path, _read(path, fmt, parse_rules(name, extra)))
        except TraceError as exc:
            first_error = first_error or exc
    assert first_error is not None
    raise first_error


def _read(path: Path, fmt: str, rules: Any) -> tuple[Built, TraceInfo]:
    if fmt == "nsys":
        return read_nsys(path, rules)
    if fmt == "kineto":
        return read_kineto(path, rules)
    return read_minedraft(path)
