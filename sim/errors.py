"""The one error type users see for bad input: it names the field and says how to fix it."""

from __future__ import annotations


class ScenarioError(ValueError):
    """Bad user input. `str()` is a single line: `field: problem; fix: what to do`."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}; fix: {fix}")

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, str, str]]:
        # Rebuilt from its three parts, not from str(): an error raised in a worker process of
        # plan, paper or sweep must cross back to the parent intact (pickle calls cls(*args)).
        return type(self), (self.field, self.problem, self.fix)
