"""Figures of a simulated run: sub-batch occupancy and KV use over time (`psdsim run --plots`)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from psdsim.sim.records import DECODE


def occupancy_png(result: Any) -> bytes:
    """Two panels over simulated time: the decoding sub-batches (and prefilling and waiting
    requests), then the KV pools' use with preemptions marked. Returns PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st, s = result.steps, result.scenario
    t = st["start_s"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    if s.batch_managed:
        top.step(t, st["batch0"], where="post", label="sub-batch False", lw=0.8)
        top.step(t, st["batch1"], where="post", label="sub-batch True", lw=0.8)
        decode = st["kind"] == DECODE
        imbalance = np.abs(st["batch1"] - st["batch0"])
        top.plot(t[decode], imbalance[decode], ".", ms=1.5, color="k", label="|B1 - B0|")
    else:
        top.step(t, st["batch0"], where="post", label="decoding", lw=0.8)
    if st["prefilling"].any():
        top.step(t, st["prefilling"], where="post", label="prefilling", lw=0.8)
    top.set_ylabel("requests")
    queue = top.twinx()
    queue.step(t, st["waiting"], where="post", color="gray", alpha=0.5, lw=0.8)
    queue.set_ylabel("waiting", color="gray")
    top.legend(fontsize=8, loc="upper right")
    top.set_title(f"{s.name}: {s.method}, k={s.k}, m={s.m}, {s.scheduler}")

    kv = result.kv
    for pool, blocks in kv.pools.items():
        bottom.step(t, st["kv_blocks"] / blocks, where="post", lw=0.8, label=f"{pool} pool")
    pre = st["preempted"] > 0
    if pre.any():
        bottom.plot(t[pre], np.ones(pre.sum()), "v", color="C3", ms=4, label="preemption")
    bottom.set_ylim(0, 1.08)
    bottom.set_ylabel("KV blocks in use (fraction)")
    bottom.set_xlabel("simulated time (s)")
    bottom.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return figure_bytes(fig, dpi=120)


# Every figure names psdsim in its metadata (near the file's start), which is how a later run knows
# the file is its own to replace (sim.results.check_output_file); SVGs carry no date, so that the
# same figure always gives the same bytes.
FIGURE_METADATA = {"png": {"Software": "psdsim"}, "svg": {"Date": None, "Creator": "psdsim"},
                   "pdf": {"Creator": "psdsim"}}


def figure_formats(fig: Any, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 110) -> dict[str, bytes]:
    """The figure as bytes in each format, closed afterwards."""
    import matplotlib.pyplot as plt

    out = {}
    for fmt in formats:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=FIGURE_METADATA[fmt])
        out[fmt] = buffer.getvalue()
    plt.close(fig)
    return out


def figure_bytes(fig: Any, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure as `fmt` bytes, closed afterwards."""
    return figure_formats(fig, (fmt,), dpi)[fmt]
