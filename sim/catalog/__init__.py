"""The catalog of GPUs, links, models, acceptance priors and dataset profiles.

The built-in numbers live in TOML files beside this module, one entry per table, each with a
`source` naming where it comes from; this module loads them into frozen dataclasses and derives
what the cost model needs (parameter counts, weight and KV bytes) from a model's published shape,
so that a number is written once and checked against the published counts in the tests. Users
add or override entries with a TOML file of their own (`load_catalog`), in the same format
under tables `[gpus.NAME]`, `[links.NAME]`, `[models.NAME]`, `[datasets.NAME]`,
`[engines.NAME]` and `[acceptance."DRAFT -> TARGET"]`.

A number that its source gives only as a range, or marks as an estimate, carries that range beside
it: `launch_us = 37.0` with `launch_us_range = { low = 25.0, high = 58.0, why = "row 2.13 prior" }`
(or `{ spread = 0.2, why = ... }` for plus or minus 20 %). The point value is what every run uses;
the ranges are only read by `--intervals` (sim/uncertainty.py), which draws inputs from them. So
both ends of a range are held to its field's own bounds, and a range only sits where a draw reads
it (DRAWN): anywhere else it is refused, not dropped.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

from psdsim.sim.documents import parse_document
from psdsim.sim.input_paths import input_file
from psdsim.sim.numbers import finite

# The largest number a catalog field may hold, in whatever unit it uses (GB, GB/s, TFLOPS, µs,
# tokens): far beyond any real value, and small enough that the model's arithmetic stays finite
# (a GPU of 1e300 GB made its KV capacity NaN).
MAX_NUMBER = 1e12
# The smallest memory, bandwidth or TFLOPS a GPU or link may have (GB, GB/s, TFLOPS): a thousandth,
# i.e. 1 MB/s or 1 GFLOPS, far below any accelerator or interconnect. These are divisors of every
# step time; a link of 1e-300 GB/s made a makespan of 1e301 s (the summary refuses such figures,
# but the value is refused here first, where it is named).
MIN_RATE = 1e-3
# The fewest bytes a weight may take: 1-bit weights are 0.125 B/param, so 0.1 is below any real
# quantisation, and weights of (almost) no bytes would read in no time at all.
MIN_BYTES_PER_PARAM = 0.1
# A model's shape: each is a count or a divisor (head_dim divides the KV bytes a block holds), so 0 is
# no model (a head_dim of 0 made a KV capacity of x / 0).
MODEL_SIZES = ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab")
BYTES_PER_KV_ELEMENT = 2  # KV cache in bf16/fp16, vLLM's default kv_cache_dtype="auto"
RANGE_SUFFIX = "_range"   # `FIELD_range = { low, high, why }` beside a numeric FIELD


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    memory_gb: float
    memory_bandwidth_gbps: float
    bf16_tflops: float
    nvlink: bool
    host_link: str  # links.toml key of the GPU's link to CPU memory
    source: str
    fp8_tflops: float = 0.0  # 0: no FP8 tensor cores

    def tflops(self, compute: str) -> float:
        """Dense tensor-core rate for a model computing in `compute` ("bf16" or "fp8")."""
        return self.fp8_tflops if compute == "fp8" and self.fp8_tflops else self.bf16_tflops


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    nvlink: bool
    p2p_latency_us: float
    p2p_bandwidth_gbps: float
    allreduce_latency_us: float
    allreduce_busbw_gbps: float
    source: str

    def p2p_seconds(self, nbytes: float) -> float:
        """Time of one point-to-point message of `nbytes` (latency + bytes / bandwidth)."""
        return self.p2p_latency_us * 1e-6 + nbytes / (self.p2p_bandwidth_gbps * 1e9)

    def broadcast_seconds(self, nbytes: float) -> float:
        """One rank's message to a TP group: all-reduce-like latency, then the bytes at the
        point-to-point rate (pipelined tree/ring broadcast) [EST]."""
        return self.allreduce_latency_us * 1e-6 + nbytes / (self.p2p_bandwidth_gbps * 1e9)

    def allreduce_seconds(self, nbytes: float, ranks: int) -> float:
        """Ring all-reduce of `nbytes` over `ranks` GPUs (nccl-tests bus-bandwidth convention)."""
        if ranks <= 1:
            return 0.0
        wire = nbytes * 2.0 * (ranks - 1) / ranks
        return self.allreduce_latency_us * 1e-6 + wire / (self.allreduce_busbw_gbps * 1e9)


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer (dense or MoE), or an EAGLE draft head, by its config shape."""

    key: str
    hf_id: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool
    qk_norm: bool
    bytes_per_param: float     # non-embedding weights; embeddings and LM heads stay 16-bit
    source: str
    compute: str = "bf16"      # "fp8": matmuls at the GPU's FP8 rate (W8A8)
    experts: int = 0           # MoE: routed experts per layer (0 = dense MLP)
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # MoE: one always-active shared expert of this size, sigmoid-gated
    eagle: bool = False        # EAGLE head: fc(2h -> h) + one layer; the target's embedding/head

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer (gate, up and down projections)."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def shared_expert_params(self) -> int:
        """The shared expert of one layer (gate, up, down) and its h -> 1 gate (Qwen2-MoE)."""
        if not self.shared_intermediate:
            return 0
        return 3 * self.hidden * self.shared_intermediate + self.hidden

    @property
    def params_per_layer(self) -> int:
        if self.moe:
            mlp = self.experts * self.expert_params + self.hidden * self.experts  # + router
            mlp += self.shared_expert_params
        else:
            mlp = 3 * self.hidden * self.intermediate
        return self.attention_params + mlp + 2 * self.hidden  # + two norms

    @property
    def non_embedding_params(self) -> int:
        fc = 2 * self.hidden * self.hidden + self.hidden if self.eagle else 0
        return self.layers * self.params_per_layer + self.hidden + fc  # + final norm

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """Parameters the model itself stores (an EAGLE head borrows the target's embeddings)."""
        if self.eagle:
            return self.non_embedding_params
        copies = 1 if self.tie_embeddings else 2
        return self.non_embedding_params + copies * self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters a token passes through (MoE: the routed experts only), LM head included."""
        body = self.non_embedding_params
        if self.moe:
            idle = self.experts - self.experts_per_token
            body -= self.layers * idle * self.expert_params
        return body + self.embedding_params

    def _bytes(self, non_embedding: float) -> float:
        return non_embedding * self.bytes_per_param

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights the model stores on its GPUs."""
        embeddings = self.total_params - self.non_embedding_params
        extra_head = 0 if not self.eagle else self.embedding_params  # the target's LM head
        return self._bytes(self.non_embedding_params) + 2 * (embeddings + extra_head)

    @property
    def dense_streamed_bytes(self) -> float:
        """Weights every forward pass reads whatever the batch: the body (MoE: without its routed
        experts) and the LM head (an embedding table is only gathered row by row)."""
        body = self.non_embedding_params
        if self.moe:
            body -= self.layers * self.experts * self.expert_params
        return self._bytes(body) + 2 * self.embedding_params

    @property
    def expert_bytes_per_layer(self) -> float:
        return self._bytes(self.expert_params)

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts a layer reads for `tokens` tokens, each routed to
        `experts_per_token` of `experts` uniformly: E (1 - (1 - k/E)^tokens)
        (docs/reference/hardware_models_workloads.md §2.2)."""
        if not self.moe:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens)

    @property
    def body_flops_per_token(self) -> float:
        return 2.0 * (self.active_params - self.embedding_params)

    @property
    def lm_head_flops_per_token(self) -> float:
        return 2.0 * self.embedding_params

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query token, cached key token) pair over all layers: QK^T and AV."""
        return 4.0 * self.heads * self.head_dim * self.layers

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_KV_ELEMENT

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV heads are split across TP ranks; with fewer KV heads than ranks they are replicated."""
        heads_per_gpu = max(1.0, self.kv_heads / tp)
        return 2 * self.layers * heads_per_gpu * self.head_dim * BYTES_PER_KV_ELEMENT


@dataclass(frozen=True)
class PromptComponent:
    weight: float
    mu: float
    sigma: float


@dataclass(frozen=True)
class Dataset:
    key: str
    max_requests: int  # 0 = unlimited
    min_prompt: int
    max_prompt: int
    components: tuple[PromptComponent, ...]
    source: str


@dataclass(frozen=True)
class AcceptancePrior:
    """`alpha` is the mean of the per-request Beta rate; `per_position` (empty: i.i.d.) scales it
    by draft position, f_1 = 1 and each in (0, 1], the last one repeated past the list's end
    (sim/acceptance.py)."""

    draft: str
    target: str
    alpha: float
    source: str
    per_position: tuple[float, ...] = ()


ENGINE_KINDS = ("roofline", "execution")


@dataclass(frozen=True)
class EngineProfile:
    """How a serving engine executes a forward pass and a step (sim/execution.py): kernels per
    layer and their fixed GPU time, the CPU's launch and framework costs, how the two overlap.
    `kind = "roofline"` is the ideal engine of sim/costs.py and uses none of the other fields."""

    key: str
    name: str
    kind: str
    source: str
    cuda_graphs: bool = False
    async_scheduling: bool = False
    minedraft: bool = False           # MineDraft's critical-path extras (driver prep, rebuild, timers)
    kernels_per_layer: int = 0        # dense Llama-family layer at TP=1 (TP > 1 adds 2 all-reduces)
    qk_norm_kernels: int = 0          # more per layer with per-head q/k RMSNorm (Qwen3)
    moe_kernels: int = 0              # more per layer for an MoE block (router, top-k, expert GEMMs)
    kernels_per_pass: int = 0         # embedding, final norm, LM head, logits, sampler
    kernel_us: float = 0.0            # GPU: fixed time per kernel (small-kernel floor + gap)
    launch_us: float = 0.0            # CPU: per kernel launched eagerly (framework stack included)
    graph_launch_us: float = 0.0      # CPU: one CUDA graph replay
    collective_us: float = 0.0        # GPU: an eager all-reduce's latency over an in-graph one
    collective_launch_us: float = 0.0  # CPU: launching one collective eagerly, over a kernel
    prepare_ms: float = 0.0           # CPU: building one pass's inputs, fixed
    prepare_request_us: float = 0.0   # ... per request
    prepare_token_us: float = 0.0     # ... per token
    sampler_host_ms: float = 0.0      # CPU: the sampler per call
    sampler_host_row_us: float = 0.0  # ... per sampled row
    sampler_vocab_bytes: float = 0.0  # GPU: bytes per sampled row per vocabulary entry
    sync_us: float = 0.0              # a GPU->CPU synchronisation
    step_ms: float = 0.0              # CPU: per-step scheduling and output processing, fixed
    step_request_us: float = 0.0      # ... per running request (scheduling)
    output_request_us: float = 0.0    # ... per request emitting tokens (output processing)
    exposed_ms: float = 0.0           # async scheduling: framework time left on the critical path
    metadata_ms: float = 0.0          # MineDraft: one side of the metadata broadcast, fixed
    metadata_request_us: float = 0.0  # ... per request
    spec_worker_ms: float = 0.0       # CPU: the spec-decode worker's own bookkeeping per step, fixed
    spec_worker_request_us: float = 0.0  # ... per drafted request
    spec_worker_draft_us: float = 0.0    # ... per drafted request per draft token
    timer_syncs: int = 0              # MineDraft: Timer synchronize() calls per target pass
    extra_draft_rows: bool = False    # V0 MultiStepWorker: one more draft row per all-accepted request


@dataclass(frozen=True)
class Range:
    """Where a catalog number may lie, by its source: `low <= value <= high`, and why."""

    low: float
    high: float
    why: str


# (table, entry key, field) -> its range; an acceptance entry's key is "DRAFT -> TARGET"
RangeKey = tuple[str, str, str]


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU]
    links: dict[str, Link]
    models: dict[str, Model]
    datasets: dict[str, Dataset]
    acceptance: dict[tuple[str, str], AcceptancePrior]
    engines: dict[str, EngineProfile]
    ranges: dict[RangeKey, Range] = field(default_factory=dict)

    def acceptance_prior(self, draft: str, target: str) -> AcceptancePrior | None:
        return self.acceptance.get((draft, target))


def vocabulary_mismatch(draft: Model, target: Model, names: tuple[str, str]) -> str | None:
    """Why vLLM would not speculate with `draft` for `target`: their vocabularies differ in size.
    vLLM 0.9.2 asserts that the proposer's and the scorer's vocab_size (each model config's
    hf_text_config.vocab_size) are equal before it builds the scorer (vllm/spec_decode/
    spec_decode_worker.py, SpecDecodeWorker._vocab_size): a draft token is a target token id, and
    rejection sampling compares the two distributions entry by entry, so a smaller draft
    vocabulary is refused as a larger one is. None when they agree; `names` are the two models'
    names as the user gave them (draft, target)."""
    if draft.vocab == target.vocab:
        return None
    return (f"draft {names[0]}'s vocab_size {draft.vocab:,} differs from target {names[1]}'s "
            f"{target.vocab:,}: vLLM's speculative decoding needs the two equal")


def _check_entry(cls: type, key: str, raw: dict[str, Any], filename: str) -> dict[str, Any]:
    """Validate one TOML table against a dataclass: required fields present, right types, no
    extras (fields with a default may be left out)."""
    expected = {f.name: f for f in fields(cls) if f.name != "key"}
    unknown = set(raw) - set(expected)
    if unknown:
        raise CatalogError(f"{filename} [{key}]: unknown field {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    for name, f in expected.items():
        typ = f.type
        if name not in raw:
            if f.default is MISSING:
                raise CatalogError(f"{filename} [{key}]: missing field {name!r}")
            continue
        value = raw[name]
        if typ == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = {
            "str": isinstance(value, str) and bool(value.strip()),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, float) and math.isfinite(value),
            "bool": isinstance(value, bool),
        }.get(str(typ), True)
        if not ok:
            raise CatalogError(f"{filename} [{key}]: field {name!r} must be {typ}, got {value!r}")
        if str(typ) in ("int", "float"):
            _check_number(name, value, f"{filename} [{key}]")
        out[name] = value
    return out


def _check_number(name: str, value: float, where: str) -> None:
    """Every numeric catalog field's bounds: 0 to MAX_NUMBER."""
    if value < 0:
        raise CatalogError(f"{where}: field {name!r} must be >= 0, got {value!r}")
    if value > MAX_NUMBER:
        raise CatalogError(f"{where}: field {name!r} must be at most {MAX_NUMBER:g}, got {value!r}")


