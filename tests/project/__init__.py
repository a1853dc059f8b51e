"""Tests of the repository as a whole: docs, import layout, lint, packaging, the README, benchmarks."""
