"""The `--intervals N` flag of run, compare, plan and sweep: its argument, its check, its draws."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from psdsim.commands.common import Progress


def add_intervals_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--intervals", type=int, metavar="N",
                   help="also simulate N draws of the uncertain inputs (catalog ranges, acceptance, "
                        "efficiencies, the seed): each figure gains its median and 90%% interval, and "
                        "the inputs are ranked by what they explain (docs/summary.md: Intervals)")


def draw_intervals(args: argparse.Namespace, s: Any, methods: Sequence[str]) -> Any:
    """The Propagation of `--intervals N` draws, or None without the flag."""
    if args.intervals is None:
        return None
    from psdsim.sim.uncertainty import propagate

    progress = Progress(not args.json)
    return propagate(s, args.intervals, methods, progress=lambda f: progress("draws", f))


def check_intervals(args: argparse.Namespace) -> None:
    """Refuse a bad N before any simulation runs."""
    if args.intervals is not None:
        from psdsim.sim.uncertainty import check_draws

        check_draws(args.intervals)