def _load_group(cls: type, tables: dict[str, Any], filename: str) -> dict[str, Any]:
    return {key: cls(key=key, **_check_entry(cls, key, _without_ranges(raw), filename))
            for key, raw in tables.items()}


def _without_ranges(raw: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in raw.items() if not name.endswith(RANGE_SUFFIX)}


EntryCheck = Callable[[Any, str], None]   # (an entry, where it is) -> CatalogError if out of bounds


def _load_ranges(table: str, entries: dict[str, Any], tables: dict[str, Any], filename: str,
                 check: EntryCheck) -> dict[RangeKey, Range]:
    """The `FIELD_range` tables of a group's entries (already loaded as `entries`), each checked
    against its field's point value and, at both ends, against the bounds `check` holds the
    entry's values to: a draw is the entry with the field anywhere in its range."""
    out: dict[RangeKey, Range] = {}
    for key, raw in tables.items():
        entry = entries[_entry_key(key)]
        for name, spec in raw.items():
            if name.endswith(RANGE_SUFFIX):
                base, where = name[: -len(RANGE_SUFFIX)], f"{filename} [{key}] {name}"
                rng = _range(spec, _point(entry, base, where), where)
                if table == "gpus" and base == "fp8_tflops" and rng.low < MIN_RATE and rng.high > 0:
                    # 0 (no FP8 tensor cores) and the rates from MIN_RATE up are allowed, the values
                    # between are not: both ends may pass while draws between them are refused
                    raise CatalogError(f"{where}: a range of fp8_tflops must lie at or above {MIN_RATE:g} "
                                       f"TFLOPS (0 means no FP8 tensor cores, not a rate to draw "
                                       f"towards), got [{rng.low:g}, {rng.high:g}]")
                for end, value in (("low", rng.low), ("high", rng.high)):
                    at = f"{where}: its {end} end {value:g}"
                    _check_number(base, value, at)
                    check(replace(entry, **{base: value}), at)
                out[(table, _entry_name(key), base)] = rng
    return out


