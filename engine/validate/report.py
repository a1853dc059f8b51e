"""Measured against predicted: the rows of `psdsim validate`, its table and its figure.

Both sides use the same definitions (engine/reference/result.py mirrors sim/metrics.py):
throughput = tokens kept by decode steps / time of decode steps (prefill-only steps excluded,
tokens past a request's output length not counted, each step from its start to its end);
E2EL = makespan / requests; latency from arrival (t = 0) to the last token; parallelization
rate = parallelised decode steps / decode steps; VSR = accepted / verified draft tokens.
Relative error = (predicted − measured) / measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from psdsim.engine.validate.describe import SIM_METHOD, EngineRun
from psdsim.sim.numbers import finite, fixed, percent
from psdsim.sim.output.plots import default_style, figure_bytes, figure_legend, label_k_axis

METRICS: tuple[tuple[str, str], ...] = (
    ("throughput_tok_s", "tok/s"), ("e2el_ms", "E2EL ms"), ("latency_ms.p50", "p50 ms"),
    ("latency_ms.p99", "p99 ms"), ("parallelization_rate", "par. rate"), ("vsr", "VSR"),
)
# The targets: PSD throughput within 5% and p50 latency within 8% after calibrating on SD
# and AR only.
TARGETS = {"throughput_tok_s": 0.05, "latency_ms.p50": 0.08}
# The figures' axis labels: each metric with its unit (docs/summary.md).
AXIS_LABELS = {"throughput_tok_s": "throughput (tok/s, decode steps)",
               "output_tok_s": "output throughput (tok/s)", "e2el_ms": "E2EL (ms per request)",
               "latency_ms.p50": "p50 latency (ms)", "latency_ms.p99": "p99 latency (ms)",
               "parallelization_rate": "parallelization rate (fraction)",
               "vsr": "VSR (fraction of drafts accepted)"}


def metric(summary: Mapping[str, Any], key: str) -> float | None:
    """summary[key], with dots for nested keys (latency_ms.p50); None unless a finite number."""
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return finite(value)


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    """(predicted − measured) / measured; None where either is missing or measured is 0."""
    if measured is None or predicted is None or measured == 0:
        return None
    return (predicted - measured) / measured


def metric_cells(measured: Mapping[str, Any], predicted: Mapping[str, Any],
                 metrics: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Per metric key: measured, predicted and the relative error."""
    cells = {}
    for key, _ in metrics:
        a, b = metric(measured, key), metric(predicted, key)
        cells[key] = {"measured": a, "predicted": b, "error": relative_error(a, b)}
    return cells


