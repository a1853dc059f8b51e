"""Where vLLM V1's speculative step spends its host time on a CPU, by part, as k grows.

The vLLM-on-CPU validation (docs/engines.md, "psdsim validate --engine vllm") prices an SD step
from AR timings, and AR cannot show what only SD does. This runs the runner's tiny Qwen3 pair
(engine/vllm) in AR and in SD at k = 1..5, in one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, so
the engine core and the worker run here), and times vLLM's own functions around every step:

  step           EngineCore.step: one engine step, everything below
  schedule       Scheduler.schedule
  update         Scheduler.update_from_output (accepting tokens, finishing requests)
  prepare        the runner's _update_states + _prepare_inputs (the target pass's inputs)
  target fwd     the target's forward and LM head (Qwen3ForCausalLM.forward + compute_logits)
  sample         the runner's _sample: the sampler (AR) or the rejection sampler (SD)
  draft 1st fwd  the draft's first pass (over the verified window: up to k+1 tokens a request)
  draft next fwd the draft's other k-1 passes (one token a request each)
  draft sample   the proposer's LM head and sampling of each draft token
  draft meta     the proposer's attention-metadata builds and position updates
  draft other    the rest of propose_draft_token_ids (its input preparation, copies)
  outputs        OutputProcessor.process_outputs (outside the engine core: detokenizing, stops)

Each figure is host wall time per engine step (ms), the mean over the measured generate; the
model's passes run on the same CPU, so "fwd" rows are the passes themselves. `--torch` adds one
torch-profiler run per configuration (vLLM's scopes on, CPU activity: a CPU has no device rows)
and prints its operators with the most self time per step.

    /work/venv-vllmcpu/bin/python benchmarks/vllm_v1_sd_profile.py [--requests 8 --output-len 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROWS = ("step", "schedule", "update", "prepare", "target fwd", "sample", "draft 1st fwd",
        "draft next fwd", "draft sample", "draft meta", "draft other", "outputs")


@dataclass
class Clock:
    """Wall seconds and calls per part; `drafting` tells the model's forward whose pass it is."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    each: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    drafting: bool = False
    draft_passes: int = 0
    on: bool = False
    scopes: bool = False

    def add(self, name: str, seconds: float) -> None:
        if self.on:
            self.seconds[name] += seconds
            self.calls[name] += 1
            self.each[name].append(seconds)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.each.clear()


CLOCK = Clock()


def _scope(name: str) -> Any:
    if not CLOCK.scopes:
        return nullcontext()
    import torch

    return torch.profiler.record_function(f"psdsim: {name}")


