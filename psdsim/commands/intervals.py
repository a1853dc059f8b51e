"""The `--intervals N` flag of run, compare, plan and sweep: its argument and its draws."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from psdsim.commands.common import Progress


def _draws(text: str) -> int:
    """--intervals' value, refused at parse time (before any simulation) unless a count in range."""
    from psdsim.sim.numbers import integer
    from psdsim.sim.uncertainty import MAX_DRAWS

    try:
        if not text.isdigit():   # integer() alone would also read ' 3 ' and '1_0'
            raise ValueError(text)
        draws = integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of draws, got {text!r}") from None
    if not 2 <= draws <= MAX_DRAWS:
        raise argparse.ArgumentTypeError(f"must be 2..{MAX_DRAWS} draws, got {draws} (each draw is a "
                                         "full simulation; write e.g. --intervals 32)")
    return draws


def add_intervals_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--intervals", type=_draws, metavar="N",
                   help="also simulate N draws of the uncertain inputs (catalog ranges, acceptance, "
                        "efficiencies, a fitted profile's bootstrap, the seed): each figure gains its "
                        "median and 90%% interval, and the inputs are ranked by what they explain "
                        "(docs/summary.md: Intervals)")


def draw_intervals(args: argparse.Namespace, s: Any, methods: Sequence[str]) -> Any:
    """The Propagation of `--intervals N` draws, or None without the flag."""
    if args.intervals is None:
        return None
    from psdsim.studies.intervals import propagate

    progress = Progress(not args.json, total=args.intervals, unit="draws")
    return propagate(s, args.intervals, methods, progress=lambda f: progress("draws", f))
