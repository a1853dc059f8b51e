"""`psdsim paper`: a preset's grid of the paper (k x datasets x methods), its numbers and figures.

The improvement figures follow MineDraft's analysis notebook (docs/reference/paper.md §6): "max vs SD"
is the largest relative gain over standard SD at a common k; "vs best baseline" compares a PSD
variant, at the k where the best of the paper's baselines (SD, PEARL) peaks, with that method's
peak. The fair comparisons the paper did not run are reported beside them, each at its own best
k: PSD's best against the memory-fair `sd-2m` (the same 2m requests in flight) and the GPU-fair
`sd-5gpu` (the same five GPUs). Throughput is the paper's (decode steps only); per-GPU
throughput divides by the GPUs a method occupies.

Each point is averaged as the paper's figures are (docs/reference/paper.md §5.2, §6; the
notebook's `avg_*` and `std_*` columns): the mean of `repeats` runs (3, the scripts'
`--num-iters` after one warm-up iteration the notebook drops), with the spread (population
standard deviation, `np.std`) of throughput, E2EL and VSR beside it. The warm-up run is not
simulated: a simulated engine carries nothing from one run to the next (no compilation, no
caches), so there is nothing to warm. Repeat i runs with seed + i, which draws new acceptance
*and* a new workload, while the paper's iterations reuse their prompts: the spread reported here
bounds the paper's from above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from psdsim.sim.catalog import Catalog
from psdsim.sim.output.plots import default_style, figure_formats, figure_legend, label_k_axis
from psdsim.sim.presets import PRESETS
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, catalog_for
from psdsim.studies.parallel import map_in_order

QUICK_REQUESTS = 200
PSD_VARIANTS = ("psd", "psd+tetris")
PAPER_BASELINES = ("sd", "pearl")
FAIR_BASELINES = ("sd-2m", "sd-5gpu")
PAPER_REPEATS = 3     # measured iterations per point in the scripts (2 for experiments 6 and 7)
# A mean of n repeats has ~1/sqrt(n) of one run's spread: 100 already give a tenth, and more
# cost time in proportion for ever smaller gains (a million repeats of the grid would take weeks).
MAX_REPEATS = 100
SUMMARY_COLUMNS = ("requests", "fits", "throughput_tok_s", "throughput_tok_s_per_gpu", "e2el_ms", "vsr",
                   "parallelization_rate", "gpus", "infeasible_reason")
SPREAD_KEYS = ("throughput_tok_s", "e2el_ms", "vsr")  # the notebook's std_gen_throughput, ...
MEAN_KEYS = ("throughput_tok_s", "throughput_tok_s_per_gpu", "e2el_ms", "vsr", "parallelization_rate")
ROW_KEYS = ("dataset", "method", "k", "extra", *SUMMARY_COLUMNS,
            *(f"{key}_std" for key in SPREAD_KEYS), "repeats")


def grid(preset: str, base: Scenario, quick: bool) -> list[Scenario]:
    """Every run of the preset's grid, with the base scenario's other fields."""
    p = PRESETS[preset]
    cat = catalog_for(base)
    runs = []
    for dataset in p.datasets:
        requests = _requests(cat, dataset, QUICK_REQUESTS if quick else base.requests)
        for method in p.methods:
            for k in p.ks:
                extra = 1 if method == "psd+tetris" else 0
                runs.append(base.replace(dataset=dataset, method=method, k=k, extra=extra,
                                         requests=requests))
    return runs


def _requests(cat: Catalog, dataset: str, wanted: int) -> int:
    limit = cat.datasets[dataset].max_requests
    return min(wanted, limit) if limit else wanted


def _row(s: Scenario) -> dict[str, Any]:
    summary = simulate(s).summary
    return {"dataset": s.dataset, "method": s.method, "k": s.k, "extra": s.extra,
            **{key: summary.get(key) for key in SUMMARY_COLUMNS}}


def _averaged(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """One point from its repeats: the mean of each metric and the spread of SPREAD_KEYS (None
    where a repeat has no value, e.g. VSR of a run that never drafted)."""
    row = dict(repeats[0])
    row["repeats"] = len(repeats)
    for key in MEAN_KEYS:
        values = [r[key] for r in repeats]
        ok = all(v is not None for v in values)
        row[key] = float(np.mean(values)) if ok else None
        if key in SPREAD_KEYS:
            row[f"{key}_std"] = float(np.std(values)) if ok else None
    return row


def run_grid(runs: Sequence[Scenario], workers: int = 1,
             progress: Callable[[float], None] | None = None,
             repeats: int = PAPER_REPEATS) -> list[dict[str, Any]]:
    """Simulate every run `repeats` times (seed, seed + 1, ...; each independent and
    deterministic) and average each point's repeats, in order; `workers` > 1 uses that many
    processes."""
    seeded = [s.replace(seed=s.seed + i) for s in runs for i in range(repeats)]
    rows = map_in_order(_row, seeded, workers, progress)
    return [_averaged(rows[i:i + repeats]) for i in range(0, len(rows), repeats)]


def _by(rows: list[dict[str, Any]], dataset: str, method: str, key: str) -> dict[int, float]:
    return {r["k"]: r[key] for r in rows
            if r["dataset"] == dataset and r["method"] == method and r["fits"] and r[key] is not None}


def improvements(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per dataset and PSD variant: best k, max gain over SD (throughput, E2EL), and the gain
    over the best baseline at its best k."""
    out: dict[str, dict[str, Any]] = {}
    for dataset in sorted({r["dataset"] for r in rows}):
        sd_thr, sd_e2el = _by(rows, dataset, "sd", "throughput_tok_s"), _by(rows, dataset, "sd", "e2el_ms")
        best_base = max(((m, k, v) for m in PAPER_BASELINES
                         for k, v in _by(rows, dataset, m, "throughput_tok_s").items()),
                        key=lambda x: x[2], default=None)
        for variant in PSD_VARIANTS:
            thr = _by(rows, dataset, variant, "throughput_tok_s")
            e2el = _by(rows, dataset, variant, "e2el_ms")
            if not thr:
                continue
            common = sorted(set(thr) & set(sd_thr))
            best_k = max(thr, key=thr.get)
            entry: dict[str, Any] = {"best_k": best_k, "best_throughput": thr[best_k],
                                     "best_throughput_std": _by(rows, dataset, variant,
                                                                "throughput_tok_s_std").get(best_k)}
            entry["max_throughput_gain_vs_sd"] = (max(thr[k] / sd_thr[k] - 1 for k in common)
                                                  if common else None)
            entry["max_e2el_gain_vs_sd"] = (max(1 - e2el[k] / sd_e2el[k] for k in common if k in e2el)
                                            if common else None)
            if best_base is not None and best_base[1] in thr:
                entry["best_baseline"] = f"{best_base[0]} (k={best_base[1]})"
                entry["gain_vs_best_baseline"] = thr[best_base[1]] / best_base[2] - 1
            for fair in FAIR_BASELINES:
                series = _by(rows, dataset, fair, "throughput_tok_s")
                if series:
                    entry[f"best_vs_{fair}"] = max(thr.values()) / max(series.values()) - 1
            out[f"{dataset}/{variant}"] = entry
    return out


