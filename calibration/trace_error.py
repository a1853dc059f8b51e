"""The error a trace reader raises for input it cannot use: one line saying what and what to do."""

from __future__ import annotations


class TraceError(ValueError):
    """Bad or unusable trace input. `str()` is one line; the CLI prints it and exits with 2."""


def trace_error(path: object, message: str) -> TraceError:
    """`path: message` as one line (a message spanning lines is joined with spaces)."""
    return TraceError(" ".join(f"{path}: {message}".splitlines()))
