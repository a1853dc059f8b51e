"""Compact, readable terminal tables for a run and for a side-by-side comparison.

Why one module: every printed table of a run shares one set of formatters and the legend lines, kept
together so the tables stay consistent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.layout import COLOCATED, NONE, layout_for
from psdsim.sim.numbers import fixed, percent
from psdsim.sim.scenario import Scenario, catalog_for

APPROXIMATE = "figures are approximate until calibrated"


def cost_model_line(s: Scenario) -> str:
    """Which cost model (and engine execution profile) priced the run, and how far to trust it."""
    engine = catalog_for(s).engines[s.engine_key]
    if not s.profile:
        return f"engine {s.engine_key}: {engine.name} (sim/catalog/engines.toml); {APPROXIMATE}"
    name = s.profile.rsplit("/", 1)[-1]
    return (f"fitted cost profile {name} (psdsim calibrate); its fit errors are in the profile, and "
            f"terms it lacks are priced by engine {s.engine_key}")


def _cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return fixed(value, digits)
    return f"{value:,}"


def sm_requests(summary: dict[str, Any], s: Scenario) -> int:
    return int(summary.get("requests", s.requests))


def requests_text(count: int, s: Scenario) -> str:
    """`N requests`, or `N prompts × n samples` when each prompt fans out (SamplingParams.n)."""
    return f"{count} requests" if s.n == 1 else f"{count} prompts × {s.n} samples"


def _pools(usage: dict[str, float]) -> str:
    return ", ".join(f"{pool} {percent(value)}" for pool, value in usage.items())


def describe_hardware(s: Scenario) -> str:
    cat = catalog_for(s)
    target, draft = cat.models[s.target].hf_id, cat.models[s.draft].hf_id
    layout = layout_for(s)
    tp = layout.verifier_tp
    verifier = f"{target} on {tp}×{s.gpu} (TP={tp}, {s.tp_link_key})"
    if layout.verifier_groups > 1:
        verifier = f"{target} on {layout.verifier_groups} replicas of {tp}×{s.gpu} (TP={tp}, {s.tp_link_key})"
    if layout.drafter == NONE:
        return verifier
    if layout.drafter == COLOCATED:
        return f"{verifier}; draft {draft} co-located on GPU 0"
    return f"{verifier}; draft {draft} on {layout.drafter_gpus}×{s.drafter_gpu_key}, link {s.link}"


def _trace_pacing(s: Scenario) -> str:
    """How the trace's clock is replayed: a sped-up or windowed replay is not the trace as
    recorded, and a reader comparing latencies must know which part ran at what rate."""
    name = s.trace.rsplit("/", 1)[-1]
    if not (s.trace_start_s or s.trace_duration_s is not None or s.trace_speedup != 1.0):
        return f"as in trace {name}"
    end = "its end" if s.trace_duration_s is None else f"{s.trace_start_s + s.trace_duration_s:g} s"
    return f"trace {name} from {s.trace_start_s:g} s to {end}, at {s.trace_speedup:g}× its recorded rate"


def arrivals_line(s: Scenario) -> str:
    """How the requests arrive, said where latencies are printed: offline runs queue everything at
    t = 0, so their latencies are mostly waiting, not serving."""
    if s.trace:
        return f"arrivals: {_trace_pacing(s)}"
    if s.rate is None:
        return (f"offline: all {requests_text(s.requests, s)} arrive at t = 0, so latency includes "
                "queueing (set rate=R for Poisson arrivals)")
    return f"Poisson arrivals at {s.rate:g} requests/s"


RUN_LEGEND = (
    "trim80, trim70 = over the first 80%, 70% of decode steps; E2EL = makespan / requests (not a latency);",
    "TTFT = time to first token; TPOT = time per output token; VSR = accepted / verified draft tokens;",
    "parallelised = decode steps verifying drafts made earlier; |B1-B0| = the two sub-batches' size gap;",
    "every key: docs/summary.md")


def format_run(summary: dict[str, Any], s: Scenario, where: str | None = None,
               wall_s: float | None = None) -> str:
    workload = f"trace {s.trace.rsplit('/', 1)[-1]}" if s.trace else s.dataset
    prefill = "chunked prefill" if s.chunked_prefill else "prefill steps"
    head = (f"psdsim run · {s.name} · {s.method} (k={s.k}, m={s.m}) · "
            f"{requests_text(sm_requests(summary, s), s)} · {workload} · {s.scheduler}, {prefill} · "
            f"seed {s.seed}")
    lines = [head, "  " + describe_hardware(s), "  " + arrivals_line(s)]
    lines += [f"  note: {w}" for w in summary.get("warnings", [])]
    if not summary["fits"]:
        lines.append(f"  {summary['infeasible_reason']}")
        return "\n".join(lines)
    sm = summary
    lat, ttft, tpot = sm["latency_ms"], sm["ttft_ms"], sm["tpot_ms"]
    lines += [
        "  " + cost_model_line(s),
        "",
        f"  throughput (decode steps)  {_cell(sm['throughput_tok_s'])} tok/s   trim80 "
        f"{_cell(sm['throughput_tok_s_trim80'])}   trim70 {_cell(sm['throughput_tok_s_trim70'])}"
        f"   per GPU {_cell(sm['throughput_tok_s_per_gpu'])} ({sm['gpus']} GPUs)",
        f"  output over makespan       {_cell(sm['output_tok_s'])} tok/s   makespan "
        f"{_cell(sm['makespan_s'])} s   E2EL {_cell(sm['e2el_ms'])} ms/request",
    ]
    for label, stats in (("latency ms", lat), ("TTFT ms", ttft), ("TPOT ms", tpot),
                      ("queueing ms", sm["queue_ms"])):
        lines.append(f"  {label:<27}mean {_cell(stats['mean'])}   p50 {_cell(stats['p50'])}   "
                     f"p90 {_cell(stats['p90'])}   p99 {_cell(stats['p99'])}")
    lines += [
        f"  VSR {_cell(sm['vsr'], 3)}   parallelised {_cell(sm['parallelization_rate'], 3)}   "
        f"comm share {_cell(sm['comm_share'], 3)}   link share {_cell(sm['link_share'], 3)}",
        f"  drafter busy {_cell(sm['drafter_busy'], 2)}   verifier busy {_cell(sm['verifier_busy'], 2)}"
        f"   decode steps {_cell(sm['decode_steps'])}   prefill steps {_cell(sm['prefill_steps'])}",
        f"  per decode step: draft {_cell(sm['mean_draft_ms'])} ms   verify "
        f"{_cell(sm['mean_verify_ms'])} ms   link {_cell(sm['mean_comm_ms'])} ms",
        f"  KV peak {_pools(sm['kv_peak_usage'])} (binding: {sm['kv_binding_pool']})   preemptions "
        f"{_cell(sm['preemptions'])} ({_cell(sm['recomputed_tokens'])} tokens recomputed, swap "
        f"{_cell(sm['swap_s'], 2)} s)",
        f"  aborted {sm['aborted']}   rejected {sm['rejected']}   wasted verifications "
        f"{_cell(sm['wasted_verifications'])}   imbalance |B1-B0| mean {_cell(sm['imbalance_mean'], 2)}"
        f" max {_cell(sm['imbalance_max'])}",
    ]
    if sm["slo_attainment"] is not None:
        lines.append(f"  SLOs met by {percent(sm['slo_attainment'], 1)} of requests: goodput "
                     f"{_cell(sm['goodput_req_s'], 3)} req/s, {_cell(sm['goodput_tok_s'])} tok/s")
    lines += ["", *(f"  {line}" for line in RUN_LEGEND)]
    tail = []
    if where:
        tail.append(f"results: {where}")
    if wall_s:
        tail.append(f"simulated {sm['makespan_s']:,.0f} s in {wall_s:.2f} s "
                    f"({sm['makespan_s'] / wall_s:,.0f}× real time)")
    if tail:
        lines += ["", "  " + "   ".join(tail)]
    return "\n".join(lines)


# The keys format_engine_run lays out; any other key of an engine's summary is listed after them.
_ENGINE_SHOWN = frozenset((
    "method", "k", "m", "requests", "engine", "engine_version", "makespan_s", "throughput_tok_s",
    "throughput_tok_s_trim80", "throughput_tok_s_trim70", "output_tok_s", "e2el_ms", "latency_ms", "ttft_ms",
    "tpot_ms", "vsr", "parallelization_rate", "comm_share", "drafter_busy", "verifier_busy", "decode_steps",
    "prefill_steps", "mean_draft_ms", "mean_verify_ms", "mean_comm_ms"))


def _stats_line(label: str, stats: dict[str, Any] | None) -> str:
    stats = stats or {}
    return (f"  {label:<27}mean {_cell(stats.get('mean'))}   p50 {_cell(stats.get('p50'))}   "
            f"p90 {_cell(stats.get('p90'))}   p99 {_cell(stats.get('p99'))}")


def format_engine_run(sm: dict[str, Any]) -> str:
    """A real engine's run summary laid out as `psdsim run` lays out a simulated one (the shared
    keys, docs/design.md §7), then whatever else the engine reports, one `key value` each."""
    engine = sm.get("engine") or "reference"
    version = f" {sm['engine_version']}" if sm.get("engine_version") else ""
    k = f"k={sm['k']}, " if sm.get("k") is not None else ""
    lines = [f"psdsim engine run · {engine}{version} · {sm.get('method')} ({k}m={sm.get('m')}) · "
             f"{sm.get('requests')} requests", "",
             f"  {'throughput (makespan)' if engine == 'vllm' else 'throughput (decode steps)':<27}"
             f"{_cell(sm.get('throughput_tok_s'))} tok/s   trim80 "
             f"{_cell(sm.get('throughput_tok_s_trim80'))}   trim70 "
             f"{_cell(sm.get('throughput_tok_s_trim70'))}",
             f"  output over makespan       {_cell(sm.get('output_tok_s'))} tok/s   makespan "
             f"{_cell(sm.get('makespan_s'), 2)} s   E2EL {_cell(sm.get('e2el_ms'))} ms/request",
             _stats_line("latency ms", sm.get("latency_ms")), _stats_line("TTFT ms", sm.get("ttft_ms")),
             _stats_line("TPOT ms", sm.get("tpot_ms")),
             f"  VSR {_cell(sm.get('vsr'), 3)}   parallelised {_cell(sm.get('parallelization_rate'), 3)}   "
             f"comm share {_cell(sm.get('comm_share'), 3)}",
             f"  drafter busy {_cell(sm.get('drafter_busy'), 2)}   verifier busy "
             f"{_cell(sm.get('verifier_busy'), 2)}   decode steps {_cell(sm.get('decode_steps'))}   "
             f"prefill steps {_cell(sm.get('prefill_steps'))}",
             f"  per decode step: draft {_cell(sm.get('mean_draft_ms'))} ms   verify "
             f"{_cell(sm.get('mean_verify_ms'))} ms   link {_cell(sm.get('mean_comm_ms'))} ms"]
    rest = {key: value for key, value in sm.items() if key not in _ENGINE_SHOWN}
    for key, value in rest.items():
        if isinstance(value, (list, dict)):
            shown = json.dumps(value)
        else:
            shown = "–" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"  {key}: {shown}")
    return "\n".join(lines)


# Rows of the comparison: label, summary key (or key path), digits, True if higher is better.
COMPARE_ROWS: tuple[tuple[str, tuple[str, ...], int, bool], ...] = (
    ("throughput tok/s (decode)", ("throughput_tok_s",), 1, True),
    ("throughput tok/s per GPU", ("throughput_tok_s_per_gpu",), 1, True),
    ("output tok/s (makespan)", ("output_tok_s",), 1, True),
    ("E2EL ms/request", ("e2el_ms",), 1, False),
    ("latency p50 ms", ("latency_ms", "p50"), 0, False),
    ("latency p99 ms", ("latency_ms", "p99"), 0, False),
    ("TPOT p50 ms", ("tpot_ms", "p50"), 1, False),
    ("VSR", ("vsr",), 3, True),
    ("parallelization rate", ("parallelization_rate",), 3, True),
    ("GPUs", ("gpus",), 0, False),
)
RATIO_KEYS = (("throughput_tok_s",), ("throughput_tok_s_per_gpu",), ("output_tok_s",),
              ("e2el_ms",), ("latency_ms", "p50"), ("latency_ms", "p99"), ("tpot_ms", "p50"))


def infeasible_fix(field: str, s: Scenario) -> str:
    """What to change when a run does not fit, for the field the memory plan blames."""
    blocks = -(-s.max_model_len // s.block_size)
    return {
        "num_gpu_blocks_override": f"raise num_gpu_blocks_override to at least {blocks} (max_model_len "
                                   f"{s.max_model_len} / block_size {s.block_size}), or remove it",
        "tensor_parallel_size": "choose a tensor_parallel_size that divides the target's attention heads",
        "draft": "choose a smaller draft model or a drafter GPU with more memory (drafter_gpu), or raise "
                 "gpu_memory_utilization",
    }.get(field, "raise gpu_memory_utilization or tensor_parallel_size, or choose a GPU with more memory")


def nothing_fits(results: dict[str, Any], s: Scenario) -> str:
    """One line for stderr when no method of a comparison fits: the first one's field, reason, fix."""
    method, first = next(iter(results.items()))
    others = f"; so do {', '.join(list(results)[1:])}" if len(results) > 1 else ""
    return str(infeasible_error(method, first, s, others))


