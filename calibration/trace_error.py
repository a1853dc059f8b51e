"""The error a trace reader raises for input it cannot use: where, what is wrong, what to do.

A TraceError is a ScenarioError (the one error type users see), so the CLI prints it as its one
line, `WHERE: problem; fix: what to do`, without taking a message apart: a path that holds ": "
or "; " cannot garble it, and a message without a path still gets its own fix.
"""

from __future__ import annotations

from psdsim.sim.errors import ScenarioError

TRACE_FIX = "give a trace of a kind `psdsim calibrate --help` names"


class TraceError(ScenarioError):
    """Bad or unusable trace input. `where` is the trace (a path, or `path line N`), or the option
    or set of traces at fault; each part is joined onto one line."""

    def __init__(self, where: object, problem: str, fix: str = TRACE_FIX) -> None:
        super().__init__(*(" ".join(str(part).split()) for part in (where, problem, fix)))
