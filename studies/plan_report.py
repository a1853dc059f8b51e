"""A plan's results for people: the ranked table, the Pareto front and the verdicts as text, and
the figures a planner wants (Pareto front, p99 latency against rate, latency CDFs at each method's
best rate, and a regime map over (k, m)) as PNG and SVG."""

from __future__ import annotations

from typing import Any

import numpy as np

from psdsim.sim.numbers import fixed
from psdsim.sim.output.csv_table import table_csv
from psdsim.sim.output.plots import K_AXIS, M_AXIS, default_style, figure_formats, legend_outside
from psdsim.sim.run import simulate
from psdsim.studies.plan import DEFAULT_WHY, OBJECTIVES, PlanSpec
from psdsim.studies.plan_verdict import ON_PSD_GPUS, PlanResult

TOP = 10


def _label(result: PlanResult, row: dict[str, Any]) -> str:
    """The configuration in the fields the space varies (the rest are the base's)."""
    varied = [k for k in result.spec.space if k != "method"]
    parts = [row["method"]] + [f"{k}={row[k]}" for k in varied if k in row and row[k] is not None]
    return " ".join(parts)


def _f(x: float | None, fmt: str = ".3g") -> str:
    """`x` in `fmt`; fixed-point formats by `fixed`, so that a small figure never reads as 0."""
    if x is None:
        return "-"
    if fmt.endswith("f"):
        return fixed(x, int(fmt[-2]), grouping="," in fmt)
    return format(x, fmt)


def objectives_lines(spec: PlanSpec) -> list[str]:
    """The objectives the plan file set, then each default it did not, with how to set it: a
    default that limits a configuration must not read as the planner's own objective."""
    def goal(key: str) -> str:
        return f"{OBJECTIVES[key][2]} <= {spec.objectives[key]:,.0f} ms"

    out = ["  objectives: " + ", ".join(goal(k) for k in spec.objectives if k not in spec.defaults)]
    for key in (k for k in spec.objectives if k in spec.defaults):
        out += [f"  default:    {goal(key)} (not set in the plan file: set [slo] {key} to change it);",
                f"              {DEFAULT_WHY[key]}"]
    return out


def plan_lines(result: PlanResult) -> list[str]:
    spec = result.spec
    out = [f"psdsim plan · {len(result.configs)} configurations ({len(result.invalid)} invalid skipped) · "
           f"{spec.base.requests} requests per run · rate to within {spec.tolerance:.0%}",
           *objectives_lines(spec),
           "  (simulated with the analytic cost model unless the base names a profile: approximate)", ""]
    priced = any(r["requests_per_usd"] for r in result.rows)
    key = "requests_per_usd" if priced else "rate_req_s_per_gpu"
    ranked = sorted(range(len(result.rows)), key=lambda i: -(result.rows[i][key] or 0))
    last = ("req/$", "requests_per_usd", ",.0f") if priced else ("tok/s/GPU", "tok_s_per_gpu", ".0f")
    out.append(f"  {'#':>2}  {'configuration':<44}{'GPUs':>5}{'req/s':>8}{'req/s/GPU':>10}{last[0]:>10}"
               f"{'p99 ms':>9}  limited by (next rate)")
    for n, i in enumerate(ranked[:TOP], 1):
        r = result.rows[i]
        front = "*" if i in result.front else " "
        out.append(f"  {n:>2}{front} {_label(result, r)[:44]:<44}{_f(r['gpus'], 'd'):>5}"
                   f"{_f(r['max_rate_req_s']):>8}{_f(r['rate_req_s_per_gpu']):>10}"
                   f"{_f(r[last[1]], last[2]):>10}{_f(r['latency_p99_ms'], ',.0f'):>9}  {r['limit']}")
    if len(ranked) > TOP:
        out.append(f"  … {len(ranked) - TOP} more in plan.csv")
    out.append("  * on the Pareto front (fewer GPUs, higher rate, lower p99 latency)")
    if result.verdicts:
        out += ["", "  when PSD's extra GPU pays off (against SD with the same fields):"]
        for v in result.verdicts:
            cfg = " ".join(f"{k}={v['config'][k]}" for k in result.spec.space
                           if v["config"].get(k) is not None)
            head = "pays off" if v["pays_off"] else "does not pay off"
            out.append(f"  - {v['method']} {cfg}: {head}. {v['why']}")
            out += [f"      {name}: {text}" for name, text in zip(v["regimes"], v["evidence"], strict=True)]
            if v["costs"]:
                out.append(f"      costs: {v['costs']}")
    for changes, why in result.invalid[:5]:
        out.append(f"  skipped {changes}: {why}")
    return out


def plan_table(rows: list[dict[str, Any]]) -> str:
    """plan.csv: one row per configuration, every field and figure a column."""
    return table_csv({key: np.array([r[key] for r in rows], dtype=object) for key in rows[0]})


def _save(fig: Any) -> dict[str, bytes]:
    return figure_formats(fig, dpi=110)


def _best_per_method(result: PlanResult) -> dict[str, int]:
    best: dict[str, int] = {}
    for i, r in enumerate(result.rows):
        m, rate = r["method"], r["max_rate_req_s"]
        if rate and (m not in best or rate > result.rows[best[m]]["max_rate_req_s"]):
            best[m] = i
    return best


@default_style()
def plan_figures(result: PlanResult) -> dict[str, bytes]:
    """File name → content: pareto, latency_vs_rate, latency_cdf and (when k and m vary)
    regime_map, each as .png and .svg."""
    import matplotlib

    matplotlib.use("Agg")
    figures = {"pareto": pareto_figure(result), "latency_vs_rate": latency_vs_rate_figure(result),
               "latency_cdf": latency_cdf_figure(result), "regime_map": regime_map_figure(result)}
    return {f"{name}.{fmt}": data for name, fig in figures.items() if fig is not None
            for fmt, data in _save(fig).items()}


