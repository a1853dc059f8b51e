"""What a reference-engine run is: the models, the method, the workload, where traces go.

Plain frozen dataclasses without torch, so that `psdsim` can build and check a configuration
(and print its errors) on a machine without the `engine` extra. Every check raises one
`EngineConfigError` line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

METHODS = ("ar", "sd", "psd", "pearl")
DEVICES = ("cpu", "cuda")


class EngineConfigError(ValueError):
    """A configuration field has an impossible value."""


@dataclass(frozen=True)
class ModelConfig:
    """The target model, and the draft model derived from it.

    The target is a small decoder-only transformer with seeded random weights. The draft is the
    target's first `draft_layers` blocks with the target's embedding and final norm, so it is
    cheap and correlated with the target; its LM head is cos(θ) x the target's head + sin(θ) x a
    seeded random one, sin(θ) = `draft_noise` in [0, 1], which lowers its agreement with the
    target continuously. Measured per-token acceptance (VSR at k = 1) on the default sizes:
    0.93 at 0, 0.76 at 0.2, 0.58 at 0.4, 0.47 at 0.5, 0.37 at 0.6, 0.27 at 0.7, 0.19 at 0.8.
    """

    vocab: int = 1024
    hidden: int = 256
    layers: int = 6
    heads: int = 4
    mlp: int = 768
    draft_layers: int = 1
    draft_noise: float = 0.0
    # How strongly each block writes into the residual stream, relative to the embedding: small
    # values make the early exit (the draft) agree with the full model.
    residual_scale: float = 0.05
    # Standard deviation of the logits over the vocabulary: how peaked the model's predictions are.
    logit_std: float = 3.0
    seed: int = 0

    def check(self) -> None:
        _positive(self, "vocab", "hidden", "layers", "heads", "mlp", "draft_layers")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise EngineConfigError(f"model.hidden = {self.hidden} must split into {self.heads} heads of "
                                    "an even size (rotary embeddings rotate pairs)")
        if self.draft_layers > self.layers:
            raise EngineConfigError(f"model.draft_layers = {self.draft_layers} exceeds model.layers = "
                                    f"{self.layers} (the draft is the target's first layers)")
        if not 0 <= self.draft_noise <= 1:
            raise EngineConfigError(f"model.draft_noise = {self.draft_noise} must be in [0, 1]")
        if self.residual_scale < 0:
            raise EngineConfigError(f"model.residual_scale = {self.residual_scale} must be >= 0")
        if self.logit_std <= 0:
            raise EngineConfigError(f"model.logit_std = {self.logit_std} must be > 0")


@dataclass(frozen=True)
class EngineConfig:
    """One offline run: `requests` prompts of random token ids, all arriving at time 0.

    `m` is vLLM's max_num_seqs per verification batch: AR, SD and PEARL run m requests, PSD 2m in
    two sub-batches. Prompt lengths are drawn uniformly from [prompt_len, prompt_len_max]; every
    request generates exactly `output_len` tokens (EOS ignored, as in MineDraft's benchmarks).
    `same_prompt` gives every request the first request's prompt (for distribution tests).
    `separate_verifier` runs the target in its own process also for `ar` and `sd` (the GPU-fair
    layout whose traces time the channel); `psd` and `pearl` always do.
    """

    method: str = "psd"
    k: int = 3
    m: int = 4
    requests: int = 16
    prompt_len: int = 32
    prompt_len_max: int | None = None
    output_len: int = 32
    same_prompt: bool = False
    temperature: float = 1.0
    seed: int = 0
    max_num_batched_tokens: int = 2048
    separate_verifier: bool = False
    device: str = "cpu"
    model: ModelConfig = field(default_factory=ModelConfig)
    trace_dir: Path | None = None
    profile: bool = False           # also write Kineto traces (torch.profiler, one per process;
    #                                 it slows the run: time runs without it)
    warmup_passes: int = 3          # untimed forward passes per model before the run

    def check(self) -> None:
        if self.method not in METHODS:
            raise EngineConfigError(f"method = {self.method!r}: use one of {', '.join(METHODS)}")
        if self.device not in DEVICES:
            raise EngineConfigError(f"device = {self.device!r}: use one of {', '.join(DEVICES)}")
        _positive(self, "k", "m", "requests", "prompt_len", "output_len", "max_num_batched_tokens")
        if self.prompt_len_max is not None and self.prompt_len_max < self.prompt_len:
            raise EngineConfigError(f"prompt_len_max = {self.prompt_len_max} is below prompt_len = "
                                    f"{self.prompt_len}")
        if self.longest_prompt > self.max_num_batched_tokens:
            raise EngineConfigError(f"max_num_batched_tokens = {self.max_num_batched_tokens} cannot hold "
                                    f"a prompt of {self.longest_prompt} tokens")
        if self.temperature < 0:
            raise EngineConfigError(f"temperature = {self.temperature} must be >= 0 (0 is greedy)")
        if self.warmup_passes < 0:
            raise EngineConfigError(f"warmup_passes = {self.warmup_passes} must be >= 0")
        if self.profile and self.trace_dir is None:
            raise EngineConfigError("profile = true needs trace_dir (where the Kineto traces go)")
        self.model.check()

    @property
    def longest_prompt(self) -> int:
        return self.prompt_len_max if self.prompt_len_max is not None else self.prompt_len

    @property
    def max_running(self) -> int:
        """The running cap: 2m for PSD (two sub-batches of m), m otherwise (MineDraft's PEARL
        does not double it)."""
        return 2 * self.m if self.method == "psd" else self.m

    @property
    def max_len(self) -> int:
        """Positions a request can reach in a KV cache: prompt, output, and PEARL's drafts
        ahead of drafts being verified (at most 2k + 1 tokens past the output)."""
        return self.longest_prompt + self.output_len + 2 * self.k + 2

    @property
    def two_processes(self) -> bool:
        return self.method in ("psd", "pearl") or self.separate_verifier

    def with_changes(self, **changes: Any) -> EngineConfig:
        """A copy with top-level fields changed; `model.NAME` keys change the model config."""
        model = {k.removeprefix("model."): v for k, v in changes.items() if k.startswith("model.")}
        top = {k: v for k, v in changes.items() if not k.startswith("model.")}
        unknown = set(top) - {f.name for f in fields(self)}
        unknown |= set(model) - {f.name for f in fields(ModelConfig)}
        if unknown:
            raise EngineConfigError(f"unknown field(s): {', '.join(sorted(unknown))}")
        if model:
            top["model"] = replace(self.model, **model)
        return replace(self, **top)


def _positive(obj: object, *names: str) -> None:
    prefix = "model." if isinstance(obj, ModelConfig) else ""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise EngineConfigError(f"{prefix}{name} = {value!r} must be an integer >= 1")


def typed_value(label: str, kind: str, text: str) -> Any:
    """`text` in the type a dataclass field's annotation `kind` names (int, float, bool as
    true/false/1/0, Path, `none` where the field may be None, else str); errors name `label`."""
    if text.lower() == "none" and "None" in kind:
        return None
    if kind.startswith("bool"):
        if text.lower() not in ("true", "false", "1", "0"):
            raise EngineConfigError(f"{label}={text}: write true or false")
        return text.lower() in ("true", "1")
    try:
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
    except ValueError:
        what = "an integer" if kind.startswith("int") else "a number"
        raise EngineConfigError(f"{label}={text}: not {what}") from None
    return Path(text) if kind.startswith("Path") else text


def parse_field(cls: type, name: str, text: str) -> Any:
    """A `--set NAME=VALUE` value in the type of the field of `cls` it sets."""
    kinds = {f.name: str(f.type) for f in fields(cls)}
    if name not in kinds:
        raise EngineConfigError(f"--set {name}: no such field")
    return typed_value(f"--set {name}", kinds[name], text)
