"""One engine run: pin the driver, start the verifier where the method has one, warm both models
up, run the steps, write the traces, and put the calling process back as it was.

Cores: with two or more CPUs available the driver (scheduler, draft model, rejection sampling)
runs on the first and the verifier process on the second, one thread each; with one CPU both
share it (PSD then cannot overlap, and its numbers say so).
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch

from psdsim.engine.reference.config import EngineConfig, EngineConfigError
from psdsim.engine.reference.footprint import check_memory
from psdsim.engine.reference.methods import Engine
from psdsim.engine.reference.model import build_draft, build_target
from psdsim.engine.reference.result import EngineResult
from psdsim.engine.reference.schedule import Scheduler, workload
from psdsim.engine.reference.trace import write_jsonl
from psdsim.engine.reference.workers import (
    Drafter,
    LocalTarget,
    RemoteTarget,
    TargetWorker,
    driver_device,
    kineto_profiler,
    pin,
)
from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import available_bytes
from psdsim.sim.output.locks import output_locks
from psdsim.sim.output.overwrite_guard import check_output_file
from psdsim.sim.output.places import landing


def run(cfg: EngineConfig) -> EngineResult:
    """Run the configured method over its workload; see EngineResult for what comes back."""
    cfg.check()
    check_machine(cfg)   # before any folder or process exists
    with output_locks([("--trace-dir", cfg.trace_dir)]):   # from the check to the trace's rename
        return _run_traced(cfg)


def _run_traced(cfg: EngineConfig) -> EngineResult:
    """run(), under the lock of its trace folder."""
    check_trace_dir(cfg)
    cores = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    driver_core = cores[0] if len(cores) > 1 else None
    verifier_core = cores[1] if len(cores) > 1 else None
    jsonl, kineto = trace_files(cfg)
    if cfg.trace_dir is not None:   # made where it lands: no stray new/ for new/../dir, a link's target
        folder = landing(cfg.trace_dir, "--trace-dir")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ScenarioError("--trace-dir", f"cannot make {str(cfg.trace_dir)!r} ({exc.strerror or exc})",
                                "name a folder you can write with --trace-dir DIR") from None
    try:
        pin(driver_core)
        device = driver_device(cfg)
        target = _target(cfg, verifier_core, kineto[1] if kineto else None)
        try:
            generator = torch.Generator(device).manual_seed(cfg.seed)  # every draw of the run, in order
            drafter = None
            if cfg.method != "ar":
                draft = build_draft(cfg.model, cfg.max_len, device)
                drafter = Drafter(draft, cfg.max_running, cfg.temperature, generator, cfg.profile)
                drafter.warmup(cfg.warmup_passes)
            requests = workload(cfg)
            engine = Engine(cfg, Scheduler(requests, cfg.max_running, cfg.max_num_batched_tokens), target,
                            drafter, generator, device)
            start = _timed(engine, kineto[0] if kineto else None, device)
        finally:
            target.close()
    finally:
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(threads)
    result = EngineResult(cfg, engine.steps, requests, start, os.getpid(), target.pid,
                          kineto_paths=kineto)
    if jsonl is not None:
        result.trace_path = jsonl
        write_jsonl(jsonl, _metadata(cfg, cores), engine.steps, requests, start)
    return result


def trace_files(cfg: EngineConfig) -> tuple[Path | None, list[Path]]:
    """The MineDraft JSONL trace and the Kineto traces (driver, verifier) a run writes into
    cfg.trace_dir: none without one, Kineto only with cfg.profile."""
    if cfg.trace_dir is None:
        return None, []
    name = f"reference_{cfg.method}_k{cfg.k}_m{cfg.m}"
    kineto = [cfg.trace_dir / f"{name}_{side}.pt.trace.json" for side in ("driver", "verifier")]
    return cfg.trace_dir / f"{name}.jsonl", kineto if cfg.profile else []


def check_trace_dir(cfg: EngineConfig) -> None:
    """ScenarioError naming --trace-dir when the run's traces would land on what psdsim did not
    write: a file where the folder goes, or a user's file under one of the trace names. Its own
    JSONL has the record write_file keeps beside it; its Kineto traces hold its `psdsim:` ranges
    somewhere (torch writes the file, so the whole of it is searched)."""
    jsonl, kineto = trace_files(cfg)
    if jsonl is None:
        return
    folder = landing(cfg.trace_dir, "--trace-dir")
    if folder.exists() and not folder.is_dir():
        raise ScenarioError("--trace-dir", f"{str(cfg.trace_dir)!r} is a file, not a folder",
                            "name a folder for the traces with --trace-dir DIR")
    check_output_file(jsonl, "--trace-dir")   # written by write_file, with its record
    for path in kineto:
        check_output_file(path, "--trace-dir", (b'"psdsim:',), head=None)


def check_machine(cfg: EngineConfig) -> None:
    """EngineConfigError when this machine cannot run cfg: a GPU asked for that PyTorch does not
    see, or more memory than is available (footprint.check_memory)."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise EngineConfigError("device = 'cuda' but this PyTorch sees no CUDA GPU "
                                "(torch.cuda.is_available() is false): use device = cpu")
    check_memory(cfg, available_bytes())


def _timed(engine: Engine, kineto: Path | None, device: torch.device) -> float:
    """Run the steps, under the profiler when asked, with the garbage collector paused (as
    benchmarks do: a collection in the middle of a step is noise, not the method's cost).
    Returns the run's start time."""
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with kineto_profiler(device) if kineto is not None else nullcontext() as prof:
            start = time.perf_counter()
            engine.run()
        if kineto is not None:
            prof.export_chrome_trace(str(kineto))
    finally:
        if collecting:
            gc.enable()
    return start


def _target(cfg: EngineConfig, core: int | None, kineto: Path | None) -> LocalTarget | RemoteTarget:
    """The target in its own process, or in the driver's (co-located, as SD's drafter shares the
    verifier GPUs)."""
    if cfg.two_processes:
        return RemoteTarget(cfg, core, driver_device(cfg), kineto)
    model = build_target(cfg.model, cfg.max_len, driver_device(cfg))
    worker = TargetWorker(model, cfg.max_running, cfg.temperature, cfg.profile)
    worker.warmup(cfg.warmup_passes)
    return LocalTarget(worker)


def _metadata(cfg: EngineConfig, cores: list[int]) -> dict[str, object]:
    doc = asdict(cfg)
    doc["trace_dir"] = str(cfg.trace_dir) if cfg.trace_dir is not None else None
    return {"engine": "psdsim-reference", "torch": torch.__version__, "config": doc,
            "cpus": len(cores), "two_processes": cfg.two_processes}
