"""Where the repository's folders are, for tests in any package."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DATA = TESTS / "data"
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"
README = ROOT / "README.md"