def infeasible_error(label: str, result: Any, s: Scenario, others: str = "") -> ScenarioError:
    """The user error for a run (a sim.run.Result) that does not fit: the field the memory plan
    blames, why, and what to change."""
    field = result.memory.field or "gpu"
    reason = str(result.summary["infeasible_reason"]).removeprefix("does not fit: ")
    return ScenarioError(field, f"{label} does not fit: {reason}{others}", infeasible_fix(field, s))


def lookup(summary: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = summary
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def ratios(summaries: dict[str, dict[str, Any]],
           pairs: Sequence[tuple[str, str]]) -> dict[str, dict[str, float | None]]:
    """`a/b` of the comparable metrics for each (a, b) pair of methods that both fit."""
    out: dict[str, dict[str, float | None]] = {}
    for a, b in pairs:
        if a not in summaries or b not in summaries:
            continue
        if not (summaries[a]["fits"] and summaries[b]["fits"]):
            continue
        row: dict[str, float | None] = {}
        for path in RATIO_KEYS:
            x, y = lookup(summaries[a], path), lookup(summaries[b], path)
            row["_".join(path)] = x / y if isinstance(x, (int, float)) and y else None
        out[f"{a}/{b}"] = row
    return out


CELL = 12          # the narrowest column; a longer method or pair name widens its own
LABEL = 28
TABLE_WIDTH = 110  # a comparison wider than this prints its ratio columns as a second table
COMPARE_LEGEND = (
    "E2EL = makespan / requests (not a latency); TPOT = time per output token; VSR = accepted / verified",
    "draft tokens; parallelization rate = decode steps verifying earlier drafts; every key: docs/summary.md")


def _table(header: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Right-aligned columns under `header`, each as wide as its name needs (at least CELL)."""
    widths = [max(CELL, len(name) + 2) for name in header]

    def line(label: str, cells: Sequence[str]) -> str:
        return f"  {label:<{LABEL}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))

    return [line("", header), *(line(label, cells) for label, cells in rows)]


def _compare_cells(summaries: dict[str, dict[str, Any]], pairs: Sequence[tuple[str, str]],
                   path: tuple[str, ...], digits: int, ratio: bool) -> tuple[list[str], list[str]]:
    """One row's cells: each method's value ("no fit" where it does not fit), then each pair's a/b."""
    values = [_cell(lookup(sm, path), digits) if sm["fits"] else "no fit" for sm in summaries.values()]
    ratios_ = []
    for a, b in pairs:
        x, y = lookup(summaries[a], path), lookup(summaries[b], path)
        ok = ratio and isinstance(x, (int, float)) and isinstance(y, (int, float)) and y
        ratios_.append(f"{fixed(x / y, 2)}×" if ok else "")
    return values, ratios_


def _row_label(label: str, higher: bool) -> str:
    return f"{label} {' ' if label == 'GPUs' else '↑' if higher else '↓'}"


def compare_table(summaries: dict[str, dict[str, Any]], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The methods' figures side by side with the pairs' ratios; when that is wider than
    TABLE_WIDTH, the ratios follow as a table of their own (rows without a ratio left out)."""
    pairs = [(a, b) for a, b in pairs if a in summaries and b in summaries]
    rows = [(_row_label(label, higher), *_compare_cells(summaries, pairs, path, digits, label != "GPUs"))
            for label, path, digits, higher in COMPARE_ROWS]
    names = [f"{a}/{b}" for a, b in pairs]
    joined = _table([*summaries, *names], [(label, [*cells, *ratio]) for label, cells, ratio in rows])
    if not names or max(map(len, joined)) <= TABLE_WIDTH:
        return joined
    return [*_table(list(summaries), [(label, cells) for label, cells, _ in rows]), "",
            *_table(names, [(label, ratio) for label, _, ratio in rows if any(ratio)])]


def _extra_text(summaries: dict[str, Any], s: Scenario) -> str:
    """` extra=E` in the header when psd+tetris is compared: the one field only it reads."""
    return f" extra={s.extra}" if "psd+tetris" in summaries else ""


def format_compare(summaries: dict[str, dict[str, Any]], s: Scenario,
                   pairs: Sequence[tuple[str, str]]) -> str:
    head = (f"psdsim compare · {s.name} · k={s.k} m={s.m}{_extra_text(summaries, s)} · "
            f"{requests_text(s.requests, s)} · {s.dataset} · seed {s.seed}")
    cat = catalog_for(s)
    lines = [head, f"  target {cat.models[s.target].hf_id} on {s.tensor_parallel_size}×{s.gpu}, "
                   f"draft {cat.models[s.draft].hf_id}, link {s.link}", "  " + cost_model_line(s),
             "  " + arrivals_line(s)]
    notes = dict.fromkeys(w for sm in summaries.values() for w in sm.get("warnings", []))  # as run prints
    lines += [f"  note: {w}" for w in notes]
    lines += ["", *compare_table(summaries, pairs)]
    lines += [f"  {m}: {sm['infeasible_reason']}" for m, sm in summaries.items() if not sm["fits"]]
    lines += ["", "  ↑ higher is better, ↓ lower is better; a/b columns divide a's value by b's",
              *(f"  {line}" for line in COMPARE_LEGEND)]
    return "\n".join(lines)


def catalog_json(cat: Any) -> dict[str, Any]:
    """The catalog as plain data: every entry with its derived sizes and its source."""
    return {
        "gpus": {k: vars(v) for k, v in cat.gpus.items()},
        "links": {k: vars(v) for k, v in cat.links.items()},
        "models": {k: {**vars(v), "total_params": v.total_params, "weight_gb": v.weight_bytes / 1e9,
                       "kv_bytes_per_token": v.kv_bytes_per_token} for k, v in cat.models.items()},
        "datasets": {k: {"max_requests": v.max_requests, "min_prompt": v.min_prompt,
                         "max_prompt": v.max_prompt, "source": v.source} for k, v in cat.datasets.items()},
        "acceptance": {f"{d} -> {t}": {"alpha": p.alpha, "source": p.source}
                       for (d, t), p in cat.acceptance.items()},
        "engines": {k: vars(v) for k, v in cat.engines.items()},
    }


def _model_kind(md: Any) -> str:
    kind = []
    if md.moe:
        kind.append(f"MoE {md.experts}x{md.experts_per_token}, {md.active_params / 1e9:.1f} B active")
    if md.compute == "fp8":
        kind.append("FP8")
    elif md.bytes_per_param < 2:
        kind.append(f"{md.bytes_per_param * 8:.1f}-bit weights")
    if md.eagle:
        kind.append("EAGLE head")
    return f" [{'; '.join(kind)}]" if kind else ""


def format_catalog(cat: Any) -> str:
    """The built-in GPUs, links, models, datasets and acceptance priors, one line each."""
    lines = ["GPUs"]
    for k, g in cat.gpus.items():
        fp8 = f"{g.fp8_tflops:>5.0f} FP8" if g.fp8_tflops else "   no FP8"
        lines.append(f"  {k:<11} {g.memory_gb:>5.0f} GB  {g.memory_bandwidth_gbps:>6.0f} GB/s  "
                     f"{g.bf16_tflops:>5.0f} TFLOPS bf16 {fp8}  {'NVLink' if g.nvlink else 'PCIe only'}")
    lines.append("links (per direction; all-reduce bus bandwidth)")
    for k, ln in cat.links.items():
        lines.append(f"  {k:<13} p2p {ln.p2p_latency_us:>4.0f} us + {ln.p2p_bandwidth_gbps:>5.0f} GB/s   "
                     f"all-reduce {ln.allreduce_latency_us:>4.0f} us + {ln.allreduce_busbw_gbps:>5.0f} GB/s")
    lines.append("models")
    for k, md in cat.models.items():
        lines.append(f"  {k:<20} {md.total_params / 1e9:>7.2f} B params  {md.weight_bytes / 1e9:>7.2f} GB  "
                     f"KV {md.kv_bytes_per_token / 1024:>6.1f} KiB/token{_model_kind(md)}  ({md.hf_id})")
    lines.append("datasets (prompt tokens, MineDraft filters)")
    for k, d in cat.datasets.items():
        limit = f"{d.max_requests} prompts" if d.max_requests else "unlimited"
        lines.append(f"  {k:<11} {d.min_prompt}–{d.max_prompt} tokens, {limit}")
    lines.append("acceptance priors (per-token, temperature 1.0, estimates)")
    lines += [f"  {d} -> {t}: {p.alpha}" for (d, t), p in cat.acceptance.items()]
    lines.append("engines (scenario field engine; empty = the scheduler's: vllm-v0 -> vllm-0.9.2-v0-eager)")
    lines += [f"  {k:<20} {e.name}" for k, e in cat.engines.items()]
    lines.append("\nEvery entry names its source: `psdsim catalog --json`, or sim/catalog/*.toml.")
    return "\n".join(lines)


def _pct(g: dict[str, Any], name: str) -> str:
    value = g.get(name)
    return percent(value, 1, sign=True) if value is not None else "–"


def format_paper(title: str, runs: int, note: str | None, gains: dict[str, dict[str, Any]],
                 infeasible: Sequence[str], folder: Any, repeats: int = 1) -> str:
    """The paper grid's improvement table: per dataset, the best k (its throughput the mean of
    `repeats` runs, ± their standard deviation) and PSD's gains over each baseline."""
    each = f", each the mean of {repeats}" if repeats > 1 else ""
    lines = [f"psdsim paper · {title} · {runs} runs{each}"]
    if note:
        lines.append(f"  note: {note}")
    lines.append(f"  {'dataset/variant':<24}{'best k':>7}{'tok/s':>9}{'±':>6}{'max vs SD':>11}"
                 f"{'E2EL vs SD':>12}"
                 f"{'vs best BL':>12}{'vs sd-2m':>10}{'vs sd-5gpu':>12}")
    for key, g in gains.items():
        std = g.get("best_throughput_std")
        lines.append(f"  {key:<24}{g['best_k']:>7}{fixed(g['best_throughput'], grouping=False):>9}"
                     f"{fixed(std) if std is not None else '–':>6}"
                     f"{_pct(g, 'max_throughput_gain_vs_sd'):>11}{_pct(g, 'max_e2el_gain_vs_sd'):>12}"
                     f"{_pct(g, 'gain_vs_best_baseline'):>12}{_pct(g, 'best_vs_sd-2m'):>10}"
                     f"{_pct(g, 'best_vs_sd-5gpu'):>12}")
    lines += [f"  {line}" for line in infeasible]
    lines.append("\n  best BL = the paper's baselines (SD, PEARL) at their best k; sd-2m and sd-5gpu are the")
    lines.append(f"  memory-fair and GPU-fair comparisons the paper did not run. results: {folder}/")
    return "\n".join(lines)