def _entry_key(key: str) -> Any:
    """How an entry is keyed in its group: acceptance pairs by (draft, target), others by name."""
    draft, sep, target = (part.strip() for part in key.partition("->"))
    return (draft, target) if sep else key


def _entry_name(key: str) -> str:
    """An entry's name in a range key: an acceptance pair spelled "DRAFT -> TARGET" however its
    file spaced it."""
    entry = _entry_key(key)
    return " -> ".join(entry) if isinstance(entry, tuple) else key


def _point(entry: Any, base: str, where: str) -> float:
    """The value a range is of: a measured number (a float field); a count is exact, not drawn."""
    value = getattr(entry, base, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: names no numeric field {base!r}; {DRAWN}")
    if isinstance(value, int):
        raise CatalogError(f"{where}: {base!r} is a count, which is not drawn; {DRAWN}")
    return float(value)


def _range(spec: Any, value: float, where: str) -> Range:
    """`{ low, high, why }` or `{ spread, why }` (a relative spread, low = value (1 - spread)), the
    point value inside it, a non-empty reason."""
    shape = set(spec) if isinstance(spec, dict) else set()
    if shape not in ({"low", "high", "why"}, {"spread", "why"}):
        raise CatalogError(f"{where}: write {{ low = L, high = H, why = \"...\" }} or "
                           f"{{ spread = 0.2, why = \"...\" }}, got {spec!r}")
    why = spec["why"]
    numbers = [finite(spec[name]) for name in shape - {"why"}]
    if not isinstance(why, str) or not why.strip() or any(v is None or v < 0 for v in numbers):
        raise CatalogError(f"{where}: needs finite numbers >= 0 and a non-empty why, got {spec!r}")
    if "spread" in spec:
        low, high = value * (1.0 - spec["spread"]), value * (1.0 + spec["spread"])
    else:
        low, high = float(spec["low"]), float(spec["high"])
    if not low <= value <= high:
        raise CatalogError(f"{where}: the value {value:g} must lie within [low, high], got "
                           f"[{low:g}, {high:g}]")
    return Range(low, high, why.strip())


def _load_datasets(tables: dict[str, Any], filename: str) -> dict[str, Dataset]:
    out = {}
    for key, raw in tables.items():
        raw = dict(raw)
        comps = raw.pop("components", None)
        if not comps:
            raise CatalogError(f"{filename} [{key}]: missing field 'components'")
        raw["components"] = tuple(_component(c, f"{filename} [{key}]") for c in
                                  (comps if isinstance(comps, list) else [comps]))
        checked = _check_entry(Dataset, key, raw, filename)
        if checked["min_prompt"] > checked["max_prompt"]:
            raise CatalogError(f"{filename} [{key}]: min_prompt exceeds max_prompt")
        out[key] = Dataset(key=key, **checked)
    return out


def _component(raw: Any, where: str) -> PromptComponent:
    """One log-normal of a prompt-length mixture: a positive weight and sigma, a finite mu (a zero
    weight or sigma, or a NaN, would turn every prompt length into NaN)."""
    if isinstance(raw, dict):
        raw = _without_ranges(raw)
    if not isinstance(raw, dict) or set(raw) != {"weight", "mu", "sigma"}:
        raise CatalogError(f"{where}: each component is {{ weight = 1.0, mu = 5.8, sigma = 0.6 }}, "
                           f"got {raw!r}")
    values = {name: finite(value) for name, value in raw.items()}
    if any(v is None for v in values.values()) or values["weight"] <= 0 or values["sigma"] <= 0:
        raise CatalogError(f"{where}: a component's weight and sigma must be finite numbers > 0 and its mu "
                           f"finite, got {raw!r}")
    return PromptComponent(**values)


def _load_acceptance(tables: dict[str, Any], models: dict[str, Model],
                     filename: str) -> dict[tuple[str, str], AcceptancePrior]:
    out = {}
    for pair, raw in tables.items():
        draft, sep, target = (part.strip() for part in pair.partition("->"))
        if not sep or draft not in models or target not in models:
            raise CatalogError(f"{filename} [{pair!r}]: expected 'draft -> target' of known models")
        checked = _check_entry(AcceptancePrior, pair,
                               {"draft": draft, "target": target, **_without_ranges(raw)}, filename)
        if "per_position" in checked:
            checked["per_position"] = _position_factors(checked["per_position"], f"{filename} [{pair!r}]")
        out[(draft, target)] = AcceptancePrior(**checked)
        _check_alpha(out[(draft, target)], f"{filename} [{pair!r}]")
    return out


def _position_factors(raw: Any, where: str) -> tuple[float, ...]:
    """Acceptance by draft position relative to the first: a list starting at 1, each factor in
    (0, 1] (a factor above 1 could push a request's rate past 1)."""
    values = [finite(v) for v in raw] if isinstance(raw, list) else [None]
    if not values or any(v is None or not 0.0 < v <= 1.0 for v in values) or values[0] != 1.0:
        raise CatalogError(f"{where}: field 'per_position' must be a list of factors in (0, 1] starting "
                           f"at 1.0 (position j's acceptance relative to the first's), got {raw!r}")
    return tuple(float(v) for v in values)


def _builtin(name: str) -> dict[str, Any]:
    """A catalog file shipped beside this module (read as a file: importlib.resources would cost
    every run ~30 ms of start-up to import, and the package is always installed as files)."""
    return tomllib.loads((Path(__file__).parent / name).read_text(encoding="utf-8"))


# Each entry's bounds beyond its fields' types, its place named by `where`: held by its point values
# (_assemble) and by both ends of each range it carries (_load_ranges), so a draw meets only values
# the field could have been given.
def _check_gpu(gpu: GPU, links: dict[str, Link], where: str) -> None:
    if gpu.host_link not in links:
        raise CatalogError(f"{where}: host_link {gpu.host_link!r} is not a known link")
    if min(gpu.memory_gb, gpu.memory_bandwidth_gbps, gpu.bf16_tflops) < MIN_RATE:
        raise CatalogError(f"{where}: memory, bandwidth and TFLOPS must be at least {MIN_RATE:g} "
                           "(GB, GB/s, TFLOPS)")
    if gpu.fp8_tflops and gpu.fp8_tflops < MIN_RATE:
        raise CatalogError(f"{where}: fp8_tflops must be 0 (no FP8 tensor cores) or at least "
                           f"{MIN_RATE:g} TFLOPS, got {gpu.fp8_tflops!r}")


def _check_link(link: Link, where: str) -> None:
    if min(link.p2p_bandwidth_gbps, link.allreduce_busbw_gbps) < MIN_RATE:
        raise CatalogError(f"{where}: p2p_bandwidth_gbps and allreduce_busbw_gbps must be at least "
                           f"{MIN_RATE:g} GB/s")


def _check_engine(e: EngineProfile, where: str) -> None:
    if e.kind not in ENGINE_KINDS:
        raise CatalogError(f"{where}: kind must be one of {', '.join(ENGINE_KINDS)}")
    if e.kind == "execution" and e.kernels_per_layer < 1:
        raise CatalogError(f"{where}: kernels_per_layer must be >= 1")


def _check_alpha(prior: AcceptancePrior, where: str) -> None:
    """The prior's mean is the scenario's `acceptance` when drawn, so it takes the same bound:
    (0, MAX_ACCEPTANCE] (sim/acceptance.py, imported here: it loads numpy, which start-up must not)."""
    from psdsim.sim.acceptance import MAX_ACCEPTANCE

    if not 0.0 < prior.alpha <= MAX_ACCEPTANCE:
        raise CatalogError(f"{where}: alpha must be in (0, 1 - 1e-9], got {prior.alpha!r}")


def _assemble(gpus: dict, links: dict, models: dict, datasets: dict, acceptance: dict,
              engines: dict, filename: str, ranges: dict[RangeKey, Range] | None = None) -> Catalog:
    for key, gpu in gpus.items():
        _check_gpu(gpu, links, f"{filename}: GPU {key!r}")
    for key, link in links.items():
        _check_link(link, f"{filename}: link {key!r}")
    for key, m in models.items():
        if m.compute not in ("bf16", "fp8"):
            raise CatalogError(f"{filename}: model {key!r}: compute must be 'bf16' or 'fp8'")
        _check_model_sizes(key, m, filename)
        if m.moe and not 0 < m.experts_per_token <= m.experts:
            raise CatalogError(f"{filename}: model {key!r}: experts_per_token must be in 1..experts")
        if m.shared_intermediate and not m.moe:
            raise CatalogError(f"{filename}: model {key!r}: shared_intermediate is for MoE models "
                               "(experts > 0)")
    for key, e in engines.items():
        _check_engine(e, f"{filename}: engine {key!r}")
    return Catalog(gpus=gpus, links=links, models=models, datasets=datasets, acceptance=acceptance,
                   engines=engines, ranges=ranges or {})


RANGED_TABLES = ("gpus", "links", "acceptance", "engines")   # the tables whose numbers may carry ranges
COMPONENT_RANGES = ("mu", "sigma")   # a dataset's prompt-length component: the fields drawn
# What --intervals draws (sim/uncertainty.py): a range anywhere else would be a number never drawn
DRAWN = ("ranges are drawn on the measured numbers (not the counts) of [gpus.*], [links.*] and "
         "[engines.*] entries, an [acceptance.*] pair's alpha and a [datasets.*] component's mu and sigma")


def _ranges_of(doc: dict[str, Any], cat: Catalog, filename: str) -> dict[RangeKey, Range]:
    """Every range a catalog document declares, checked against the entries `cat` loaded from it."""
    groups = {"gpus": cat.gpus, "links": cat.links, "acceptance": cat.acceptance, "engines": cat.engines}
    checks: dict[str, EntryCheck] = {"gpus": lambda gpu, where: _check_gpu(gpu, cat.links, where),
                                     "links": _check_link, "acceptance": _check_alpha,
                                     "engines": _check_engine}
    out: dict[RangeKey, Range] = {}
    for table in RANGED_TABLES:
        out.update(_load_ranges(table, groups[table], doc.get(table, {}), filename, checks[table]))
    return {**out, **_component_ranges(doc.get("datasets", {}), cat.datasets, filename)}


def _refuse_undrawn_ranges(doc: dict[str, Any], filename: str) -> None:
    """A `FIELD_range` on a model, on a dataset's own fields, or on a component's weight, which
    --intervals never draws: refused by name (before the entries load, which would drop it or
    call it an unknown field), as the user meant it to count."""
    for key, raw in doc.get("models", {}).items():
        stray = next((name for name in raw if name.endswith(RANGE_SUFFIX)), None)
        if stray is not None:
            raise CatalogError(f"{filename} [{key}] {stray}: a model's shape is exact (its config.json), "
                               f"not drawn; {DRAWN}")
    for key, raw in doc.get("datasets", {}).items():
        comps = raw.get("components", [])
        named = [name for name in raw if name.endswith(RANGE_SUFFIX)]
        named += [f"components[{i}].{name}" for i, comp in enumerate(comps if isinstance(comps, list)
                                                                      else [comps])
                  if isinstance(comp, dict) for name in comp if name.endswith(RANGE_SUFFIX)
                  and name[: -len(RANGE_SUFFIX)] not in COMPONENT_RANGES]
        if named:
            raise CatalogError(f"{filename} [{key}] {named[0]}: not drawn; {DRAWN}")


def _component_ranges(tables: dict[str, Any], datasets: dict[str, Dataset],
                      filename: str) -> dict[RangeKey, Range]:
    """A prompt-length component's `mu_range` or `sigma_range`, keyed by the field's path inside
    its dataset: ("datasets", "sharegpt", "components.0.mu")."""
    out: dict[RangeKey, Range] = {}
    for key, raw in tables.items():
        comps = raw.get("components", [])
        for i, comp in enumerate(comps if isinstance(comps, list) else [comps]):
            for name in COMPONENT_RANGES:
                spec = comp.get(name + RANGE_SUFFIX)
                if spec is not None:
                    component = datasets[key].components[i]
                    where = f"{filename} [{key}] components[{i}].{name}{RANGE_SUFFIX}"
                    rng = _range(spec, getattr(component, name), where)
                    for end, value in (("low", rng.low), ("high", rng.high)):
                        _component({**asdict(component), name: value}, f"{where}: its {end} end {value:g}")
                    out[("datasets", key, f"components.{i}.{name}")] = rng
    return out


def _check_model_sizes(key: str, m: Model, filename: str) -> None:
    """A model's shape counts are >= 1 (an MoE model's expert size too) and its weights take at
    least MIN_BYTES_PER_PARAM: the cost and memory models divide by them or scale by them."""
    sizes = MODEL_SIZES + (("moe_intermediate",) if m.moe else ())
    small = next((name for name in sizes if getattr(m, name) < 1), None)
    if small is not None:
        raise CatalogError(f"{filename}: model {key!r}: field {small!r} must be >= 1, "
                           f"got {getattr(m, small)!r}")
    if m.bytes_per_param < MIN_BYTES_PER_PARAM:
        raise CatalogError(f"{filename}: model {key!r}: field 'bytes_per_param' must be at least "
                           f"{MIN_BYTES_PER_PARAM:g} (1-bit weights take 0.125), got {m.bytes_per_param!r}")


@cache
def builtin_catalog() -> Catalog:
    """The catalog shipped with psdsim (loaded once per process)."""
    doc = {table: _builtin(f"{table}.toml") for table in USER_TABLES}
    for table in USER_TABLES:
        _refuse_undrawn_ranges({table: doc[table]}, f"{table}.toml")
    models = _load_group(Model, doc["models"], "models.toml")
    cat = _assemble(
        _load_group(GPU, doc["gpus"], "gpus.toml"),
        _load_group(Link, doc["links"], "links.toml"),
        models,
        _load_datasets(doc["datasets"], "datasets.toml"),
        _load_acceptance(doc["acceptance"], models, "acceptance.toml"),
        _load_group(EngineProfile, doc["engines"], "engines.toml"),
        "built-in catalog",
    )
    ranges: dict[RangeKey, Range] = {}
    for table in (*RANGED_TABLES, "datasets"):
        ranges.update(_ranges_of({table: doc[table]}, cat, f"{table}.toml"))
    return replace(cat, ranges=ranges)


# What a user's catalog path must name, and how to fix one that does not
CATALOG_FILE = ("a catalog file", "give the path of a TOML catalog file (sim/catalog/*.toml show the form)")
USER_TABLES = ("gpus", "links", "models", "datasets", "acceptance", "engines")


@cache
def _user_catalog(path: str, mtime: float) -> Catalog:
    """The built-in catalog with a user's file merged over it (its entries win)."""
    p = Path(path)
    name = p.name
    try:
        doc = parse_document(tomllib.loads, p.read_text(encoding="utf-8"), "catalog", name)
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{name}: cannot read ({exc.__class__.__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{name}: not valid TOML ({exc})") from None
    unknown = set(doc) - set(USER_TABLES)
    if unknown:
        raise CatalogError(f"{name}: unknown table [{sorted(unknown)[0]}]; use {', '.join(USER_TABLES)}")
    for table in USER_TABLES:
        entries = doc.get(table, {})
        if not isinstance(entries, dict):
            raise CatalogError(f"{name}: [{table}] must be a table of entries ([{table}.KEY] and its "
                               f"fields), got {entries!r}")
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                raise CatalogError(f"{name} [{table}.{key}]: must be a table of fields, got {entry!r}")
    _refuse_undrawn_ranges(doc, name)
    base = builtin_catalog()
    models = {**base.models, **_load_group(Model, doc.get("models", {}), name)}
    cat = _assemble(
        {**base.gpus, **_load_group(GPU, doc.get("gpus", {}), name)},
        {**base.links, **_load_group(Link, doc.get("links", {}), name)},
        models,
        {**base.datasets, **_load_datasets(doc.get("datasets", {}), name)},
        {**base.acceptance, **_load_acceptance(doc.get("acceptance", {}), models, name)},
        {**base.engines, **_load_group(EngineProfile, doc.get("engines", {}), name)},
        name,
    )
    return replace(cat, ranges=_merged_ranges(base.ranges, doc, _ranges_of(doc, cat, name)))


def _merged_ranges(base: dict[RangeKey, Range], doc: dict[str, Any],
                   own: dict[RangeKey, Range]) -> dict[RangeKey, Range]:
    """The built-in ranges of the entries a user's file leaves alone, and the file's own: an entry
    the user redefines keeps only the ranges the user gives it (the built-in range was of the
    built-in value)."""
    redefined = {(table, _entry_name(key)) for table in USER_TABLES for key in doc.get(table, {})}
    return {**{k: r for k, r in base.items() if k[:2] not in redefined}, **own}


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The built-in catalog, or it with the user's catalog file at `path` merged over it."""
    if not path:
        return builtin_catalog()
    p = input_file(path, "catalog", *CATALOG_FILE)
    return _user_catalog(str(p), p.stat().st_mtime)
