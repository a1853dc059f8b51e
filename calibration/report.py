"""The fit report `psdsim calibrate` prints, and its measured-vs-fitted figure."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from psdsim.calibration.calibrate import Calibration
from psdsim.calibration.fit import BOOTSTRAP_RESAMPLES
from psdsim.sim.numbers import percent
from psdsim.sim.output.plots import default_style, figure_bytes
from psdsim.sim.profile_schema import FEATURES, TERMS

# What a coefficient is per (features without an entry are seconds per pass, message or step).
_PER = {"pass_tokens": "/token", "tokens": "/token", "pass_ctx": "/cached token", "ctx": "/cached token",
        "pairs": "/pair", "bytes": "/byte", "positions": "/position"}


def _seconds(x: float) -> str:
    if x == 0:
        return "0 s"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"), (1e-12, "ps")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.3g} s"


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else percent(x, 2)


def report_lines(c: Calibration) -> list[str]:
    out = []
    for path, info in c.traces:
        out.append(f"trace {path.name}: {info.format} {info.version}".rstrip())
        if info.gpus:
            out.append("  GPUs: " + ", ".join(f"{d}={n}" for d, n in sorted(info.gpus.items())))
        if info.kernel_s > 0:
            out.append(f"  kernel time inside matched ranges: {_pct(info.attributed_s / info.kernel_s)} of "
                       f"{_seconds(info.kernel_s)} (the rest is work the range rules do not name)")
    out.append(f"samples: {len(c.samples)} ({', '.join(f'{k} {v}' for k, v in _kinds(c).items())}); "
               + _timing(c))
    out.append("")
    out.append(f"{'term':<14}{'samples':>8}{'dropped':>8}{'MAPE':>9}{'CV MAPE':>9}  coefficients")
    for name in TERMS:
        fit = c.fits.get(name)
        if fit is None:
            out.append(f"{name:<14}{'-':>8}{'-':>8}{'-':>9}{'-':>9}  not fitted: analytic model used")
            continue
        t = fit.term
        coefs = ", ".join(f"{f} {_seconds(v)}{_PER.get(f, '')}"
                          for f, v in zip(FEATURES[name], t.coef, strict=False) if f not in t.fixed_features)
        out.append(f"{name:<14}{t.samples:>8}{sum(t.dropped.values()):>8}{_pct(t.mape):>9}"
                   f"{_pct(t.cv_mape):>9}  {coefs}")
    out += _uncertainty_lines(c)
    dropped = c.dropped.copy()
    for fit in c.fits.values():
        dropped.update({f"{fit.term.name}: {why}": n for why, n in fit.term.dropped.items()})
    if dropped:
        out.append("")
        out.append("dropped samples:")
        out += [f"  {n:>7}  {why}" for why, n in dropped.most_common()]
    acc = c.profile.acceptance
    if acc:
        line = (f"acceptance: VSR {acc['vsr']:.3f}, mean accepted {acc['mean_accepted']:.3f} per request "
                f"and step at k={acc['k']:.0f}")
        if "per_token" in acc:
            line += f"; per-token rate {acc['per_token']:.3f} (use --set acceptance={acc['per_token']:.3f})"
        out += ["", line]
    if c.notes:
        out += ["", "notes:"] + [f"  {n}" for n in dict.fromkeys(c.notes)]
    return out


def _uncertainty_lines(c: Calibration) -> list[str]:
    """One line per fitted term: the 90% interval of the mean time its bootstrap vectors price
    its samples at, or why it has none."""
    boot = c.profile.bootstrap
    if boot is None:
        return []
    out = ["", f"fit uncertainty: the mean time of each term's samples, as fitted and over "
               f"{BOOTSTRAP_RESAMPLES} bootstrap resamples (90% interval; seed {boot.seed})"]
    for name in TERMS:
        fit = c.fits.get(name)
        if fit is None:
            continue
        point = fit.mean_time(fit.term.coef)
        if name not in boot.terms:
            out.append(f"  {name:<14}{_seconds(point)}: {boot.too_few[name]} samples, too few to resample "
                       "(no interval)")
            continue
        low, high = np.quantile([fit.mean_time(v) for v in boot.terms[name]], (0.05, 0.95))
        out.append(f"  {name:<14}{_seconds(point)} ({_seconds(float(low))} to {_seconds(float(high))})")
    return out


def _timing(c: Calibration) -> str:
    """What a sample's duration is: GPU time for GPU traces, the engine's own timers otherwise."""
    if all(info.format == "minedraft" for _, info in c.traces):
        return "times: the engine's own step timers"
    span = c.profile.source.get("timing") == "span"
    return "times: " + ("first to last GPU op" if span else "GPU busy time (union of a phase's ops)")


def _kinds(c: Calibration) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in c.samples:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    return counts


@default_style()
def fit_figure(c: Calibration, fmt: str = "png") -> bytes:
    """`measured_vs_fitted_figure` as `fmt` bytes."""
    return figure_bytes(measured_vs_fitted_figure(c), fmt, dpi=110)


def measured_vs_fitted_figure(c: Calibration) -> Any:
    """Measured against fitted time, one panel per fitted term, with the y = x line (named in
    the title: a point on it is a sample the profile prices exactly)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in TERMS if n in c.fits]
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows + 0.4), squeeze=False,
                             layout="constrained")
    timing = c.profile.source.get("timing", "busy")
    for ax, name in zip(axes.flat, names, strict=False):
        fit = c.fits[name]
        measured = [1e3 * (s.span_s if timing == "span" else s.duration_s) for s in fit.kept]
        fitted = 1e3 * fit.predicted
        ax.scatter(measured, fitted, s=4, alpha=0.5)
        lo, hi = min(min(measured), fitted.min()), max(max(measured), fitted.max())
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        ax.set_title(f"{name}  (MAPE {_pct(fit.term.mape)})", fontsize=9)
        ax.set_xlabel("measured (ms)", fontsize=8)
        ax.set_ylabel("fitted (ms)", fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"measured against fitted time per sample, {_timing(c)}; black line: fitted = measured",
                 fontsize=9)
    return fig
