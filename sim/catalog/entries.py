"""A catalog table's entries read and each held to its bounds: each field present and of its
type, every number within what any real machine or model has, and the rules of a GPU, link, model,
engine or acceptance prior that the arithmetic downstream divides or scales by.

The loader (sim/catalog/loader.py) holds each entry's point values to these, and the ranges
(sim/catalog/ranges.py) both ends of each range an entry carries, so a draw meets only values the
field could have been given.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from psdsim.sim.catalog.schema import (
    ENGINE_KINDS,
    GPU,
    AcceptancePrior,
    CatalogError,
    Dataset,
    EngineProfile,
    Link,
    Model,
    PromptComponent,
)
from psdsim.sim.numbers import finite, shown
from psdsim.sim.user_input import did_you_mean, typed

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
RANGE_SUFFIX = "_range"   # `FIELD_range = { low, high, why }` beside a numeric FIELD
# The annotations of the fields a catalog file sets, by the type each holds its value to (the
# others, a dataset's components and a prior's factors, are read by their own checks)
FIELD_KINDS = {"str": str, "int": int, "float": float, "bool": bool}


def check_entry(cls: type, key: str, raw: dict[str, Any], filename: str) -> dict[str, Any]:
    """Validate one TOML table against a dataclass: required fields present, right types, no
    extras (fields with a default may be left out)."""
    expected = {f.name: f for f in fields(cls) if f.name != "key"}
    unknown = set(raw) - set(expected)
    if unknown:
        name = sorted(unknown)[0]
        fix = did_you_mean(name, expected, f"use {', '.join(expected)}")
        raise CatalogError(f"{filename} [{key}]: unknown field {name!r}; {fix}")
    out: dict[str, Any] = {}
    for name, f in expected.items():
        if name not in raw:
            if f.default is MISSING:
                raise CatalogError(f"{filename} [{key}]: missing field {name!r}")
            continue
        value = raw[name]
        kind = FIELD_KINDS.get(str(f.type))
        if kind is not None:
            try:
                value = typed(value, kind)
                if kind is str and not value.strip():
                    raise ValueError("a blank string")
            except (TypeError, ValueError):
                raise CatalogError(f"{filename} [{key}]: field {name!r} must be {f.type}, "
                                   f"got {shown(value)}") from None
            if kind in (int, float):
                check_number(name, value, f"{filename} [{key}]")
        out[name] = value
    return out


def check_number(name: str, value: float, where: str) -> None:
    """Every numeric catalog field's bounds: 0 to MAX_NUMBER."""
    if value < 0:
        raise CatalogError(f"{where}: field {name!r} must be >= 0, got {value!r}")
    if value > MAX_NUMBER:
        raise CatalogError(f"{where}: field {name!r} must be at most {MAX_NUMBER:g}, got {value!r}")


def load_group(cls: type, tables: dict[str, Any], filename: str) -> dict[str, Any]:
    """The entries of a table whose fields are all checked by their types (gpus, links, models,
    engines), keyed by name."""
    return {key: cls(key=key, **check_entry(cls, key, without_ranges(raw), filename))
            for key, raw in tables.items()}


def load_datasets(tables: dict[str, Any], filename: str) -> dict[str, Dataset]:
    """Dataset profiles: their fields, each prompt-length component, and min_prompt <= max_prompt."""
    out = {}
    for key, raw in tables.items():
        raw = dict(raw)
        comps = raw.pop("components", None)
        if not comps:
            raise CatalogError(f"{filename} [{key}]: missing field 'components'")
        raw["components"] = tuple(checked_component(c, f"{filename} [{key}]") for c in
                                  (comps if isinstance(comps, list) else [comps]))
        checked = check_entry(Dataset, key, raw, filename)
        if checked["min_prompt"] > checked["max_prompt"]:
            raise CatalogError(f"{filename} [{key}]: min_prompt exceeds max_prompt")
        out[key] = Dataset(key=key, **checked)
    return out


def load_acceptance(tables: dict[str, Any], models: dict[str, Model],
                    filename: str) -> dict[tuple[str, str], AcceptancePrior]:
    """Acceptance priors keyed by (draft, target), each a model the catalog holds or a config.json
    path, whose model is derived when a scenario names that path (`psdsim calibrate` writes it
    absolute, as a scenario resolves its target and draft)."""
    from psdsim.sim.catalog.hf_config import is_config_path  # it imports the catalog package

    out = {}
    for pair, raw in tables.items():
        draft, sep, target = (part.strip() for part in pair.partition("->"))
        if not sep or not all(name in models or is_config_path(name) for name in (draft, target)):
            raise CatalogError(f"{filename} [{pair!r}]: expected 'draft -> target' of known models")
        checked = check_entry(AcceptancePrior, pair,
                              {"draft": draft, "target": target, **without_ranges(raw)}, filename)
        if "per_position" in checked:
            checked["per_position"] = position_factors(checked["per_position"], f"{filename} [{pair!r}]")
        out[(draft, target)] = AcceptancePrior(**checked)
        check_alpha(out[(draft, target)], f"{filename} [{pair!r}]")
    return out