def build_rows(runs: Sequence[EngineRun], measured: Mapping[str, Mapping[str, Any]],
               predicted: Mapping[str, Mapping[str, Any]], in_sample: Iterable[str],
               repeats: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Per run and metric: measured (the mean over repeats), predicted, the relative error, and
    (with repeats) each repeat's value and its own error, which show the machine's noise.
    `in_sample` names the runs whose traces made the profile."""
    calib = set(in_sample)
    rows = []
    for r in runs:
        m, p = measured[r.name], predicted[r.name]
        metrics = metric_cells(m, p, METRICS)
        if repeats is not None:
            add_repeats(metrics, repeats[r.name])
        rows.append({"run": r.name, "engine_method": r.method, "label": r.label,
                     "sim_method": SIM_METHOD.get(r.label, r.label), "k": None if r.label == "ar" else r.k,
                     "in_sample": r.name in calib, "metrics": metrics,
                     "decode_steps": {"measured": m.get("decode_steps"), "predicted": p.get("decode_steps")},
                     "sim_warnings": list(p.get("warnings", []))})
    return rows


def add_repeats(cells: dict[str, dict[str, Any]], repeats: Sequence[Mapping[str, Any]]) -> None:
    """With 2 repeats or more, each metric cell gets every repeat's value, its own error against
    the prediction and the 95% interval of their mean (`error_interval`): the machine's noise."""
    if len(repeats) < 2:
        return
    for key, cell in cells.items():
        b = cell["predicted"]
        each = [metric(x, key) for x in repeats]
        cell["repeats"] = each
        cell["repeat_errors"] = [relative_error(x, b) for x in each]
        cell["interval"] = error_interval(each, b)


def error_interval(values: Sequence[float | None], predicted: float | None) -> dict[str, Any] | None:
    """The 95% confidence interval of the mean of the repeats (Student's t), as a share of the
    mean (`half`), and the range of the relative error it allows (`error`). None under 2 values."""
    xs = [x for x in values if x is not None]
    if len(xs) < 2 or predicted is None:
        return None
    from scipy.stats import t as student_t

    n, mean = len(xs), sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(student_t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    if mean <= 0 or half >= mean:
        return {"half": None, "error": None}
    return {"half": half / mean, "error": [predicted / (mean + half) - 1, predicted / (mean - half) - 1]}


def noise_check(rows: Sequence[Mapping[str, Any]], cpus: int | None = None) -> dict[str, Any]:
    """Whether the machine's noise lets the PSD rows be judged against the targets: the repeats'
    95% intervals beside the bounds, and the load average of the last 5 minutes per CPU (other
    processes competing with the engine's). `verdict` says it plainly, with what to do."""
    cpus = cpus or os.cpu_count() or 1
    try:
        load: float | None = os.getloadavg()[1] / cpus
    except OSError:
        load = None
    psd = [row for row in rows if row["label"] == "psd"]
    runs = max((len(row["metrics"]["throughput_tok_s"].get("repeats") or [None]) for row in psd), default=0)
    widths = {f"psd k={row['k']}": {key: (row["metrics"][key].get("interval") or {}).get("half")
                                     for key in TARGETS} for row in psd}
    over = [(name, key, half) for name, halves in widths.items() for key, half in halves.items()
            if (half is None and runs > 1) or (half is not None and half > TARGETS[key])]
    if runs < 2:
        verdict = ("one run per configuration: the machine's noise is not known, so an error may be "
                   "the machine's; rerun with --repeats 3 to measure it")
    elif over:
        name, key, half = max(over, key=lambda o: o[2] if o[2] is not None else math.inf)
        spread = "no better than its own size" if half is None else f"±{half:.1%}"
        verdict = (f"the machine's noise exceeds the target: the mean of {runs} repeats of {name} {key} "
                   f"is known to {spread} (95%), the target is ±{TARGETS[key]:.0%}; the errors may be the "
                   f"machine's, not the model's: run more repeats (--repeats {2 * runs}) on a quiet machine")
    else:
        worst = max((h for halves in widths.values() for h in halves.values() if h is not None), default=0.0)
        verdict = f"the repeats agree: every PSD mean is known to ±{worst:.1%} (95%), inside the targets"
    if load is not None and load > 1:
        verdict += (f"; the load average was {load:.1f} per CPU over the last 5 minutes (other processes "
                    "competed with the engine)")
    return {"repeats": runs, "half_widths": widths, "load_per_cpu": load, "exceeds": bool(over) or runs < 2,
            "verdict": verdict}


def target_check(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's targets on the PSD rows: each |error| against its bound."""
    out: dict[str, Any] = {"bounds": dict(TARGETS), "psd": {}}
    met = True
    for row in rows:
        if row["label"] != "psd":
            continue
        errs = {key: row["metrics"][key]["error"] for key in TARGETS}
        ok = all(e is not None and abs(e) <= TARGETS[key] for key, e in errs.items())
        met &= ok
        out["psd"][str(row["k"])] = {**errs, "met": ok}
    out["met"] = met and bool(out["psd"])
    return out


def build_report(runs: Sequence[EngineRun], measured: Mapping[str, Mapping[str, Any]],
                 predicted: Mapping[str, Mapping[str, Any]], in_sample: Iterable[str],
                 meta: Mapping[str, Any], repeats: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                 measured_by: str = "reference engine") -> tuple[dict[str, Any], bytes]:
    rows = build_rows(runs, measured, predicted, in_sample, repeats)
    machine = meta.get("machine")
    cpus = machine.get("cpus") if isinstance(machine, Mapping) else None
    report = {**meta, "rows": rows, "targets": target_check(rows), "noise": noise_check(rows, cpus),
              "measured": {r.name: _plain(measured[r.name]) for r in runs},
              "predicted": {r.name: _plain(predicted[r.name]) for r in runs}}
    return report, figure(rows, measured_by)


def _plain(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary without NaN/inf (JSON) and without the per-run paths and pids."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if key in ("driver_pid", "verifier_pid", "trace"):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, Mapping):
            value = _plain(value)
        out[key] = value
    return out


def format_value(x: float | None, key: str) -> str:
    """A metric for the table: ratios to 3 decimals, others to 4 significant digits."""
    if x is None:
        return "–"
    if key in ("parallelization_rate", "vsr"):
        return fixed(x, 3, grouping=False)
    return f"{x:.4g}" if abs(x) < 100 else f"{x:.0f}"


def format_error(x: float | None) -> str:
    """A relative error as a signed percentage (an error too small to show as "< +0.05%")."""
    return "–" if x is None else percent(x, 1, sign=True)


Column = tuple[str, Callable[[Mapping[str, Any]], str], int]   # title, value of a row, width


def metric_table(rows: Sequence[Mapping[str, Any]], metrics: Sequence[tuple[str, str]],
                 columns: Sequence[Column], in_sample_means: str) -> list[str]:
    """Rows of `run [columns] metric…`, each metric cell `measured predicted error`; a `*`
    marks the in-sample runs (`in_sample_means` says why they are)."""
    head = f"  {'run':<13}" + "".join(f"{title:<{w}}" for title, _, w in columns)
    head += "".join(f"{label:>26}" for _, label in metrics)
    out = [head, "  " + "-" * (len(head) - 2)]
    for row in rows:
        cells = "".join(f"{format_value(c['measured'], key):>8} {format_value(c['predicted'], key):>8} "
                        f"{format_error(c['error']):>8}".rjust(26)
                        for key, c in ((key, row["metrics"][key]) for key, _ in metrics))
        name = row["run"] + ("*" if row["in_sample"] else " ")
        out.append(f"  {name:<13}" + "".join(f"{value(row):<{w}}" for _, value, w in columns) + cells)
    out.append("  each cell: measured, predicted, error = (predicted − measured) / measured; "
               f"* = in-sample ({in_sample_means})")
    return out


def table_lines(report: Mapping[str, Any]) -> list[str]:
    """The side-by-side table: per run, each metric measured / predicted (error)."""
    rows = report["rows"]
    out = metric_table(rows, METRICS, [("sim", lambda row: row["sim_method"], 9)],
                       "its traces made the profile")
    for row in rows:
        if row["label"] == "psd":
            out += repeat_lines(row, (("throughput_tok_s", "throughput"), ("latency_ms.p50", "p50 latency")))
    t = report["targets"]
    for k, errs in t["psd"].items():
        out.append(f"  target psd k={k}: throughput {format_error(errs['throughput_tok_s'])} (within ±5%), "
                   f"p50 latency {format_error(errs['latency_ms.p50'])} (within ±8%): "
                   f"{'met' if errs['met'] else 'missed'}")
    if "noise" in report:
        out.append(f"  noise: {report['noise']['verdict']}")
    return out


def repeat_lines(row: Mapping[str, Any], metrics: Sequence[tuple[str, str]]) -> list[str]:
    """Two lines for a row measured 2 times or more (`add_repeats`): each repeat's error against
    the prediction, and the error with the 95% interval of the mean, for the (key, label) metrics."""
    cells = row["metrics"]
    if "repeat_errors" not in cells[metrics[0][0]]:
        return []
    each = "; ".join(f"{label} {', '.join(format_error(e) for e in cells[key]['repeat_errors'])}"
                     for key, label in metrics)
    ranges = "; ".join(f"{label} {_error_range(cells[key].get('interval'))}" for key, label in metrics)
    return [f"  {row['run']} each repeat against the prediction: {each}",
            f"  {row['run']} error with the 95% interval of the mean: {ranges}"]


def _error_range(interval: Mapping[str, Any] | None) -> str:
    if not interval or interval.get("error") is None:
        return "– (the repeats spread wider than their mean)"
    lo, hi = interval["error"]
    return f"{format_error(lo)} … {format_error(hi)}"


@default_style()
def figure(rows: Sequence[Mapping[str, Any]], measured_by: str = "reference engine") -> bytes:
    """`validate_figure` as PNG bytes."""
    return figure_bytes(validate_figure(rows, measured_by))


def validate_figure(rows: Sequence[Mapping[str, Any]], measured_by: str = "reference engine") -> Any:
    """Measured (filled) against predicted (hollow, dashed) per k, one panel per metric, with one
    legend right of the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7), layout="constrained")
    labels = list(dict.fromkeys(r["label"] for r in rows))
    colors = {lab: f"C{i}" for i, lab in enumerate(labels)}
    for ax, (key, title) in zip(axes.flat, METRICS, strict=True):
        for lab in labels:
            mine = [r for r in rows if r["label"] == lab]
            ks = [r["k"] if r["k"] is not None else 0 for r in mine]
            meas = [r["metrics"][key]["measured"] for r in mine]
            pred = [r["metrics"][key]["predicted"] for r in mine]
            if all(v is None for v in meas):
                continue
            kw = {"color": colors[lab]}
            if lab == "ar":  # one point, k-less: drawn across the panel
                ax.axhline(meas[0], lw=1, **kw, label=f"{lab} measured")
                if pred[0] is not None:
                    ax.axhline(pred[0], lw=1, ls="--", **kw, label=f"{lab} predicted")
                continue
            ax.plot(ks, meas, "o-", **kw, label=f"{lab} measured")
            ax.plot(ks, pred, "o--", mfc="none", **kw, label=f"{lab} predicted")
        label_k_panel(ax, title, AXIS_LABELS[key])
    figure_legend(fig)
    fig.suptitle(f"psdsim validate: {measured_by} measured (filled) vs simulated (hollow, dashed)")
    return fig


def label_k_panel(ax: Any, title: str, ylabel: str) -> None:
    """A validation panel's title, its metric with unit up the side, and whole k along the bottom."""
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    label_k_axis(ax)
