"""What a reference-engine run is: the models, the method, the workload, where traces go.

Plain frozen dataclasses without torch, so that `psdsim` can build and check a configuration
(and print its errors) on a machine without the `engine` extra. Every check raises one
`EngineConfigError` line naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from psdsim.sim.user_input import KIND_NAMES, parsed

METHODS = ("ar", "sd", "psd", "pearl")
DEVICES = ("cpu", "cuda")


# The models compute in float32: its largest finite value, (2 - 2**-23) * 2**127
# (torch.finfo(torch.float32).max).
FLOAT32_MAX = (2 - 2**-23) * 2.0**127
# The largest |x| torch.randn can return: Box-Muller, sqrt(-2 ln u) with u a uniform of at most 53
# bits, so u >= 2**-53. Every weight is randn x its scale, so this bounds the weights, hence the
# activations and logits, without building the models.
RANDN_MAX = math.sqrt(2 * 53 * math.log(2))
# Seeds: torch.Generator.manual_seed takes an unsigned 64-bit integer (a larger one overflows, a
# negative one wraps around onto a positive seed); numpy takes seeds >= 0 too.
SEED_MAX = 2**64 - 1
# The most draft tokens a step may propose: the scenario's bound (sim/scenario_values.py MAX_K, which this
# module does not import: `psdsim engine run --help` loads no simulator; a test keeps them equal).
MAX_K = 32
# Sizes and lengths end up as torch sizes or int64 position tensors: none can exceed int64's maximum.
INDEX_MAX = 2**63 - 1


class EngineConfigError(ValueError):
    """A configuration field has an impossible value."""


def seed_problem(value: object, top: int = SEED_MAX) -> str | None:
    """Why `value` cannot seed a torch generator (None when it can); `top` is the largest usable."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
        return f"must be an integer in [0, {top}] (torch seeds are unsigned 64-bit integers)"
    return None


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
        # `not x >= 0` rather than `x < 0`: NaN fails every comparison, so it must fail the check.
        if not (math.isfinite(self.residual_scale) and self.residual_scale >= 0):
            raise EngineConfigError(f"model.residual_scale = {self.residual_scale} must be a finite "
                                    "number >= 0")
        if not (math.isfinite(self.logit_std) and self.logit_std > 0):
            raise EngineConfigError(f"model.logit_std = {self.logit_std} must be a finite number > 0")
        if (problem := seed_problem(self.seed)) is not None:
            raise EngineConfigError(f"model.seed = {self.seed} {problem}")
        # The final RMSNorm squares the residual stream: past sqrt(float32 max) the square overflows
        # and the norm returns zeros (every prediction uniform), past float32 max it returns NaN.
        limit = math.sqrt(FLOAT32_MAX)
        if self.largest_activation > limit:
            most = (limit - RANDN_MAX) / self.activation_per_scale
            raise EngineConfigError(f"model.residual_scale = {self.residual_scale} lets the residual stream "
                                    f"reach {self.largest_activation:.3g} (model.hidden = {self.hidden}, "
                                    f"model.mlp = {self.mlp}, model.layers = {self.layers}), past "
                                    f"{limit:.3g} where float32 RMSNorm overflows: use at most {most:.3g}")
        if self.largest_logit > FLOAT32_MAX:
            most = FLOAT32_MAX / self.logit_per_std
            raise EngineConfigError(f"model.logit_std = {self.logit_std} lets logits reach "
                                    f"{self.largest_logit:.3g}, past float32's {FLOAT32_MAX:.3g}: use at "
                                    f"most {most:.3g}")

    @property
    def largest_logit(self) -> float:
        """A bound on |logit|: the final norm's output has L2 norm sqrt(hidden) (unit RMS), and a head
        row (the target's, or the draft's cos x target + sin x noise, |cos| + |sin| <= sqrt 2) has
        entries of at most RANDN_MAX x logit_std / sqrt(hidden); Cauchy-Schwarz bounds their product."""
        return self.logit_per_std * self.logit_std

    @property
    def logit_per_std(self) -> float:
        return math.sqrt(2) * RANDN_MAX * math.sqrt(self.hidden)

    @property
    def largest_activation(self) -> float:
        """A bound on the residual stream's entries: the embedding's (RANDN_MAX) plus, per block,
        what attention and the MLP add from their normed (L2 norm sqrt(hidden)) inputs: values and
        gate/up entries <= sqrt(hidden) x RANDN_MAX (Cauchy-Schwarz, weights of std 1/sqrt(hidden)),
        so attention adds <= hidden x RANDN_MAX^2 x residual_scale and the MLP <= sqrt(mlp) x hidden
        x RANDN_MAX^3 x residual_scale (its output weights have std residual_scale / sqrt(fan-in))."""
        return RANDN_MAX + self.activation_per_scale * self.residual_scale

    @property
    def activation_per_scale(self) -> float:
        """What the blocks add to largest_activation per unit of residual_scale (finite: the sizes
        are at most INDEX_MAX)."""
        return self.layers * self.hidden * RANDN_MAX**2 * (1 + RANDN_MAX * math.sqrt(self.mlp))


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
        if not isinstance(self.model, ModelConfig):
            raise EngineConfigError(f"model = {self.model!r}: the models are set field by field, e.g. "
                                    "--set model.vocab=512 (model.NAME for each ModelConfig field)")
        if self.method not in METHODS:
            raise EngineConfigError(f"method = {self.method!r}: use one of {', '.join(METHODS)}")
        if self.device not in DEVICES:
            raise EngineConfigError(f"device = {self.device!r}: use one of {', '.join(DEVICES)}")
        _positive(self, "k", "m", "requests", "prompt_len", "output_len", "max_num_batched_tokens")
        if self.k > MAX_K:   # each step drafts k tokens one forward pass at a time
            raise EngineConfigError(f"k = {self.k} is past {MAX_K}, the most draft tokens a step may "
                                    f"propose (a scenario's k too): use k in [1, {MAX_K}]")
        if self.prompt_len_max is not None and self.prompt_len_max < self.prompt_len:
            raise EngineConfigError(f"prompt_len_max = {self.prompt_len_max} is below prompt_len = "
                                    f"{self.prompt_len}")
        if self.longest_prompt > self.max_num_batched_tokens:
            raise EngineConfigError(f"max_num_batched_tokens = {self.max_num_batched_tokens} cannot hold "
                                    f"a prompt of {self.longest_prompt} tokens")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):   # NaN fails both
            raise EngineConfigError(f"temperature = {self.temperature} must be a finite number >= 0 "
                                    "(0 is greedy)")
        # The workload draws its prompts with seed + 1 (schedule.workload), so one less than SEED_MAX.
        if (problem := seed_problem(self.seed, SEED_MAX - 1)) is not None:
            raise EngineConfigError(f"seed = {self.seed} {problem}")
        if self.warmup_passes < 0:
            raise EngineConfigError(f"warmup_passes = {self.warmup_passes} must be >= 0")
        if self.profile and self.trace_dir is None:
            raise EngineConfigError("profile = true needs trace_dir (where the Kineto traces go)")
        self.model.check()
        # Sampling divides the logits by the temperature in float32: a tiny one overflows them to inf
        # (1e-300 even rounds to 0 in float32), and softmax then returns NaN.
        if self.temperature > 0 and self.model.largest_logit / self.temperature > FLOAT32_MAX:
            least = self.model.largest_logit / FLOAT32_MAX
            raise EngineConfigError(f"temperature = {self.temperature} overflows float32 logits / "
                                    f"temperature (logits reach {self.model.largest_logit:.3g}): use 0 "
                                    f"(greedy) or at least {least:.3g}")

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
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= INDEX_MAX:
            raise EngineConfigError(f"{prefix}{name} = {value!r} must be an integer in [1, {INDEX_MAX}] "
                                    "(torch sizes and positions are int64)")


def typed_value(label: str, kind: str, text: str) -> Any:
    """`text` in the type a dataclass field's annotation `kind` names (int, float, bool, Path,
    `none` where the field may be None, else str), read as the scenario's `--set` reads it
    (sim/user_input.py); errors name `label`."""
    if text.lower() == "none" and "None" in kind:
        return None
    if kind.startswith("Path"):
        return Path(text)
    target = next((t for t in (bool, int, float) if kind.startswith(t.__name__)), str)
    try:
        return parsed(text, target)
    except ValueError:
        raise EngineConfigError(f"{label}={text}: not {KIND_NAMES[target]}") from None


def parse_field(cls: type, name: str, text: str) -> Any:
    """A `--set NAME=VALUE` value in the type of the field of `cls` it sets. Errors spell a
    ModelConfig field model.NAME, as --set does, so that they name (and list) the model's fields."""
    label = f"--set {'model.' if cls is ModelConfig else ''}{name}"
    kinds = {f.name: str(f.type) for f in fields(cls)}
    if name not in kinds:
        raise EngineConfigError(f"{label}: no such field")
    return typed_value(label, kinds[name], text)
