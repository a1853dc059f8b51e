"""Joining an nsys export (`join_step_attributes`) [INFERRED alignment rule]: MineDraft's NVTX ranges
carry no batch facts, so samples read with the `minedraft` range preset get them from the step
records by order, kind by kind (and process by process, where ranks were not merged):
- `score` (verify) and `_verify_tokens` (reject) ↔ the spec-decode steps, in order;
- `_run_no_spec` (draft_prefill: the range is on the driver) ↔ the prompt steps and the
  no-speculation decode steps, in order
  (the latter keep NaN attributes: they are decode passes, not prefills);
- `propose` (draft) ↔ per spec-decode step: the sending batch when the step is not parallelised
  (batch = verified requests), then the other sub-batch when it is non-empty (batch = scheduled −
  verified); k = proposed_len. PEARL's and plain SD's drafting carry no `propose` range.
Steps that scheduled nothing run no worker code and take part in no join. The common prefix is
joined; the notes say how many samples or step phases were left over.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from psdsim.calibration.minedraft_records import as_number, known, prefill_attrs, step_facts, verify_attrs
from psdsim.calibration.samples import StepSample

# ---------------------------------------------------------------------------------------------
# Joining NVTX-range samples (nsys, `minedraft` preset) to the step records


def _expected(steps: list[dict[str, Any]]) -> dict[str, list[tuple[dict[str, float], dict[str, Any]]]]:
    """Per kind, the phases the steps ran in order: (attributes to fill, the step)."""
    out: dict[str, list[tuple[dict[str, float], dict[str, Any]]]] = defaultdict(list)
    for step in steps:
        f = step_facts(step)
        if f.role == "prompt":
            out["draft_prefill"].append((known(prefill_attrs(f)), step))
        elif f.role == "nospec":
            out["draft_prefill"].append(({}, step))   # `_run_no_spec` ran a decode pass: nothing to give
        elif f.role == "spec":
            verify = known(verify_attrs(f))
            out["verify"].append((verify, step))
            reject = {k: v for k, v in verify.items() if k in ("batch", "k")}
            if "tokens" in verify:
                reject["positions"] = verify["tokens"]
            out["reject"].append((reject, step))
            if not f.parallelised:
                out["draft"].append((known({"batch": f.verified, "k": f.k}), step))
            other = f.scheduled - f.verified
            if other > 0:
                out["draft"].append((known({"batch": other, "k": f.k}), step))
    return out


def join_step_attributes(samples: list[StepSample], steps: list[dict[str, Any]]
                         ) -> tuple[list[StepSample], list[str]]:
    """Fill the NaN batch facts of NVTX-range samples from MineDraft step records, by order, kind by
    kind (process by process); never overwrite a value a sample has. Returns the samples in their
    input order and notes on what was joined and what was left over (see the module docstring for
    the [INFERRED] alignment rule)."""
    expected = _expected(steps)
    out = list(samples)
    notes: list[str] = []
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        groups[(s.kind, s.process)].append(i)
    multi = {kind for kind, _ in groups if sum(1 for k, _ in groups if k == kind) > 1}
    for (kind, process), idx in sorted(groups.items()):
        label = f"{kind} (process {process})" if kind in multi else kind
        phases = expected.get(kind)
        if phases is None:
            notes.append(f"{label}: {len(idx)} samples; the step records say nothing about this kind")
            continue
        idx.sort(key=lambda i: (samples[i].start_s, i))
        n = min(len(idx), len(phases))
        filled = 0
        for i, (attrs, _) in zip(idx[:n], phases[:n], strict=True):
            s = out[i]
            fill = {a: v for a, v in attrs.items() if math.isnan(getattr(s, a))}
            if fill:
                out[i] = s.with_attrs(fill)
                filled += 1
        msg = f"{label}: joined {n} samples to step records by order ({filled} gained attributes)"
        if len(idx) != len(phases):
            more = "samples" if len(idx) > len(phases) else "step phases"
            msg += (f"; counts disagree ({len(idx)} samples, {len(phases)} step phases): "
                    f"{abs(len(idx) - len(phases))} {more} left unjoined")
        corr = _correlation([samples[i].duration_s for i in idx[:n]],
                            [as_number(step.get(_TIMER.get(kind, ""))) for _, step in phases[:n]])
        if corr is not None:
            msg += f"; durations vs. the records' {_TIMER[kind]} correlate r={corr:.2f}"
        notes.append(msg)
    for kind in sorted(set(expected) - {k for k, _ in groups}):
        notes.append(f"{kind}: {len(expected[kind])} step phases but no samples of that kind")
    return out, notes


# The step timer that brackets each joined kind's work, for the alignment check.
_TIMER = {"verify": "measured_target_time", "draft_prefill": "measured_target_time"}


def _correlation(a: list[float], b: list[float]) -> float | None:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 5:
        return None
    x, y = np.array(pairs, dtype=float).T
    if x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])
