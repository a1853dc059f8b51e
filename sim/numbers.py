"""Small numeric helpers: one test of "is this a number", reading a number a user typed, and a
fast exact sum of small arrays.

`finite`: profiles, trace readers, reports and figures all take values from documents where NaN,
infinities, booleans (a bool is an int in Python) and strings must not pass as numbers; five
private copies of that test had grown apart in what they let through.

`isum`: the simulator sums arrays of a batch's size (tens of requests) many times per simulated
step; numpy's per-call cost (~1.5-3 us a reduction here) is most of such a sum, while Python
sums a list of a few dozen integers in a fraction of that (benchmarks/sim_speed.py).

`fixed`, `percent`: a figure printed to a few decimals; a value that is not zero but rounds to
zero ("0.0 tok/s", "KV peak 0%", an error of "+0.0%") would read as "none at all", so it prints as
the bound it lies below ("< 0.05") and only an exact zero prints as zero.

`integer`, `number`: every number typed as text (flags, --set, CSV cells) is read by these, so a
full-width '３' is refused everywhere alike instead of passing as 3 where int() happens to be used.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

SMALL = 128  # up to this many elements a Python sum of the list beats numpy's reduction


def finite(value: Any) -> float | None:
    """`value` as a float when it is a finite real number and not a bool; otherwise None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:   # an integer beyond a float's range (JSON allows 400 digits)
        return None
    return value if math.isfinite(value) else None


def isum(values: np.ndarray) -> int:
    """The exact sum of an integer (or bool) array, as a Python int."""
    if len(values) <= SMALL:
        return sum(values.tolist())
    return int(values.sum())



def fixed(value: float, digits: int = 1, *, sign: bool = False, grouping: bool = True) -> str:
    """`value` to `digits` decimals (`sign`: with its sign; `grouping`: thousands separated); a
    nonzero value that would print as zero prints as "< 0.05" ("> -0.05"), an exact zero as 0.0."""
    if value == 0:
        return f"{0:.{digits}f}"
    text = f"{value:{'+' if sign else ''}{',' if grouping else ''}.{digits}f}"
    if text.lstrip("+-") != f"{0:.{digits}f}":
        return text
    bound = f"{5 * 10.0 ** -(digits + 1):.{digits + 1}f}"
    return f"< {'+' if sign else ''}{bound}" if value > 0 else f"> -{bound}"


def percent(fraction: float, digits: int = 0, *, sign: bool = False) -> str:
    """A fraction as a percentage to `digits` decimals, by `fixed`'s rule: "< 0.5%", never "0%"
    for a share that is not zero."""
    return f"{fixed(100 * fraction, digits, sign=sign, grouping=False)}%"


def integer(text: str) -> int:
    """int(text) for a number a user typed (a --set value, a flag, a CSV cell). Python's int()
    also reads other scripts' digits ('３', '٣' as 3), which nobody means to type as a count:
    only ASCII text is a number. (argparse names a flag's type in its errors: "invalid integer
    value".)"""
    return int(_ascii(text))


def number(text: str) -> float:
    """float(text) for a number a user typed, ASCII only (see `integer`)."""
    return float(_ascii(text))


def shown(value: Any) -> str:
    """repr(value) as a one-line message quotes it, cut short past 40 characters: an integer of
    hundreds of digits (which TOML, JSON and --set all read) would swamp the line."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def _ascii(text: str) -> str:
    if not text.isascii():
        raise ValueError(f"not a number in ASCII digits: {text!r}")
    return text
