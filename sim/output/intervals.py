"""What `--intervals N` adds to run and compare: each figure's median and 90% interval over the
draws, the ratios' intervals taken draw by draw, and the inputs ranked by what they explain.

The point figures above it are the scenario's own run, exactly as without --intervals; the
intervals come from the draws (sim/uncertainty.py), so a point need not be their median.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psdsim.sim.numbers import fixed, percent
from psdsim.sim.output.report import COMPARE_ROWS, LABEL, RATIO_KEYS, TABLE_WIDTH
from psdsim.sim.sensitivity import METHOD, Sensitivity, noise_floor, rank_inputs, sensitivity_csv, tornado_png
from psdsim.sim.uncertainty import (
    MIN_RANKED_DRAWS,
    Interval,
    Propagation,
    interval,
    interval_label,
    intervals_head,
    numeric_paths,
)

SHOWN_INPUTS = 5   # "what to measure first" lists this many


def interval_text(iv: Interval | None, digits: int = 1) -> str:
    """`570 (520–610)`: the median and the 90% interval; a point prints alone."""
    if iv is None:
        return "–"
    if iv.point:
        return fixed(iv.median, digits)
    return f"{fixed(iv.median, digits)} ({fixed(iv.low, digits)}–{fixed(iv.high, digits)})"


def _pair_names(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{a}/{b}" for a, b in pairs]


def headlines(prop: Propagation, methods: Sequence[str],
              pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The figures whose spread the sensitivities explain, by name: each pair's throughput ratio,
    then each method's throughput (the first is the one printed and drawn)."""
    out: dict[str, Any] = {f"{a}/{b} throughput": prop.ratio(a, b, ("throughput_tok_s",)) for a, b in pairs}
    out.update({f"{m} throughput": prop.figure(m, ("throughput_tok_s",)) for m in methods})
    return out


def sensitivities(prop: Propagation, methods: Sequence[str],
                  pairs: Sequence[tuple[str, str]]) -> list[Sensitivity]:
    rows: list[Sensitivity] = []
    for name, outcome in headlines(prop, methods, pairs).items():
        rows += rank_inputs(name, prop.values, prop.inputs, outcome)
    return rows