# The paper's figures: (file name, row key, axis label).
PAPER_FIGURES = (("throughput_vs_k", "throughput_tok_s", "throughput (tok/s, decode steps)"),
                 ("e2el_vs_k", "e2el_ms", "E2EL (ms per request)"),
                 ("per_gpu_vs_k", "throughput_tok_s_per_gpu", "throughput per GPU (tok/s)"))


@default_style()
def figures(rows: list[dict[str, Any]], title: str) -> dict[str, bytes]:
    """Throughput vs k, E2EL vs k and the per-GPU view, one panel per dataset (PNG and SVG)."""
    out: dict[str, bytes] = {}
    for name, key, label in PAPER_FIGURES:
        fig = metric_vs_k_figure(rows, key, label, title)
        out.update({f"{name}.{fmt}": data for fmt, data in figure_formats(fig, dpi=120).items()})
    return out


def metric_vs_k_figure(rows: list[dict[str, Any]], key: str, label: str, title: str) -> Any:
    """One row key against k, a panel per dataset and a line per method, with one legend right
    of the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({r["dataset"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cols = min(len(datasets), 2)
    rows_n = -(-len(datasets) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(10, 3.2 * rows_n), squeeze=False, layout="constrained")
    for ax, dataset in zip(axes.ravel(), datasets, strict=False):
        for method in methods:
            series = _by(rows, dataset, method, key)
            if series:
                ks = sorted(series)
                style = "-o" if method in PSD_VARIANTS else "--s"
                ax.plot(ks, [series[k] for k in ks], style, ms=3, label=method)
        ax.set_title(dataset)
        label_k_axis(ax)
        ax.set_ylabel(label)
    for ax in axes.ravel()[len(datasets):]:
        ax.axis("off")
    figure_legend(fig)
    fig.suptitle(title + ("" if key != "throughput_tok_s_per_gpu" else
                          "  (per GPU: PSD/PEARL/sd-5gpu ÷ 5, SD/sd-2m ÷ 4)"), fontsize=9)
    return fig


def table(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The rows as columns for a CSV."""
    return {key: np.array([r[key] if r[key] is not None else np.nan for r in rows]
                          if key not in ("dataset", "method", "infeasible_reason", "fits")
                          else [str(r[key]) if r[key] is not None else "" for r in rows])
            for key in ROW_KEYS}
