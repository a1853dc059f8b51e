"""The reference engine: the smallest real implementation of the methods psdsim simulates.

`ar`, `sd`, `psd` (MineDraft's two sub-batches) and `pearl` run on small seeded transformers in
PyTorch, the drafter and the verifier as two OS processes pinned to their own cores, with real
KV caches and real rejection sampling; every run writes MineDraft's JSONL step trace (and,
optionally, Kineto traces) for calibration/ to read. torch is imported only when a run starts, so
the configuration can be built and checked without it.

    from psdsim.engine.reference import EngineConfig, run
    result = run(EngineConfig(method="psd", k=3, m=4, trace_dir=Path("out")))
    result.summary()["throughput_tok_s"]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psdsim.engine.reference.config import METHODS, EngineConfig, EngineConfigError, ModelConfig

if TYPE_CHECKING:
    from psdsim.engine.reference.result import EngineResult

__all__ = ["METHODS", "EngineConfig", "EngineConfigError", "EngineResult", "ModelConfig", "run"]


def run(config: EngineConfig) -> EngineResult:
    """Run the reference engine (imports torch)."""
    from psdsim.engine.reference.runner import run as _run

    return _run(config)
