"""Text and figures for `psdsim theory`: optima, ratios, published constants, tail, bridge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.numbers import percent
from psdsim.sim.output.atomic_writes import write_files
from psdsim.sim.output.plots import default_style, figure_file, legend_outside
from psdsim.studies.theory_bridge import BridgeReport
from psdsim.theory.model import FrontierModel, best_k, optimum_psd, optimum_sd, ratio
from psdsim.theory.published import A0, PUBLISHED_RATIO, paper_ratio, peak, ratio_at_least, statement_vs_model
from psdsim.theory.tail import TailEstimate


def optima_lines(m: FrontierModel, t_token: float | None, k_max: int) -> list[str]:
    sd, psd = optimum_sd(m), optimum_psd(m)
    lines = [
        f"model: f(t) = 1 - exp(-{m.alpha:g} t), V = {m.V:g}, tokens per step = {m.bonus:g} + "
        f"{m.scale:g} f(t); alpha*V = {m.alpha * m.V:.6g}",
        f"  SD   step t + V{' + ' + format(m.serial_sd, 'g') if m.serial_sd else ''}: "
        f"t* = {sd.t:.6g}, T* = {sd.T:.6g} per token",
        f"  PSD  step max(t{' + ' + format(m.comm_drafter, 'g') if m.comm_drafter else ''}, "
        f"V{' + ' + format(m.comm, 'g') if m.comm else ''})"
        f"{' + ' + format(m.serial_psd, 'g') if m.serial_psd else ''}: "
        f"t* = {psd.t:.6g}, T* = {psd.T:.6g} per token",
        f"  R = T_SD*/T_PSD* = {_ratio(ratio(m))}  ({_gain(ratio(m))})",
    ]
    if t_token:
        bs, bp = best_k(m, t_token, "sd", k_max), best_k(m, t_token, "psd", k_max)
        lines.append(f"  whole k (t = k x {t_token:g}): SD k = {bs.k} (T = {bs.T:.6g}), "
                     f"PSD k = {bp.k} (T = {bp.T:.6g}), R = {bs.T / bp.T:.6f}")
    return lines


def published_lines() -> list[str]:
    return ["published theory vs this model (reference/paper.md §3; docs/design.md §5):",
            *("  " + line for line in statement_vs_model())]


def tail_lines(est: TailEstimate, requests: int, m: int) -> list[str]:
    how = "exact" if est.exact else "lane model, sampled"
    return [f"finite pool ({requests} requests, 2m = {2 * m} seats; {how}):",
            f"  expected decode steps {est.decode_steps:.2f}, not parallelised "
            f"{est.non_parallel_steps:.2f}, parallelization rate {est.parallelization_rate:.4f}"]


def bridge_lines(rep: BridgeReport) -> list[str]:
    f = rep.fit
    lines = [
        f"frontier fit (accepted + 1 per verification vs drafting time, {f.points} k values): "
        f"alpha = {f.alpha:.6g}, F = {f.scale:.6g}, rmse {f.rmse:.3g}, "
        f"max rel error {percent(f.max_rel_error, 2)}",
        f"measured: t = k x {rep.t_token:.6g}, V = {rep.model.V:.6g}, link c = {rep.model.comm:.6g}, "
        f"serial SD {rep.model.serial_sd:.6g}, PSD {rep.model.serial_psd:.6g} (means over k)",
        "   k   sim SD  theory SD  meas.V SD    sim PSD  theory PSD  meas.V PSD   parallel",
    ]
    for i, p in enumerate(rep.measurements):
        lines.append(
            f"  {p.k:>2} {p.throughput_sd:>9.4g} {rep.predicted_throughput['sd'][i]:>10.4g} "
            f"{rep.measured_times_throughput['sd'][i]:>10.4g} {p.throughput_psd:>10.4g} "
            f"{rep.predicted_throughput['psd'][i]:>11.4g} {rep.measured_times_throughput['psd'][i]:>11.4g}"
            f" {p.parallelization_rate:>10.4f}")
    lines += [
        f"best k: theory SD {rep.predicted_best_k['sd']}, PSD {rep.predicted_best_k['psd']}; "
        f"simulated SD {rep.simulated_best_k['sd']}, PSD {rep.simulated_best_k['psd']}",
        f"PSD/SD at best k: theory {rep.predicted_ratio:.4f}, simulated {rep.simulated_ratio:.4f} "
        f"({percent(rep.ratio_error, 2, sign=True)})",
        "theory = the constant-V model; meas.V = the fitted frontier with each k's measured times.",
    ]
    return lines


def bridge_json(rep: BridgeReport) -> dict[str, Any]:
    return {
        "fit": vars(rep.fit), "model": vars(rep.model), "t_token": rep.t_token,
        "measurements": [vars(p) for p in rep.measurements],
        "predicted_best_k": rep.predicted_best_k, "closed_form_best_k": rep.closed_form_best_k,
        "simulated_best_k": rep.simulated_best_k, "predicted_ratio": rep.predicted_ratio,
        "simulated_ratio": rep.simulated_ratio, "ratio_error": rep.ratio_error,
        "predicted_throughput": rep.predicted_throughput,
        "measured_times_throughput": rep.measured_times_throughput,
    }


def _figure_bytes(fig: Any, path: Path) -> bytes:
    """A figure in the format its suffix names, with psdsim's metadata."""
    return figure_file(fig, path.suffix.lstrip(".").lower(), dpi=130, bbox_inches="tight")


