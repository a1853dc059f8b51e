"""A sweep's figures (PNG and SVG): throughput vs rate per method when both vary, and a heat map of
a metric over (k, m) when both vary (one panel per method on one shared colour scale; other swept
fields averaged)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from psdsim.sim.numbers import finite
from psdsim.sim.output.plots import K_AXIS, M_AXIS, default_style, figure_formats, figure_legend

MAX_LINES = 12
IGNORED = ("rate", "seed", "name")  # not a line of their own in throughput vs rate
# Summary columns that are shares of something, and the unit their name does not spell.
FRACTIONS = ("vsr", "parallelization_rate", "comm_share", "link_share", "drafter_busy", "verifier_busy",
             "slo_attainment", "kv_peak_usage")
UNIT_MARKS = (("_tok_s", "tok/s"), ("_req_s", "requests/s"), ("_ms", "ms"))


def metric_unit(metric: str) -> str:
    """The unit of a sweep's metric column, read from the summary's naming (docs/summary.md):
    `throughput_tok_s_trim80` is in tok/s, `latency_ms_p99` in ms, `makespan_s` in s; "" where
    the name says none (a count)."""
    if metric.startswith(FRACTIONS):
        return "fraction"
    for mark, unit in UNIT_MARKS:
        if mark in metric:
            return f"{unit} per GPU" if metric.endswith("_per_gpu") else unit
    return "s" if metric.endswith("_s") else ""


def metric_label(metric: str) -> str:
    unit = metric_unit(metric)
    return f"{metric} ({unit})" if unit else metric


def _save(fig: Any, name: str, out: dict[str, bytes]) -> None:
    out.update({f"{name}.{fmt}": data for fmt, data in figure_formats(fig, dpi=120).items()})


def _label(row: dict[str, Any], fields: Sequence[str]) -> str:
    return " ".join(f"{f}={row[f]}" if f != "method" else str(row[f]) for f in fields)


def throughput_vs_rate(rows: list[dict[str, Any]], swept: Sequence[str], out: dict[str, bytes]) -> None:
    fig = throughput_vs_rate_figure(rows, swept)
    if fig is not None:
        _save(fig, "throughput_vs_rate", out)


def throughput_vs_rate_figure(rows: list[dict[str, Any]], swept: Sequence[str]) -> Any:
    """Both throughputs against the rate, a line per method (and other swept field), with one
    legend right of the panels; None without a finished run at a rate."""
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok" and finite(r.get("rate")) is not None]
    if not ok:
        return None
    others = ["method", *(f for f in swept if f not in (*IGNORED, "method"))]
    if len({tuple(r[f] for f in others) for r in ok}) > MAX_LINES:
        others = ["method"]  # too many combinations: one series per method
    averaged = [f for f in swept if f not in (*others, "rate")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for ax, key, label in ((axes[0], "throughput_tok_s", "throughput (tok/s, decode steps)"),
                           (axes[1], "output_tok_s", "output tok/s (over makespan)")):
        _rate_lines(ax, ok, key, others)
        ax.set_xlabel("rate (requests/s)")
        ax.set_ylabel(label)
        _rate_axis(ax, sorted({r["rate"] for r in ok}))
    figure_legend(fig, ncol=2 if len(axes[0].lines) > 6 else 1)
    note = f" (mean over {', '.join(averaged)})" if averaged else ""
    fig.suptitle(f"throughput vs request rate{note}", fontsize=9)
    return fig


def _rate_lines(ax: Any, ok: list[dict[str, Any]], key: str, others: Sequence[str]) -> None:
    import matplotlib.pyplot as plt

    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in ok:
        y = finite(r.get(key))
        if y is not None:
            series[_label(r, others)][r["rate"]].append(y)
    colors = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    for n, (name, by_rate) in enumerate(series.items()):
        rates = sorted(by_rate)
        style = "-o" if name.startswith("psd") else "--s"  # PSD variants solid, baselines dashed
        ax.plot(rates, [sum(by_rate[x]) / len(by_rate[x]) for x in rates], style, ms=3, label=name,
                color=colors(n % colors.N))


def _rate_axis(ax: Any, rates: list[float]) -> None:
    """A log rate axis labelled at the swept rates (plain numbers) when there are few."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    if len(rates) > 2 and rates[0] > 0:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        if len(rates) <= 10:
            ax.set_xticks(rates, [f"{x:g}" for x in rates])
        else:
            ax.xaxis.set_major_formatter(ScalarFormatter())


