"""Figures of a simulated run: sub-batch occupancy and KV use over time (`psdsim run --plots`),
and the helpers every psdsim figure shares (legends outside the data, psdsim's metadata)."""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from psdsim.sim.records import DECODE

# The axis labels of the scenario fields figures vary (docs/summary.md says what they count).
K_AXIS = "k (draft tokens per step)"
M_AXIS = "m (requests per verification batch)"

# Every figure names psdsim in its metadata (a later run knows its own files by the record written
# beside them, sim.output.own_files.record_file, not by this); SVGs and PDFs carry no date, and SVG ids
# are salted with a fixed string (matplotlib salts them at random), so that the same figure always
# gives the same bytes.
FIGURE_METADATA = {"png": {"Software": "psdsim"}, "svg": {"Date": None, "Creator": "psdsim"},
                   "pdf": {"Creator": "psdsim", "CreationDate": None}}
FIGURE_SETTINGS = {"svg.hashsalt": "psdsim"}


@contextmanager
def default_style() -> Iterator[None]:
    """matplotlib's own defaults plus FIGURE_SETTINGS, whatever a user's matplotlibrc (in the
    working folder, at MATPLOTLIBRC, in the config folder) says, so that the same figure is the
    same bytes everywhere; and matplotlib's log lines and warnings (a font the user's rc names
    that is not installed, a config folder it cannot write) kept off stderr. Every function that
    builds and writes psdsim's figures runs in it (as a decorator: `@default_style()`), since
    artists take their fonts and sizes when made and look fonts up again when saved."""
    log = logging.getLogger("matplotlib")
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import matplotlib
            import matplotlib.style

            with matplotlib.style.context("default"), matplotlib.rc_context(FIGURE_SETTINGS):
                yield
    finally:
        log.setLevel(level)


@default_style()
def occupancy_png(result: Any) -> bytes:
    """`occupancy_figure` as PNG bytes."""
    return figure_bytes(occupancy_figure(result), dpi=120)


def occupancy_figure(result: Any) -> Any:
    """Panels over simulated time: what the running set holds, the sub-batches' imbalance (two
    sub-batches only), the waiting queue, and the KV pools' use with preemptions marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps, s = result.steps, result.scenario
    title = f"{s.name}: {s.method}, k={s.k}, m={s.m}, {s.scheduler}"
    if "replica" in steps:   # a decoupled service: one replica's engine (the others run alike beside it)
        first = steps["replica"] == 0
        steps = {name: values[first] for name, values in steps.items()}
        title += f", replica 0 of {s.service_verifiers}"
    t = steps["start_s"]
    ratios = [2.2, 1, 1, 1.6] if s.batch_managed else [2.2, 1, 1.6]
    fig, axes = plt.subplots(len(ratios), 1, figsize=(9, 1.4 * sum(ratios) + 0.6), sharex=True,
                             height_ratios=ratios, layout="constrained")
    running, *middle, kv = axes
    _running_set(running, steps, s)
    running.set_title(title)
    if s.batch_managed:
        imbalance, queue = middle
        decode = steps["kind"] == DECODE
        if "mode" in steps:   # the adaptive mode: the steps that ran two sub-batches
            decode &= steps["mode"] == "psd"
        gap = np.abs(steps["batch1"] - steps["batch0"])
        imbalance.plot(t[decode], gap[decode], ".", ms=1.5, color="k")
        imbalance.set_ylabel("|sub-batch 1 − 0|\n(requests)")
    else:
        (queue,) = middle
    queue.step(t, steps["waiting"], where="post", color="gray", lw=0.8)
    queue.set_ylabel("waiting\n(requests)")
    _kv_use(kv, t, steps, result.kv.pools)
    for ax in axes[:-1]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    kv.set_xlabel("simulated time (s)")
    return fig


def _running_set(ax: Any, steps: Any, s: Any) -> None:
    """The running requests stacked by what they are doing, so that each sub-batch is a band of
    its own colour rather than a line drawn over the other. Under MineDraft's Batch Manager the
    step table's `batch0`/`batch1` are sub-batch 0 and 1 (flag False and True); in the ring they
    are the sub-batch verified in the step and the rest; SD and AR have one decoding batch, as
    have the adaptive mode's SD and AR steps."""
    b0, b1 = steps["batch0"], steps["batch1"]
    if s.batch_managed:
        layers = [("sub-batch 0", b0), ("sub-batch 1", b1)]
        if "mode" in steps:
            one = steps["mode"] != "psd"
            layers = [("sub-batch 0", np.where(one, 0, b0)), ("sub-batch 1", np.where(one, 0, b1)),
                      ("one batch (SD, AR steps)", np.where(one, b0 + b1, 0))]
    elif s.method in ("psd", "psd+tetris"):
        layers = [("sub-batch verified", b0), ("other sub-batches", b1)]
    else:
        layers = [("decoding", b0 + b1)]
    low = np.zeros(len(steps["start_s"]))
    for n, (name, count) in enumerate([*layers, ("prefilling", steps["prefilling"])]):
        if not count.any():
            continue
        high = low + count
        colour = "C2" if name == "prefilling" else f"C{n + (n >= 2)}"   # prefilling is green in every run
        ax.fill_between(steps["start_s"], low, high, step="post", lw=0, color=colour, label=name)
        low = high
    _extra_work(ax, steps, low.max(initial=0))
    ax.set_ylabel("running requests")
    ax.set_ylim(bottom=0)
    legend_outside(ax)


