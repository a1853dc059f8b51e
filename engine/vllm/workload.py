"""The prompts of a vLLM run: seeded random token ids, or a scenario's prompt lengths.

Prompts are given to vLLM as token ids (not text), so their lengths are exact whatever the
tokenizer, and ids skip the tokenizer's special tokens (the tiny tokenizer's first 4) so that no
prompt contains an end-of-sequence token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from psdsim.engine.vllm.config import VllmConfig

FIRST_ORDINARY_ID = 4   # the tiny tokenizer's <pad> <s> </s> <unk> come first


def prompt_lengths(cfg: VllmConfig) -> list[int]:
    """Every request's prompt length: `prompt_lens` if given, else uniform in [prompt_len,
    prompt_len_max] from the run's seed."""
    if cfg.prompt_lens is not None:
        return list(cfg.prompt_lens)
    hi = cfg.prompt_len_max if cfg.prompt_len_max is not None else cfg.prompt_len
    rng = np.random.default_rng([cfg.seed, 1])
    return [int(n) for n in rng.integers(cfg.prompt_len, hi + 1, size=cfg.requests)]


def prompt_token_ids(cfg: VllmConfig, vocab: int) -> list[list[int]]:
    """The prompts as token-id lists drawn from [FIRST_ORDINARY_ID, vocab) with the run's seed."""
    rng = np.random.default_rng([cfg.seed, 2])
    return [rng.integers(FIRST_ORDINARY_ID, vocab, size=n).tolist() for n in prompt_lengths(cfg)]


def from_scenario(path: Path | None, overrides: list[str]) -> dict[str, Any]:
    """VllmConfig fields taken from a psdsim scenario (file or built-in default, with --set
    overrides): k, m, requests (prompts), n, output_len, seed, and the prompt lengths the
    simulator would draw for it (same generator, same order; one per prompt). A simulated method
    other than ar/sd/psd is kept out (the caller keeps its own); arrivals (`rate`) are not
    replayed: this runner is offline, every request arrives at the start."""
    from psdsim.sim.scenario import catalog_for, load_scenario, validate
    from psdsim.sim.workload import make_workload

    s = validate(load_scenario(path, overrides))
    work = make_workload(s, catalog_for(s), np.random.default_rng(s.seed))
    lens = work.prompt_len[::s.n]   # the simulator fans a prompt out into n requests; vLLM takes n
    fields: dict[str, Any] = {"k": s.k, "m": s.m, "requests": len(lens), "n": s.n,
                              "output_len": int(s.output_len), "seed": s.seed,
                              "prompt_lens": tuple(int(x) for x in lens)}
    if s.method in ("ar", "sd", "psd"):
        fields["method"] = s.method
    return fields