def intervals_json(prop: Propagation, methods: Sequence[str],
                   pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Every numeric figure's interval per method, the ratios', the inputs and their ranks."""
    first = next((sm for draw in prop.summaries for sm in draw.values() if sm["fits"]), None)
    paths = numeric_paths(first) if first is not None else []   # no draw fits: no figure to give
    figures = {m: {".".join(p): _json(interval(prop.figure(m, p))) for p in paths} for m in methods}
    ratios = {f"{a}/{b}": {"_".join(p): _json(interval(prop.ratio(a, b, p))) for p in RATIO_KEYS}
              for a, b in pairs}
    return {
        **intervals_head(prop.draws),
        "fits": {m: prop.fits(m) for m in methods},
        "inputs": [{"name": i.name, "low": i.low, "high": i.high, "why": i.why} for i in prop.inputs],
        "figures": figures, "ratios": ratios,
        "sensitivity": {"method": METHOD, "noise_floor": noise_floor(prop.draws),
                        **ranks_json(sensitivities(prop, methods, pairs))},
    }


def _json(iv: Interval | None) -> dict[str, float] | None:
    return iv.as_json() if iv is not None else None


def ranks_json(rows: Sequence[Sensitivity]) -> dict[str, Any]:
    """The ranks of the figures ranked (given in MIN_RANKED_DRAWS draws or more), and whether
    there are any: below that, the text ranks nothing, and neither does the JSON."""
    ranks = [{"figure": r.figure, "input": r.input.name, "rho": r.rho, "draws": r.draws}
             for r in rows if r.ranked]
    return {"ranked": bool(ranks), "ranks": ranks}


def sensitivity_files(rows: Sequence[Sensitivity], tornado: str | None) -> dict[str, str | bytes]:
    """sensitivity.csv of the ranked rows and the tornado of the first figure (at `tornado`,
    unless None) where it is ranked: none of either where nothing is, as the text ranks nothing."""
    ranked = [r for r in rows if r.ranked]
    if not ranked:
        return {}
    files: dict[str, str | bytes] = {"sensitivity.csv": sensitivity_csv(ranked)}
    first = [r for r in rows if r.figure == rows[0].figure]
    if tornado is not None and first[0].ranked:
        files[tornado] = tornado_png(first, first[0].figure)
    return files


def interval_files(prop: Propagation, methods: Sequence[str],
                   pairs: Sequence[tuple[str, str]]) -> dict[str, str | bytes]:
    """intervals.json, and sensitivity.csv and the tornado figure of the first headline where
    they rank anything."""
    return {"intervals.json": json.dumps(intervals_json(prop, methods, pairs), indent=2) + "\n",
            **sensitivity_files(sensitivities(prop, methods, pairs), "sensitivity.png")}


def format_intervals(prop: Propagation, methods: Sequence[str], pairs: Sequence[tuple[str, str]]) -> str:
    """The interval table (methods, then pairs: as a second table when one would be too wide) and
    what to measure first."""
    cells = {m: [interval_text(interval(prop.figure(m, path)), digits) for _, path, digits, _ in COMPARE_ROWS]
             for m in methods}
    cells.update({f"{a}/{b}": [interval_text(interval(prop.ratio(a, b, path)), 2) if path in RATIO_KEYS
                               else "" for _, path, _, _ in COMPARE_ROWS] for a, b in pairs})
    lines = [f"  intervals: median ({interval_label(prop.draws)}) over {prop.draws} draws of "
             f"{len(prop.inputs)} uncertain inputs",
             "  (a Latin hypercube, each input uniform over its range)"]
    joined = _columns(cells)
    if max(map(len, joined)) <= TABLE_WIDTH:
        lines += joined
    else:
        lines += [*_columns({m: cells[m] for m in methods}), "",
                  *_columns({n: cells[n] for n in _pair_names(pairs)})]
    lines += [f"  note: {m} fits in {prop.fits(m)} of {prop.draws} draws" for m in methods
              if prop.fits(m) < prop.draws]
    return "\n".join([*lines, "", *measure_first(sensitivities(prop, methods, pairs), prop.draws)])


def _columns(cells: dict[str, list[str]]) -> list[str]:
    """COMPARE_ROWS' labels, then one right-aligned column per name; rows left empty are dropped."""
    widths = {name: max(len(name), *map(len, column)) + 2 for name, column in cells.items()}
    head = "  " + " " * LABEL + "".join(f"{name:>{w}}" for name, w in widths.items())
    rows = []
    for i, (label, *_rest) in enumerate(COMPARE_ROWS):
        row = [cells[name][i] for name in cells]
        if any(row):
            rows.append("  " + f"{label:<{LABEL}}" + "".join(f"{c:>{widths[n]}}" for c, n in zip(row, cells,
                                                                                                   strict=True)))
    return [head, *rows]


def measure_first(rows: Sequence[Sensitivity], draws: int) -> list[str]:
    """The inputs that explain most of the first headline's spread, largest first. The seed is not
    one to measure: its rho, pure chance, is quoted as the yardstick of what chance gives. A
    figure some draws do not give (a method that does not fit them) is ranked over those it is in."""
    first = [r for r in rows if r.figure == rows[0].figure]
    given = first[0].draws
    head = f"  what to measure first, for {first[0].figure}"
    if not first[0].ranked:
        if given < draws:
            return [f"{head}: not ranked over {given} draws (of {draws}, the rest do not give it)",
                    f"  (a ranking needs the figure in {MIN_RANKED_DRAWS} draws or more)"]
        return [f"{head}: not ranked over {given} draws", "  (chance alone gives |rho| near 1 at "
                f"this N; rank with --intervals {MIN_RANKED_DRAWS} or more)"]
    seed = next((r for r in first if r.input.field == "seed"), None)
    chance = f"; the seed's own, chance alone: {seed.rho:+.2f}" if seed is not None else ""
    over = f"{given} draws" + (f" (of {draws}, the rest do not give it)" if given < draws else "")
    lines = [f"{head}: {METHOD} rho over {over}",
             "  (rho² = the share of its spread an input explains alone; one input in ten passes "
             f"|rho| = {noise_floor(given):.2f}", f"  by chance at this N{chance})"]
    measurable = [r for r in first if r.input.field != "seed"]
    for i, r in enumerate(measurable[:SHOWN_INPUTS], 1):
        lines += [f"    {i}. {r.input.name:<48} rho {r.rho:+.2f}  rho² {percent(r.share):>4}  "
                  f"range {r.input.low:.4g}–{r.input.high:.4g}", f"       {r.input.why}"]
    return lines