def timed(owner: type, method: str, name: Callable[[], str] | str) -> None:
    """Replace `owner.method` by itself timed under `name` (or the name that callable gives now)."""
    original = getattr(owner, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        label = name() if callable(name) else name
        began = time.perf_counter()
        with _scope(label):
            result = original(*args, **kwargs)
        CLOCK.add(label, time.perf_counter() - began)
        return result

    setattr(owner, method, wrapper)


def _forward_name() -> str:
    if not CLOCK.drafting:
        return "target fwd"
    CLOCK.draft_passes += 1
    return "draft 1st fwd" if CLOCK.draft_passes == 1 else "draft next fwd"


def _logits_name() -> str:
    """The draft's LM head runs inside _sample_draft_tokens, so it is "draft sample" already."""
    return "draft logits" if CLOCK.drafting else "target fwd"


def _proposing(owner: type, method: str) -> None:
    """Time the proposer as "draft other" and mark its passes as the draft's while it runs."""
    original = getattr(owner, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CLOCK.drafting, CLOCK.draft_passes = True, 0
        began = time.perf_counter()
        try:
            with _scope("propose"):
                return original(*args, **kwargs)
        finally:
            CLOCK.drafting = False
            CLOCK.add("propose", time.perf_counter() - began)

    setattr(owner, method, wrapper)


def instrument() -> None:
    """Wrap the vLLM functions each row names (in this process: the engine core runs here)."""
    from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    timed(EngineCore, "step", "step")
    timed(EngineCore, "step_with_batch_queue", "step")
    timed(Scheduler, "schedule", "schedule")
    timed(Scheduler, "update_from_output", "update")
    timed(GPUModelRunner, "_update_states", "prepare")
    timed(GPUModelRunner, "_prepare_inputs", "prepare")
    timed(GPUModelRunner, "_sample", "sample")
    timed(Qwen3ForCausalLM, "forward", _forward_name)
    timed(Qwen3ForCausalLM, "compute_logits", _logits_name)
    timed(SpecDecodeBaseProposer, "_sample_draft_tokens", "draft sample")
    for method in ("build_per_group_and_layer_attn_metadata", "_update_positions_dependent_metadata"):
        timed(SpecDecodeBaseProposer, method, "draft meta")
    _proposing(GPUModelRunner, "propose_draft_token_ids")
    timed(OutputProcessor, "process_outputs", "outputs")


def per_step(seconds: dict[str, float], steps: int) -> dict[str, float]:
    """ms per engine step for every row; "draft other" is propose less the parts inside it."""
    ms = {row: 1e3 * seconds.get(row, 0.0) / steps for row in ROWS}
    inside = ms["draft 1st fwd"] + ms["draft next fwd"] + ms["draft sample"] + ms["draft meta"]
    ms["draft other"] = 1e3 * seconds.get("propose", 0.0) / steps - inside
    return ms


def run_one(llm: Any, prompts: list[Any], params: Any) -> tuple[dict[str, float], int, float]:
    """(ms per step by row, engine steps, wall ms per step) for one measured generate."""
    CLOCK.reset()
    CLOCK.on = True
    began = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - began
    CLOCK.on = False
    steps = CLOCK.calls["step"]
    return per_step(dict(CLOCK.seconds), steps), steps, 1e3 * wall / steps


def torch_top(llm: Any, prompts: list[Any], params: Any, top: int) -> list[tuple[str, float]]:
    """The operators (and vLLM scopes) with the most self CPU time per engine step, one profiled run."""
    import torch

    CLOCK.scopes = True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _, steps, _ = run_one(llm, prompts, params)
    CLOCK.scopes = False
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [(e.key, e.self_cpu_time_total / 1e3 / steps) for e in rows]


def measure(cfg: Any, repeats: int, profile_torch: bool) -> dict[str, Any]:
    """Build one engine for `cfg`, warm it up, time `repeats` generates; the rows' medians."""
    from psdsim.engine.vllm.runner import _fix_temperature, engine_args, model_paths, set_environment
    from psdsim.engine.vllm.workload import prompt_token_ids

    set_environment(cfg, cfg.method == "sd")
    target, draft, vocab = model_paths(cfg)
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_args(cfg, target, draft))
    if cfg.method == "sd":
        _fix_temperature(llm, cfg)
    params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.output_len, ignore_eos=True)
    prompts = [{"prompt_token_ids": ids} for ids in prompt_token_ids(cfg, vocab)]
    llm.generate(prompts[:1], SamplingParams(temperature=cfg.temperature, max_tokens=8, ignore_eos=True),
                 use_tqdm=False)
    runs = [run_one(llm, prompts, params) for _ in range(repeats)]
    result: dict[str, Any] = {
        "ms": {row: sorted(r[0][row] for r in runs)[len(runs) // 2] for row in ROWS},
        "steps": sorted(r[1] for r in runs)[len(runs) // 2],
        "wall": sorted(r[2] for r in runs)[len(runs) // 2],
    }
    if profile_torch:
        result["torch"] = torch_top(llm, prompts, params, top=12)
    llm.llm_engine.engine_core.shutdown()
    del llm
    return result


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    names = list(results)
    lines = [f"{'ms per engine step':<16}" + "".join(f"{n:>9}" for n in names)]
    for row in ROWS:
        lines.append(f"{row:<16}" + "".join(f"{results[n]['ms'][row]:>9.2f}" for n in names))
    lines.append(f"{'wall / step':<16}" + "".join(f"{results[n]['wall']:>9.2f}" for n in names))
    lines.append(f"{'engine steps':<16}" + "".join(f"{results[n]['steps']:>9d}" for n in names))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--torch", action="store_true", help="add one torch-profiler run per configuration")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from psdsim.engine.vllm.config import VllmConfig

    instrument()
    base = VllmConfig(method="ar", m=args.m, requests=args.requests, output_len=args.output_len,
                      models_dir=args.models_dir)
    configs = {"ar": base} | {f"sd k={k}": replace(base, method="sd", k=k) for k in args.k}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    results = {}
    for name, cfg in configs.items():
        results[name] = measure(cfg, args.repeats, args.torch)
        print(f"{name}: {results[name]['wall']:.2f} ms per step, load {os.getloadavg()[0]:.2f}", flush=True)
    print("\n".join(table(results)))
    if args.torch:
        for name, res in results.items():
            print(f"\n{name}: most self CPU time, ms per engine step (torch profiler)")
            print("\n".join(f"  {ms:8.3f}  {key}" for key, ms in res["torch"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