def _method_colours(result: PlanResult) -> dict[str, Any]:
    """One colour per method, the same in every figure of the plan."""
    import matplotlib.pyplot as plt

    return {m: plt.cm.tab10(i % 10) for i, m in enumerate(sorted({r["method"] for r in result.rows}))}


def pareto_figure(result: PlanResult) -> Any:
    """Every configuration's sustainable rate against its GPUs, the Pareto front outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    colors = _method_colours(result)
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for i, r in enumerate(result.rows):
        if r["max_rate_req_s"]:
            on_front = i in result.front
            ax.scatter(r["gpus"], r["max_rate_req_s"], color=colors[r["method"]], s=60 if on_front else 18,
                       edgecolor="black" if on_front else "none")
    plotted = sorted({r["method"] for r in result.rows if r["max_rate_req_s"]})
    methods = [Line2D([], [], ls="", marker="o", color=colors[m], label=m) for m in plotted]
    front = Line2D([], [], ls="", marker="o", ms=8, mfc="none", mec="black", label="Pareto front")
    legend_outside(ax, handles=[*methods, front])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # whole GPUs: no tick at 4.2
    ax.set_xlabel("GPUs")
    ax.set_ylabel("max sustainable rate (requests/s)")
    ax.set_title("configurations: the rate each sustains", fontsize=10)
    return fig


def latency_vs_rate_figure(result: PlanResult) -> Any:
    """p99 latency against the rates the search tried, for each method's best configuration,
    with the p99 objective as a line."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    colors, rows = _method_colours(result), result.rows
    limit = result.spec.objectives.get("latency_p99_ms")
    fig, ax = plt.subplots(figsize=(6.5, 4.8), layout="constrained")
    for m, i in _best_per_method(result).items():
        runs = sorted((rate, sm) for rate, sm in result.searches[i].runs.items() if sm.get("fits"))
        ax.plot([r for r, _ in runs], [sm["latency_ms"]["p99"] / 1e3 for _, sm in runs], "o-",
                color=colors[m], label=_label(result, rows[i]), markersize=3)
    if limit:
        ax.axhline(limit / 1e3, color="gray", linestyle="--", linewidth=0.8,
                   label=f"p99 objective ({limit / 1e3:g} s)")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("p99 latency (s)")
    legend_outside(ax, below=True)
    ax.set_title("p99 latency against rate (each method's best configuration)", fontsize=10)
    return fig


def latency_cdf_figure(result: PlanResult) -> Any:
    """The distribution of end-to-end latency at each method's best configuration and rate."""
    import matplotlib.pyplot as plt

    colors, rows = _method_colours(result), result.rows
    fig, ax = plt.subplots(figsize=(6.5, 4.8), layout="constrained")
    for m, i in _best_per_method(result).items():
        s = result.configs[i].replace(rate=rows[i]["max_rate_req_s"])
        req = simulate(s).requests
        lat = np.sort(req["finish_s"] - req["arrival_s"])
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), color=colors[m], label=_label(result, rows[i]))
    ax.set_xlabel("end-to-end latency (s)")
    ax.set_ylabel("fraction of requests")
    legend_outside(ax, below=True)
    ax.set_title("latency CDF at each method's best configuration and rate", fontsize=10)
    return fig


def regime_map_figure(result: PlanResult) -> Any:
    """Per-GPU gain of PSD over SD on the (k, m) grid, with each cell's first regime; None unless
    k and m both vary. The colours are the gain's logarithm, centred on 1 (break-even) so that 2x
    and 0.5x are as strong, and reach the grid's extremes: a gain of 2 is not painted like 1.5."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ks, ms = result.spec.space.get("k", []), result.spec.space.get("m", [])
    if len(ks) < 2 or len(ms) < 2 or not result.verdicts:
        return None
    best = max(result.verdicts, key=lambda v: v["per_gpu_gain"] or 0)
    others = {k: v for k, v in best["config"].items() if k not in ("k", "m")}
    grid = np.full((len(ms), len(ks)), np.nan)
    names = [["" for _ in ks] for _ in ms]
    for v in result.verdicts:
        if v["method"] == best["method"] and all(v["config"].get(k) == x for k, x in others.items()):
            i, j = ms.index(v["config"]["m"]), ks.index(v["config"]["k"])
            grid[i, j] = v["per_gpu_gain"] if v["per_gpu_gain"] is not None else np.nan
            names[i][j] = v["regimes"][0] if v["regimes"] else ""
    fig, ax = plt.subplots(figsize=(1.3 * len(ks) + 2.5, 0.9 * len(ms) + 1.5), layout="constrained")
    gains = grid[grid > 0]
    extreme = max(1.5, float(np.max(gains, initial=1.0)), 1 / float(np.min(gains, initial=1.0)))
    norm = LogNorm(1 / extreme, extreme)
    im = ax.imshow(grid, cmap="RdYlGn", norm=norm, origin="lower", aspect="auto")
    for i in range(len(ms)):
        for j in range(len(ks)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}\n{names[i][j]}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(ms)), [str(m) for m in ms])
    ax.set_xlabel(K_AXIS)
    ax.set_ylabel(M_AXIS)
    who = ON_PSD_GPUS[best["method"]]   # the map is of one method: PSD's, or the adaptive mode's
    bar = fig.colorbar(im, ax=ax, label=f"{who} / SD max rate per GPU (×)")
    bar.ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    bar.ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))   # 0.5, 1, 2: not 5 × 10^-1
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(f"where {who}'s extra GPU pays off (> 1)", fontsize=10)
    return fig
