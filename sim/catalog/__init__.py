"""The built-in catalog of GPUs, links, models, acceptance priors and dataset profiles.

The numbers live in TOML files beside this module, one entry per table, each with a `source`
naming where it comes from; this module loads them into frozen dataclasses and derives what
the cost model needs (parameter counts, weight and KV bytes) from a model's published shape, so
that a number is written once and checked against the published counts in the tests.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any

BYTES_PER_KV_ELEMENT = 2  # KV cache in bf16/fp16, vLLM's default kv_cache_dtype="auto"


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

    def allreduce_seconds(self, nbytes: float, ranks: int) -> float:
        """Ring all-reduce of `nbytes` over `ranks` GPUs (nccl-tests bus-bandwidth convention)."""
        if ranks <= 1:
            return 0.0
        wire = nbytes * 2.0 * (ranks - 1) / ranks
        return self.allreduce_latency_us * 1e-6 + wire / (self.allreduce_busbw_gbps * 1e9)


@dataclass(frozen=True)
class Model:
    """A dense decoder-only transformer, described by its config.json shape."""

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
    bytes_per_param: float
    source: str

    @property
    def params_per_layer(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h + (2 * self.head_dim if self.qk_norm else 0)
        mlp = 3 * h * self.intermediate
        norms = 2 * h
        return attention + mlp + norms

    @property
    def non_embedding_params(self) -> int:
        return self.layers * self.params_per_layer + self.hidden  # + final norm

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        copies = 1 if self.tie_embeddings else 2
        return self.non_embedding_params + copies * self.embedding_params

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.bytes_per_param

    @property
    def streamed_weight_bytes(self) -> float:
        """Weights read by one forward pass: the body plus the LM head (the embedding table is
        only gathered row-wise, so a separate input embedding costs no bandwidth)."""
        return (self.non_embedding_params + self.embedding_params) * self.bytes_per_param

    @property
    def body_flops_per_token(self) -> float:
        return 2.0 * self.non_embedding_params

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
    draft: str
    target: str
    alpha: float
    source: str


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU]
    links: dict[str, Link]
    models: dict[str, Model]
    datasets: dict[str, Dataset]
    acceptance: dict[tuple[str, str], AcceptancePrior]

    def acceptance_prior(self, draft: str, target: str) -> AcceptancePrior | None:
        return self.acceptance.get((draft, target))


def _check_entry(cls: type, key: str, raw: dict[str, Any], filename: str) -> dict[str, Any]:
    """Validate one TOML table against a dataclass: every field present, right type, no extras."""
    expected = {f.name: f.type for f in fields(cls) if f.name != "key"}
    unknown = set(raw) - set(expected)
    if unknown:
        raise CatalogError(f"{filename} [{key}]: unknown field {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    for name, typ in expected.items():
        if name not in raw:
            raise CatalogError(f"{filename} [{key}]: missing field {name!r}")
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
        if str(typ) in ("int", "float") and value < 0:
            raise CatalogError(f"{filename} [{key}]: field {name!r} must be >= 0, got {value!r}")
        out[name] = value
    return out


def _read(filename: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _load_simple(cls: type, filename: str) -> dict[str, Any]:
    return {key: cls(key=key, **_check_entry(cls, key, raw, filename))
            for key, raw in _read(filename).items()}


def _load_datasets() -> dict[str, Dataset]:
    out = {}
    for key, raw in _read("datasets.toml").items():
        raw = dict(raw)
        comps = raw.pop("components", None)
        if not comps:
            raise CatalogError(f"datasets.toml [{key}]: missing field 'components'")
        components = tuple(PromptComponent(**c) for c in comps)
        raw["components"] = components
        checked = _check_entry(Dataset, key, raw, "datasets.toml")
        if checked["min_prompt"] > checked["max_prompt"]:
            raise CatalogError(f"datasets.toml [{key}]: min_prompt exceeds max_prompt")
        out[key] = Dataset(key=key, **checked)
    return out


def _load_acceptance(models: dict[str, Model]) -> dict[tuple[str, str], AcceptancePrior]:
    out = {}
    for pair, raw in _read("acceptance.toml").items():
        draft, sep, target = (part.strip() for part in pair.partition("->"))
        if not sep or draft not in models or target not in models:
            raise CatalogError(f"acceptance.toml [{pair!r}]: expected 'draft -> target' of known models")
        checked = _check_entry(AcceptancePrior, pair, {"draft": draft, "target": target, **raw},
                               "acceptance.toml")
        if not 0.0 < checked["alpha"] < 1.0:
            raise CatalogError(f"acceptance.toml [{pair!r}]: alpha must be in (0, 1)")
        out[(draft, target)] = AcceptancePrior(**checked)
    return out


@cache
def builtin_catalog() -> Catalog:
    """The catalog shipped with psdsim (loaded once per process)."""
    models = _load_simple(Model, "models.toml")
    gpus, links = _load_simple(GPU, "gpus.toml"), _load_simple(Link, "links.toml")
    for key, gpu in gpus.items():
        if gpu.host_link not in links:
            raise CatalogError(f"gpus.toml [{key}]: host_link {gpu.host_link!r} is not in links.toml")
    return Catalog(gpus=gpus, links=links, models=models, datasets=_load_datasets(),
                   acceptance=_load_acceptance(models))
