"""Capture what vLLM itself reports of a speculative-decoding run, for
tests/calibration/test_acceptance_metrics.py.

    VLLM_LOG_STATS_INTERVAL=0.5 python tests/data/vllm_cpu/capture.py DIR > DIR/server.log 2>&1

run where vllm imports (docs/engines.md, "The vLLM runner"). It runs the vLLM runner's SD
configuration (the tiny local pair, k = 3, m = 4, 16 requests of 32 + 64 tokens, temperature 1,
the temperature fix applied) and leaves three views of the same counts: vLLM's own log on stdout
(its periodic `SpecDecoding metrics` lines among the rest: the redirect is the server log), the
Prometheus text exposition a server's /metrics would give (`DIR/metrics.txt`), and the
spec-decode counters of `LLM.get_metrics()` (`DIR/counters.json`), against which the tests hold
what `psdsim calibrate` reads from the other two.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> None:
    from prometheus_client import REGISTRY, generate_latest

    from psdsim.engine.vllm.config import VllmConfig
    from psdsim.engine.vllm.runner import _fix_temperature, engine_args, model_paths, set_environment
    from psdsim.engine.vllm.summary import snapshot
    from psdsim.engine.vllm.workload import prompt_token_ids

    cfg = VllmConfig(method="sd", k=3, m=4, requests=16, output_len=64, models_dir=out / "models")
    set_environment(cfg, needs_rpc=True)
    target, draft, vocab = model_paths(cfg)
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_args(cfg, target, draft))
    _fix_temperature(llm, cfg)
    params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.output_len, ignore_eos=True)
    llm.generate([{"prompt_token_ids": ids} for ids in prompt_token_ids(cfg, vocab)], params, use_tqdm=False)
    llm.llm_engine.do_log_stats()   # the last interval's line, whatever the interval
    (out / "metrics.txt").write_bytes(generate_latest(REGISTRY))
    counters = {name: value for name, value in snapshot(llm.get_metrics()).items() if "spec_decode" in name}
    (out / "counters.json").write_text(json.dumps(counters, indent=1) + "\n")


if __name__ == "__main__":   # vLLM's engine process is spawned: the module must not run on import
    main(Path(sys.argv[1]))
