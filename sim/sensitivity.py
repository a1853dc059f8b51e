"""Which uncertain input to measure first: each input's rank correlation with a headline figure.

The index is Spearman's rank correlation rho between an input's drawn values and the figure over
the draws, and rho² the share of the figure's spread that input explains on its own if the figure
is monotone in it. It is used rather than a variance-based (Sobol) index because those need
thousands of draws for two dozen inputs, while --intervals runs tens: with N = 32 a |rho| below
about 0.35 cannot be told from zero, which the report says. What rho² does not cover (1 - the sum,
when the inputs are independent, as Latin-hypercube draws nearly are) is the seed's noise, which
is not monotone in the seed, and interactions between inputs.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from psdsim.sim.uncertain_inputs import SEED_INPUT, UncertainInput
from psdsim.sim.uncertainty import MIN_RANKED_DRAWS

METHOD = "Spearman rank correlation"


@dataclass(frozen=True)
class Sensitivity:
    figure: str
    input: UncertainInput
    rho: float          # 0 where the input or the figure does not vary
    draws: int          # the draws the figure has a value in, which rho is taken over

    @property
    def share(self) -> float:
        return self.rho * self.rho

    @property
    def ranked(self) -> bool:
        """Whether rho means anything: over fewer draws chance alone gives |rho| near 1, and a
        figure no draw gives (a run of one-token outputs has no decode throughput) has no rho."""
        return self.draws >= MIN_RANKED_DRAWS


def noise_floor(draws: int) -> float:
    """|rho| that uncorrelated draws exceed one time in ten (two-sided, normal approximation)."""
    return 1.645 / math.sqrt(max(draws - 1, 1))


def rank_inputs(figure: str, values: np.ndarray, inputs: Sequence[UncertainInput],
                outcome: np.ndarray) -> list[Sensitivity]:
    """The inputs by |rho| with the figure, largest first (draws where it is NaN left out)."""
    from scipy.stats import spearmanr

    ok = np.isfinite(outcome)
    out = []
    for j, inp in enumerate(inputs):
        x, y = values[ok, j], outcome[ok]
        varies = x.size > 2 and np.ptp(x) > 0 and np.ptp(y) > 0
        rho = float(spearmanr(x, y).statistic) if varies else 0.0
        out.append(Sensitivity(figure, inp, rho if math.isfinite(rho) else 0.0, int(ok.sum())))
    return sorted(out, key=lambda r: (-abs(r.rho), r.input.name))


def sensitivity_csv(rows: Sequence[Sensitivity]) -> str:
    """The rows as a table, draws included; callers pass only ranked rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["figure", "input", "spearman_rho", "rho_squared", "draws", "low", "high", "why"])
    for r in rows:
        writer.writerow([r.figure, r.input.name, f"{r.rho:.4f}", f"{r.share:.4f}", r.draws,
                         repr(r.input.low), repr(r.input.high), r.input.why])
    return buffer.getvalue()


def tornado_png(rows: Sequence[Sensitivity], title: str, top: int = 12) -> bytes:
    """Horizontal bars of rho for the `top` inputs of one figure, largest on top, with the noise
    floor of the draws it was ranked over marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from psdsim.sim.output.plots import figure_file

    shown = list(rows[:top])[::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(shown) + 1.6))
    colours = ["#888888" if r.input.name == SEED_INPUT else "#c0392b" if r.rho < 0 else "#2471a3"
               for r in shown]
    ax.barh(range(len(shown)), [r.rho for r in shown], color=colours)
    ax.set_yticks(range(len(shown)), [r.input.name for r in shown], fontsize=7)
    draws = rows[0].draws
    floor = noise_floor(draws)
    for x in (-floor, floor) if floor < 1 else ():   # |rho| <= 1: a floor past it marks nothing
        ax.axvline(x, color="black", linestyle=":", linewidth=0.8)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlim(-1.0, 1.0)
    ax.set_xlabel(f"Spearman rho over {draws} draws (dotted: the noise floor at this N)", fontsize=8)
    ax.set_title(f"what to measure first: {title}", fontsize=9)
    png = figure_file(fig, "png", bbox_inches="tight")
    plt.close(fig)
    return png
