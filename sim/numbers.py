"""One test of "is this a number" for values read from files (JSON, CSV, TOML, traces).

Why one helper: profiles, trace readers, reports and figures all take values from documents where
NaN, infinities, booleans (a bool is an int in Python) and strings must not pass as numbers; five
private copies of that test had grown apart in what they let through.
"""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> float | None:
    """`value` as a float when it is a finite real number and not a bool; otherwise None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None