def heatmap_k_m(rows: list[dict[str, Any]], swept: Sequence[str], metric: str,
                out: dict[str, bytes]) -> None:
    fig = heatmap_k_m_figure(rows, swept, metric)
    if fig is not None:
        _save(fig, f"heatmap_{metric}_k_m", out)


def heatmap_k_m_figure(rows: list[dict[str, Any]], swept: Sequence[str], metric: str) -> Any:
    """The metric's mean per (k, m) cell, a panel per method, all on one colour scale with one
    colour bar (so that a colour is the same value in every panel); None without a value."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import Normalize

    ok = [r for r in rows if r["status"] == "ok" and finite(r.get(metric)) is not None]
    if not ok:
        return None
    methods = list(dict.fromkeys(r["method"] for r in ok)) if "method" in swept else [None]
    ks, ms = sorted({r["k"] for r in ok}), sorted({r["m"] for r in ok})
    grids = [_grid(ok, method, metric, ks, ms) for method in methods]
    norm = Normalize(float(np.nanmin(grids)), float(np.nanmax(grids)))
    size = (0.6 * len(ks) * len(methods) + 2 * len(methods) + 1.5, 0.45 * len(ms) + 2.2)
    fig, axes = plt.subplots(1, len(methods), figsize=size, squeeze=False, layout="constrained")
    for ax, method, grid in zip(axes[0], methods, grids, strict=True):
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=norm)
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_yticks(range(len(ms)), [str(m) for m in ms])
        ax.set_xlabel(K_AXIS)
        ax.set_title(method or "", fontsize=9)
        if grid.size <= 120:
            _cell_values(ax, grid, (norm.vmin + norm.vmax) / 2)
    axes[0][0].set_ylabel(M_AXIS)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9, label=metric_label(metric))
    averaged = [f for f in swept if f not in ("k", "m", "method")]
    note = f" (mean over {', '.join(averaged)})" if averaged else ""
    fig.suptitle(f"{metric} over k and m{note}", fontsize=9)
    return fig


def _grid(ok: list[dict[str, Any]], method: str | None, metric: str, ks: list[Any], ms: list[Any]) -> Any:
    """The (m, k) grid of the metric's mean over one method's runs (NaN where none ran)."""
    import numpy as np

    cells: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in ok:
        if method is None or r["method"] == method:
            cells[(ms.index(r["m"]), ks.index(r["k"]))].append(float(r[metric]))
    grid = np.full((len(ms), len(ks)), np.nan)
    for (i, j), values in cells.items():
        grid[i, j] = sum(values) / len(values)
    return grid


def _cell_values(ax: Any, grid: Any, middle: float) -> None:
    """Each cell's value written on it (whole numbers from 1,000: 4,050, not 4.05e+03), dark on
    the bright half of the scale."""
    import numpy as np

    for (i, j), value in np.ndenumerate(grid):
        if not math.isnan(value):
            text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="k" if value > middle else "w")


@default_style()
def sweep_figures(rows: list[dict[str, Any]], swept: Sequence[str],
                  metric: str = "throughput_tok_s") -> dict[str, bytes]:
    """File name -> content; empty when neither figure applies."""
    import matplotlib

    matplotlib.use("Agg")
    out: dict[str, bytes] = {}
    if "rate" in swept and "method" in swept:
        throughput_vs_rate(rows, swept, out)
    if "k" in swept and "m" in swept:
        heatmap_k_m(rows, swept, metric, out)
    return out