def _extra_work(ax: Any, steps: Any, top: float) -> None:
    """Marks above the bands at the steps that did work the bands do not show: the adaptive
    mode's switches (the drain, or the init step of a new split, follows) and the steps where
    pre-drafted tail tokens were thrown away, so a reader sees where a design paid its cost."""
    t = steps["start_s"]
    marks = []
    if "switch" in steps:
        marks.append(("mode switch (adaptive)", steps["switch"].astype(bool), "v", "C3"))
    wasted = steps["pre_drafts_wasted"] > 0
    if wasted.any():
        marks.append(("pre-drafts thrown away (tail)", wasted, "x", "C5"))
    if "drafts_missed" in steps:
        marks.append(("drafts missed, re-drafted (decoupled)", steps["drafts_missed"] > 0, "x", "C6"))
    for n, (name, at, marker, colour) in enumerate(marks):
        if at.any():
            ax.plot(t[at], np.full(int(at.sum()), top * (1.04 + 0.05 * n)), marker, ms=4,
                    color=colour, label=name)


def _kv_use(ax: Any, t: Any, steps: Any, pools: dict[str, int]) -> None:
    """Each KV pool's blocks in use as a fraction of the pool, preemptions marked at the top."""
    for pool, blocks in pools.items():
        ax.step(t, steps["kv_blocks"] / blocks, where="post", lw=0.8, label=f"{pool} pool")
    pre = steps["preempted"] > 0
    if pre.any():
        ax.plot(t[pre], np.ones(pre.sum()), "v", color="C3", ms=4, label="preemption")
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("KV blocks in use\n(fraction of pool)")
    legend_outside(ax)


def label_k_axis(ax: Any) -> None:
    """The x axis as k, ticked at whole numbers only (no k = 1.5)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(K_AXIS)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def legend_outside(ax: Any, below: bool = False, **options: Any) -> Any:
    """The axes' legend right of its plot area, or under its x label (`below`: for labels too
    long to sit beside it), where it covers no data; a constrained layout makes room for it."""
    where = ({"loc": "upper center", "bbox_to_anchor": (0.5, -0.16)} if below
             else {"loc": "upper left", "bbox_to_anchor": (1.01, 1)})
    return ax.legend(**where, borderaxespad=0, fontsize=8, **options)


def figure_legend(fig: Any, **options: Any) -> Any:
    """One legend for all panels, right of them and level with their middle, clear of the title
    (the figure needs layout="constrained"): each label once, from the panel that drew it first."""
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    return fig.legend(handles.values(), handles.keys(), loc="outside right center", fontsize=8, **options)


@default_style()
def figure_file(fig: Any, fmt: str, dpi: int = 110, **options: Any) -> bytes:
    """The figure as `fmt` bytes with psdsim's metadata, the same bytes for the same figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=FIGURE_METADATA[fmt], **options)
    return buffer.getvalue()


def figure_formats(fig: Any, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 110) -> dict[str, bytes]:
    """The figure as bytes in each format, closed afterwards."""
    import matplotlib.pyplot as plt

    out = {fmt: figure_file(fig, fmt, dpi) for fmt in formats}
    plt.close(fig)
    return out


def figure_bytes(fig: Any, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure as `fmt` bytes, closed afterwards."""
    return figure_formats(fig, (fmt,), dpi)[fmt]
