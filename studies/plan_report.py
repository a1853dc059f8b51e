"""A plan's results for people: the ranked table, the Pareto front and the verdicts as text, and
the figures a planner wants (Pareto front, p99 latency against rate, latency CDFs at each method's
best rate, and a regime map over (k, m)) as PNG and SVG."""

from __future__ import annotations

from typing import Any

import numpy as np
from psdsim.sim.output.plots import figure_formats
from psdsim.sim.output.results import table_csv
from psdsim.sim.run import simulate
from psdsim.studies.plan import DEFAULT_WHY, OBJECTIVES, PlanSpec
from psdsim.studies.plan_verdict import PlanResult

TOP = 10


def _label(result: PlanResult, row: dict[str, Any]) -> str:
    """The configuration in the fields the space varies (the rest are the base's)."""
    varied = [k for k in result.spec.space if k != "method"]
    parts = [row["method"]] + [f"{k}={row[k]}" for k in varied if k in row and row[k] is not None]
    return " ".join(parts)


def _f(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


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
            cfg = " ".join(f"{k}={v['config'][k]}" for k in result.spec.space if k in v["config"])
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


def plan_figures(result: PlanResult) -> dict[str, bytes]:
    """File name → content: pareto, latency_vs_rate, latency_cdf and (when k and m vary)
    regime_map, each as .png and .svg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    files: dict[str, bytes] = {}
    rows = result.rows
    methods = sorted({r["method"] for r in rows})
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, r in enumerate(rows):
        if r["max_rate_req_s"]:
            on_front = i in result.front
            ax.scatter(r["gpus"], r["max_rate_req_s"], color=colors[r["method"]], s=60 if on_front else 18,
                       edgecolor="black" if on_front else "none", label=r["method"])
    handles = {h.get_label(): h for h in ax.collections}
    ax.legend(handles.values(), handles.keys(), fontsize=8)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("max sustainable rate (req/s)")
    ax.set_title("configurations (outlined: Pareto front)", fontsize=10)
    files.update({f"pareto.{k}": v for k, v in _save(fig).items()})

    best = _best_per_method(result)
    limit = result.spec.objectives.get("latency_p99_ms")
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, i in best.items():
        runs = sorted((rate, sm) for rate, sm in result.searches[i].runs.items() if sm.get("fits"))
        ax.plot([r for r, _ in runs], [sm["latency_ms"]["p99"] / 1e3 for _, sm in runs], "o-",
                color=colors[m], label=_label(result, rows[i]), markersize=3)
    if limit:
        ax.axhline(limit / 1e3, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("p99 latency (s)")
    ax.legend(fontsize=7)
    ax.set_title("p99 latency against rate (each method's best configuration)", fontsize=10)
    files.update({f"latency_vs_rate.{k}": v for k, v in _save(fig).items()})

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, i in best.items():
        s = result.configs[i].replace(rate=result.rows[i]["max_rate_req_s"])
        req = simulate(s).requests
        lat = np.sort(req["finish_s"] - req["arrival_s"])
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), color=colors[m], label=_label(result, rows[i]))
    ax.set_xlabel("end-to-end latency (s)")
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=7)
    ax.set_title("latency CDF at each method's best configuration and rate", fontsize=10)
    files.update({f"latency_cdf.{k}": v for k, v in _save(fig).items()})

    regime = _regime_map(result)
    if regime is not None:
        files.update({f"regime_map.{k}": v for k, v in regime.items()})
    return files


def _regime_map(result: PlanResult) -> dict[str, bytes] | None:
    """Per-GPU gain of PSD over SD on the (k, m) grid, with each cell's first regime."""
    import matplotlib.pyplot as plt

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
    fig, ax = plt.subplots(figsize=(1.3 * len(ks) + 2, 0.9 * len(ms) + 1.5))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, origin="lower", aspect="auto")
    for i in range(len(ms)):
        for j in range(len(ks)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}\n{names[i][j]}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(ms)), [str(m) for m in ms])
    ax.set_xlabel("k")
    ax.set_ylabel("m")
    fig.colorbar(im, ax=ax, label="PSD / SD rate per GPU")
    ax.set_title("where PSD's extra GPU pays off (> 1)", fontsize=10)
    fig.tight_layout()
    return _save(fig)