def without_ranges(raw: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in raw.items() if not name.endswith(RANGE_SUFFIX)}


def checked_component(raw: Any, where: str) -> PromptComponent:
    """One log-normal of a prompt-length mixture: a positive weight and sigma, a finite mu (a zero
    weight or sigma, or a NaN, would turn every prompt length into NaN)."""
    if isinstance(raw, dict):
        raw = without_ranges(raw)
    if not isinstance(raw, dict) or set(raw) != {"weight", "mu", "sigma"}:
        raise CatalogError(f"{where}: each component is {{ weight = 1.0, mu = 5.8, sigma = 0.6 }}, "
                           f"got {raw!r}")
    values = {name: finite(value) for name, value in raw.items()}
    if any(v is None for v in values.values()) or values["weight"] <= 0 or values["sigma"] <= 0:
        raise CatalogError(f"{where}: a component's weight and sigma must be finite numbers > 0 and its mu "
                           f"finite, got {raw!r}")
    return PromptComponent(**values)


def position_factors(raw: Any, where: str) -> tuple[float, ...]:
    """Acceptance by draft position relative to the first: a list starting at 1, each factor in
    (0, 1] (a factor above 1 could push a request's rate past 1)."""
    values = [finite(v) for v in raw] if isinstance(raw, list) else [None]
    if not values or any(v is None or not 0.0 < v <= 1.0 for v in values) or values[0] != 1.0:
        raise CatalogError(f"{where}: field 'per_position' must be a list of factors in (0, 1] starting "
                           f"at 1.0 (position j's acceptance relative to the first's), got {raw!r}")
    return tuple(float(v) for v in values)


def check_gpu(gpu: GPU, links: dict[str, Link], where: str) -> None:
    if gpu.host_link not in links:
        raise CatalogError(f"{where}: host_link {gpu.host_link!r} is not a known link")
    if min(gpu.memory_gb, gpu.memory_bandwidth_gbps, gpu.bf16_tflops) < MIN_RATE:
        raise CatalogError(f"{where}: memory, bandwidth and TFLOPS must be at least {MIN_RATE:g} "
                           "(GB, GB/s, TFLOPS)")
    if gpu.fp8_tflops and gpu.fp8_tflops < MIN_RATE:
        raise CatalogError(f"{where}: fp8_tflops must be 0 (no FP8 tensor cores) or at least "
                           f"{MIN_RATE:g} TFLOPS, got {gpu.fp8_tflops!r}")


def check_link(link: Link, where: str) -> None:
    if min(link.p2p_bandwidth_gbps, link.allreduce_busbw_gbps) < MIN_RATE:
        raise CatalogError(f"{where}: p2p_bandwidth_gbps and allreduce_busbw_gbps must be at least "
                           f"{MIN_RATE:g} GB/s")


ELEMENTWISE = ("elementwise_hidden", "elementwise_heads", "elementwise_kv_heads", "elementwise_mlp")


def check_engine(e: EngineProfile, where: str) -> None:
    if e.kind not in ENGINE_KINDS:
        raise CatalogError(f"{where}: kind must be one of {', '.join(ENGINE_KINDS)}")
    if e.kind == "execution" and e.kernels_per_layer < 1:
        raise CatalogError(f"{where}: kernels_per_layer must be >= 1")
    if not 0.0 <= e.attention_efficiency <= 1.0:
        raise CatalogError(f"{where}: attention_efficiency must be in [0, 1] (0: attention inside the "
                           f"pass's roofline), got {e.attention_efficiency!r}")
    negative = next((name for name in ELEMENTWISE if getattr(e, name) < 0), None)
    if negative:
        raise CatalogError(f"{where}: {negative} must be >= 0, got {getattr(e, negative)!r}")


def check_alpha(prior: AcceptancePrior, where: str) -> None:
    """The prior's mean is the scenario's `acceptance` when drawn, so it takes the same bound:
    (0, MAX_ACCEPTANCE] (sim/acceptance.py, imported here: it loads numpy, which start-up must not)."""
    from psdsim.sim.acceptance import MAX_ACCEPTANCE

    if not 0.0 < prior.alpha <= MAX_ACCEPTANCE:
        raise CatalogError(f"{where}: alpha must be in (0, 1 - 1e-9], got {prior.alpha!r}")


def check_model_sizes(key: str, m: Model, filename: str) -> None:
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