# The files plot_theory writes into its folder (which may hold a user's other files).
THEORY_FIGURES = ("theory_per_token.png", "theory_per_token.svg", "theory_ratio.png", "theory_ratio.svg")


def _ratio(r: float) -> str:
    return f"{r:.6f}" if r >= 1e-3 else f"{r:.3g}"


def _gain(r: float) -> str:
    """R as the time PSD saves, or costs where it is slower (a multiple when that is large: 1 - 1/R
    printed -2.4e307% for the R of an absurd link time)."""
    if r >= 1:
        return f"PSD {percent(1 - 1 / r, 1)} less time per token"
    if r >= 0.01:
        return f"PSD {percent(1 / r - 1, 1)} more time per token"
    return f"PSD {1 / r:.3g}x the time per token"


@default_style()
def plot_theory(m: FrontierModel, out_dir: Path) -> list[Path]:
    """T_SD and T_PSD against t with their optima; R against alpha V with the published marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[tuple[str, Path, str | bytes]] = []
    for names, fig in ((THEORY_FIGURES[:2], per_token_figure(m)), (THEORY_FIGURES[2:], ratio_figure(m))):
        files += [("--plot", out_dir / name, _figure_bytes(fig, out_dir / name)) for name in names]
        plt.close(fig)
    write_files(files)   # all or none: a disk that fills after two figures leaves none of the four
    return [path for _, path, _ in files]


TIME_UNIT = "model time units"   # the unit V and t are given in; alpha is per that unit


def per_token_figure(m: FrontierModel) -> Any:
    """Time per token of SD and PSD against the drafting time per step, their optima marked."""
    import matplotlib.pyplot as plt

    sd, psd = optimum_sd(m), optimum_psd(m)
    t = np.linspace(m.V * 0.02, max(3 * m.V, 2 * sd.t, 2 * psd.t), 600)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(t, m.per_token_sd(t), label="SD: (t + V) / tokens(t)")
    ax.plot(t, m.per_token_psd(t), label="PSD: max(t, V) / tokens(t)")
    ax.plot([sd.t], [sd.T], "o", color="C0")
    ax.plot([psd.t], [psd.T], "o", color="C1")
    ax.annotate(f"t*={sd.t:.3g}", (sd.t, sd.T), textcoords="offset points", xytext=(5, 8))
    ax.annotate(f"t*={psd.t:.3g}", (psd.t, psd.T), textcoords="offset points", xytext=(5, -14))
    ax.set_xlabel(f"drafting time per step t ({TIME_UNIT})")
    ax.set_ylabel(f"time per token ({TIME_UNIT})")
    ax.set_ylim(0, float(np.percentile(m.per_token_sd(t), 90)) * 1.2)
    ax.set_title(f"alpha*V = {m.alpha * m.V:.3g}, R = {ratio(m):.3f}")
    legend_outside(ax, below=True, ncol=2)
    return fig


def ratio_figure(m: FrontierModel) -> Any:
    """R against alpha V with the published bound, ceiling, threshold and peak, and this model."""
    import matplotlib.pyplot as plt

    a = np.geomspace(0.02, 20, 500)
    r = np.array([paper_ratio(x) for x in a])
    lo, hi = ratio_at_least(PUBLISHED_RATIO)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.semilogx(a, r, label="R(alpha V), model of docs/design.md §5")
    ax.axhline(PUBLISHED_RATIO, ls="--", color="gray", label=f"published bound {PUBLISHED_RATIO}")
    ax.axhline(2.0, ls=":", color="gray", label="ceiling 2 (50%)")
    ax.axvline(A0, color="C3", label=f"published threshold a0 = {A0:.4f}")
    ax.axvspan(lo, hi, color="C2", alpha=0.12, label=f"R >= {PUBLISHED_RATIO}: [{lo:.3f}, {hi:.3f}]")
    pk = peak()
    ax.plot([pk.a], [pk.ratio], "o", color="k", label=f"peak R = {pk.ratio:.3f} at alpha V = {pk.a:.3g}")
    if m.bonus == 0 and m.scale == 1 and not (m.comm or m.comm_drafter or m.serial_psd or m.serial_sd):
        ax.plot([m.alpha * m.V], [ratio(m)], "s", color="C1", label="this model")
    ax.set_xlabel("alpha * V (dimensionless)")
    ax.set_ylabel("R = T_SD* / T_PSD* (×)")
    ax.set_ylim(1.0, 2.1)
    legend_outside(ax)
    return fig


def theory_json(m: FrontierModel, t_token: float | None, k_max: int) -> dict[str, Any]:
    sd, psd = optimum_sd(m), optimum_psd(m)
    lo, hi = ratio_at_least(PUBLISHED_RATIO)
    pk = peak()
    doc: dict[str, Any] = {
        "model": vars(m), "alpha_V": m.alpha * m.V,
        "sd": {"t": sd.t, "T": sd.T}, "psd": {"t": psd.t, "T": psd.T}, "ratio": ratio(m),
        "published": {"a0": A0, "ratio": PUBLISHED_RATIO, "model_ratio_at_a0": paper_ratio(A0),
                      "ratio_at_least_published_range": [lo, hi],
                      "peak": {"alpha_V": pk.a, "ratio": pk.ratio},
                      "statements": statement_vs_model()},
    }
    if t_token:
        doc["whole_k"] = {name: vars(best_k(m, t_token, name, k_max)) for name in ("sd", "psd")}
    return doc
