"""A sweep's figures (PNG and SVG): throughput vs rate per method when both vary, and a heat map of
a metric over (k, m) when both vary (one panel per method; other swept fields averaged)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from psdsim.sim.numbers import finite
from psdsim.sim.output.plots import figure_formats

MAX_LINES = 12
IGNORED = ("rate", "seed", "name")  # not a line of their own in throughput vs rate


def _save(fig: Any, name: str, out: dict[str, bytes]) -> None:
    out.update({f"{name}.{fmt}": data for fmt, data in figure_formats(fig, dpi=120).items()})


def _label(row: dict[str, Any], fields: Sequence[str]) -> str:
    return " ".join(f"{f}={row[f]}" if f != "method" else str(row[f]) for f in fields)


def throughput_vs_rate(rows: list[dict[str, Any]], swept: Sequence[str], out: dict[str, bytes]) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ok = [r for r in rows if r["status"] == "ok" and finite(r.get("rate")) is not None]
    if not ok:
        return
    others = ["method", *(f for f in swept if f not in (*IGNORED, "method"))]
    if len({tuple(r[f] for f in others) for r in ok}) > MAX_LINES:
        others = ["method"]  # too many combinations: one series per method
    averaged = [f for f in swept if f not in (*others, "rate")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in ((axes[0], "throughput_tok_s", "throughput (tok/s, decode steps)"),
                           (axes[1], "output_tok_s", "output tok/s (over makespan)")):
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
        ax.set_xlabel("rate (requests/s)")
        ax.set_ylabel(label)
        rates_all = sorted({r["rate"] for r in ok})
        if len(rates_all) > 2 and rates_all[0] > 0:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            if len(rates_all) <= 10:
                ax.set_xticks(rates_all, [f"{x:g}" for x in rates_all])
            else:
                ax.xaxis.set_major_formatter(ScalarFormatter())
    axes[0].legend(fontsize=6, ncol=2 if len(axes[0].lines) > 6 else 1)
    note = f" (mean over {', '.join(averaged)})" if averaged else ""
    fig.suptitle(f"throughput vs request rate{note}", fontsize=9)
    fig.tight_layout()
    _save(fig, "throughput_vs_rate", out)


def heatmap_k_m(rows: list[dict[str, Any]], swept: Sequence[str], metric: str,
                out: dict[str, bytes]) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    ok = [r for r in rows if r["status"] == "ok" and finite(r.get(metric)) is not None]
    if not ok:
        return
    methods = list(dict.fromkeys(r["method"] for r in ok)) if "method" in swept else [None]
    ks, ms = sorted({r["k"] for r in ok}), sorted({r["m"] for r in ok})
    fig, axes = plt.subplots(1, len(methods), figsize=(0.6 * len(ks) * len(methods) + 2.5 * len(methods),
                                                       0.45 * len(ms) + 2), squeeze=False)
    averaged = [f for f in swept if f not in ("k", "m", "method")]
    for ax, method in zip(axes[0], methods, strict=True):
        cells: dict[tuple[int, int], list[float]] = defaultdict(list)
        for r in ok:
            if method is None or r["method"] == method:
                cells[(ms.index(r["m"]), ks.index(r["k"]))].append(float(r[metric]))
        grid = np.full((len(ms), len(ks)), np.nan)
        for (i, j), values in cells.items():
            grid[i, j] = sum(values) / len(values)
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_yticks(range(len(ms)), [str(m) for m in ms])
        ax.set_xlabel("k")
        ax.set_ylabel("m")
        ax.set_title(method or metric, fontsize=9)
        if grid.size <= 120:
            middle = (np.nanmin(grid) + np.nanmax(grid)) / 2
            for (i, j), value in np.ndenumerate(grid):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=7,
                            color="k" if value > middle else "w")
        fig.colorbar(image, ax=ax, shrink=0.8)
    note = f" (mean over {', '.join(averaged)})" if averaged else ""
    fig.suptitle(f"{metric} over k and m{note}", fontsize=9)
    fig.tight_layout()
    _save(fig, f"heatmap_{metric}_k_m", out)


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
