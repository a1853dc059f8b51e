"""Scenarios: one frozen dataclass describing a run, loaded from TOML with strict validation.

A scenario file may be flat (`k = 4`) or grouped into the tables `[run]`, `[models]`,
`[hardware]`, `[engine]`, `[workload]` and `[costs]`; field names are the flat names of
docs/design.md §7, so `--set k=4` works whatever the file's layout. Every check raises a ScenarioError
whose message is one line naming the field and the fix; nothing else escapes from loading.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from psdsim.sim.catalog import CATALOG_FILE, Catalog, CatalogError, load_catalog, vocabulary_mismatch
from psdsim.sim.catalog.hf_config import (
    CONFIG_FILE,
    ConfigError,
    check_context,
    derive_model,
    display_name,
    is_config_path,
)
from psdsim.sim.documents import parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_path
from psdsim.sim.numbers import integer, number, shown
from psdsim.sim.presets import preset_fields

METHODS = ("ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris")
SCHEDULERS = ("vllm-v0", "vllm-v1")
SCHEDULER_ENGINES = {"vllm-v0": "vllm-0.9.2-v0-eager", "vllm-v1": "vllm-v1"}  # engine = "" resolves so
PREEMPTION_MODES = ("recompute", "swap")
KV_PATCHES = ("has_deferred", "default", "intended")
PEARL_VARIANTS = ("minedraft", "per-request")
# MineDraft's code (the default, first) or the behaviour it meant (docs/minedraft-fidelity.md)
PEARL_STALE = ("rejected", "as-fresh", "rate")
SWAP_IN_BATCHES = ("verified", "drafted")
PSD_PREFILL_CHUNKS = ("verified-only", "every-pass")
SECTIONS = ("run", "models", "hardware", "engine", "workload", "slo", "costs")


def _field(default: Any, section: str, kind: type, doc: str, optional: bool = False) -> Any:
    return field(default=default,
                 metadata={"section": section, "kind": kind, "doc": doc, "optional": optional})


@dataclass(frozen=True)
class Scenario:
    """Everything that determines a simulated run. Same scenario + same seed => same result."""

    # [run]
    name: str = _field("default", "run", str, "label used in result folders and tables")
    method: str = _field("psd", "run", str, "ar | sd | psd | sd-2m | sd-5gpu | pearl | psd+tetris")
    k: int = _field(3, "run", int, "draft tokens per request per step (num_speculative_tokens)")
    m: int = _field(16, "run", int, "requests per verification batch (max_num_seqs); PSD keeps 2m")
    seed: int = _field(0, "run", int, "seed of the one numpy Generator every random draw uses")
    k_policy: str = _field("fixed", "run", str,
                           "fixed | adaptive (sd, sd-2m, sd-5gpu, psd: each drafting picks the k' in 0..k "
                           "with the most expected tokens/s; 0 = no speculation)")
    rebalance: bool = _field(False, "run", bool,
                             "PSD: keep assign() balancing after decoding starts (costs wasted steps)")
    balance_by: str = _field("requests", "run", str,
                             "PSD: what assign() balances the two sub-batches by: requests (MineDraft) "
                             "| kv (the KV tokens their requests hold)")
    extra: int = _field(0, "run", int, "psd+tetris: extra draft tokens per request (e)")
    sub_batches: int = _field(2, "run", int, "PSD sub-batches in the ring (MineDraft: 2)")
    drafters: int = _field(1, "run", int, "PSD drafter GPUs (MineDraft: 1)")
    sd_5gpu_layout: str = _field("drafter", "run", str,
                                 "sd-5gpu: the 5th GPU as the draft's own GPU, or one more TP rank")
    pearl_variant: str = _field("minedraft", "run", str,
                                "pearl: minedraft (stale drafts scored batch-wide) | per-request "
                                "(the reference engine's: k - 1 kept, first drafted ahead checked)")
    pearl_stale: str = _field("rejected", "run", str,
                              "pearl minedraft: stale drafts are scored and accept nothing, the lower "
                              "bound | as-fresh (accepted like fresh ones, the upper bound) | rate "
                              "(accepted at pearl_stale_acceptance per token)")
    pearl_stale_acceptance: float = _field(0.0, "run", float,
                                           "pearl_stale = rate: per-token acceptance of a stale draft, "
                                           "in [0, 1], leading run as for fresh drafts (unpublished)")
    confidence_spread: float = _field(4.0, "run", float,
                                      "psd+tetris: Beta concentration of per-token draft confidence")
    sampler_output: str = _field("full", "run", str,
                                 "what returns over the link: full vocab rows, or compact ids+probs")
    transfers: str = _field("per-tensor", "run", str,
                            "per-tensor: each tensor its own message, the output received once the "
                            "driver has drafted (MineDraft's NCCL) | one-message: one each way, the "
                            "output leaves at the pass's end (the reference engine)")
    catalog: str = _field("", "run", str,
                          "a TOML file of extra or overriding GPUs, links, models, datasets, priors")
    # [models]
    target: str = _field("qwen3-32b", "models", str, "target (verifier) model: a catalog key, or a "
                         "Hugging Face config.json (or ./folder holding one)")
    draft: str = _field("qwen3-1.7b", "models", str, "draft model: a catalog key or a config.json")
    acceptance: float | None = _field(None, "models", float,
                                      "mean per-token acceptance; absent = catalog prior",
                                      optional=True)
    acceptance_spread: float = _field(20.0, "models", float,
                                      "Beta concentration of per-request acceptance (a+b)")
    # [hardware]
    gpu: str = _field("l40s", "hardware", str, "verifier GPU type")
    drafter_gpu: str = _field("", "hardware", str, "drafter GPU type; empty = same as gpu")
    link: str = _field("pcie4", "hardware", str, "drafter<->verifier link (and TP fabric)")
    tp_link: str = _field("", "hardware", str, "verifier TP fabric; empty = same as link")
    tensor_parallel_size: int = _field(4, "hardware", int, "verifier TP degree")
    # [engine]
    gpu_memory_utilization: float = _field(0.65, "engine", float, "fraction of GPU memory vLLM may use")
    kv_sizing: str = _field("vllm", "engine", str,
                            "KV blocks counted as vllm-v0 counts them (a co-located draft's weights left "
                            "out; MineDraft's KV heads over TP + 1) | exact: as each GPU holds them")
    block_size: int = _field(16, "engine", int, "KV block size in tokens")
    max_model_len: int = _field(2048, "engine", int, "prompt + output limit per request")
    max_num_batched_tokens: int = _field(2048, "engine", int, "token budget of one engine step")
    scheduler: str = _field("vllm-v0", "engine", str, "vllm-v0 (MineDraft's 0.9.2) | vllm-v1")
    engine: str = _field("", "engine", str,
                         "execution profile pricing each step (`psdsim catalog`): roofline | "
                         "vllm-0.9.2-v0-eager | vllm-v1; empty = the scheduler's own (sim/execution.py)")
    enable_chunked_prefill: bool | None = _field(None, "engine", bool,
                                                 "absent = the engine's default (v0 off, v1 on)",
                                                 optional=True)
    preemption_mode: str = _field("recompute", "engine", str, "recompute | swap (vllm-v0 only)")
    kv_patch: str = _field("has_deferred", "engine", str,
                           "PSD KV: has_deferred (MineDraft's patch as V0 runs it: the drafted sub-"
                           "batch appends; the blocks of default) | default (vLLM: all append) | "
                           "intended (what-if: a request grows only when verified)")
    swap_in_batch: str = _field("verified", "engine", str,
                                "PSD: a swapped-in request joins the sub-batch verified in its step (the "
                                "code) | drafted (what-if: the one drafted next)")
    psd_prefill_chunks: str = _field("verified-only", "engine", str,
                                     "PSD, chunked prefill: a prompt chunk is computed only in its sub-"
                                     "batch's verify pass (the code) | every-pass (what-if)")
    swap_space_gb: float = _field(4.0, "engine", float, "CPU swap space per GPU (--swap-space)")
    overlap_draft_prefill: bool = _field(False, "engine", bool,
                                         "a drafter on its own GPU prefills prompts while the target "
                                         "does (the reference engine), not after it")
    num_gpu_blocks_override: int | None = _field(None, "engine", int,
                                                 "cap every KV pool at this many blocks", optional=True)
    # [workload]
    dataset: str = _field("sharegpt", "workload", str, "sharegpt | arena | spec-bench | tough")
    requests: int = _field(1000, "workload", int, "number of requests (prompts)")
    n: int = _field(1, "workload", int,
                    "samples per prompt (SamplingParams.n): a prompt fans out into n requests with "
                    "its prompt, arrival and acceptance, as vLLM does; latency and TTFT per prompt")
    output_len: int = _field(256, "workload", int, "output tokens per request (EOS ignored)")
    prompt_len: int = _field(0, "workload", int, "fixed prompt length; 0 = dataset distribution")
    rate: float | None = _field(None, "workload", float,
                                "Poisson arrival rate, requests/s (requests / rate at most 1e9 s); "
                                "absent = all at t=0",
                                optional=True)
    trace: str = _field("", "workload", str,
                        "request trace replacing dataset, rate and lengths: psdsim's CSV or JSONL, an "
                        "Azure or BurstGPT CSV, Mooncake JSONL or a vllm bench serve result")
    trace_speedup: float = _field(1.0, "workload", float,
                                  "replay the trace at this multiple of its recorded rate")
    trace_start_s: float = _field(0.0, "workload", float,
                                  "replay the trace from this second of its clock (a public format's "
                                  "counts from its first request)")
    trace_duration_s: float | None = _field(None, "workload", float,
                                            "replay this many seconds of the trace from trace_start_s; "
                                            "absent = to its end", optional=True)
    abort_fraction: float = _field(0.0, "workload", float,
                                   "share of requests the client cancels while they decode")
    abort_window_s: float = _field(10.0, "workload", float,
                                   "cancellations come uniformly within this long after the first token")
    # [slo] latency objectives for goodput; absent = not measured
    slo_ttft_ms: float | None = _field(None, "slo", float, "time-to-first-token objective", optional=True)
    slo_tpot_ms: float | None = _field(None, "slo", float, "time-per-output-token objective", optional=True)
    slo_latency_ms: float | None = _field(None, "slo", float, "end-to-end latency objective",
                                          optional=True)
    # [costs] analytic cost-model constants (see sim/costs.py for their sources)
    mem_efficiency: float = _field(0.81, "costs", float, "achieved fraction of memory bandwidth")
    compute_efficiency: float = _field(0.77, "costs", float, "achieved fraction of peak BF16 FLOPs")
    launch_overhead_us: float = _field(50.0, "costs", float,
                                       "eager-mode launch cost per layer per forward "
                                       "(engine = roofline only)")
    step_overhead_ms: float = _field(1.2, "costs", float,
                                     "fixed framework cost per engine step (engine = roofline only)")
    reject_overhead_ms: float = _field(0.3, "costs", float, "fixed rejection-sampling cost per verify")
    activation_reserve_gb: float = _field(1.5, "costs", float, "per-GPU memory kept for activations")
    profile: str = _field("", "costs", str,
                          "fitted cost profile (JSON from `psdsim calibrate`); absent = analytic model")

    @property
    def speculates(self) -> bool:
        """Every method but AR drafts tokens for the target to verify."""
        return self.method != "ar"

    @property
    def batch_managed(self) -> bool:
        """MineDraft's two sub-batches with one drafter, refilled by its Batch Manager (whose
        imbalance the summary reports); other N and D run the round-robin ring."""
        return self.method in ("psd", "psd+tetris") and self.sub_batches == 2 and self.drafters == 1

    @property
    def drafter_gpu_key(self) -> str:
        return self.drafter_gpu or self.gpu

    @property
    def engine_key(self) -> str:
        """The engine profile that prices the run: `engine`, or the one the scheduler emulates."""
        return self.engine or SCHEDULER_ENGINES[self.scheduler]

    @property
    def tp_link_key(self) -> str:
        return self.tp_link or self.link

    @property
    def chunked_prefill(self) -> bool:
        """Whether prefills are chunked into mixed steps (vLLM V1 always chunks)."""
        if self.enable_chunked_prefill is None:
            return self.scheduler == "vllm-v1"
        return self.enable_chunked_prefill

    def replace(self, **changes: Any) -> Scenario:
        """A validated copy with some fields changed."""
        return validate(replace(self, **changes))

    def digest(self) -> str:
        """Short stable hash of every field, for naming result folders."""
        return hashlib.sha256(scenario_to_toml(self).encode()).hexdigest()[:8]


FIELDS = {f.name: f for f in fields(Scenario)}
PATH_FIELDS = ("trace", "catalog", "profile")
MODEL_FIELDS = ("target", "draft")   # a catalog key, or the path of a Hugging Face config.json


def catalog_for(s: Scenario) -> Catalog:
    """The catalog a scenario runs with: built-in, or with its `catalog` file merged over it, plus
    the models its target and draft name by a config.json path (keyed by that path)."""
    try:
        cat = load_catalog(s.catalog or None)
    except CatalogError as exc:
        raise ScenarioError("catalog", str(exc), "correct that entry; the built-in sim/catalog/*.toml "
                            "show every field with its unit") from None
    return _with_config_models(cat, s)


def _with_config_models(cat: Catalog, s: Scenario) -> Catalog:
    """`cat` plus the model of each of target and draft naming a config.json (a catalog key that
    looks like a path still wins); a config psdsim cannot price is an error naming the key."""
    paths = {name: getattr(s, name) for name in MODEL_FIELDS}
    paths = {name: path for name, path in paths.items() if is_config_path(path) and path not in cat.models}
    if not paths:
        return cat
    models = dict(cat.models)
    for name, path in paths.items():
        try:
            derived = derive_model(path)
            check_context(derived, s.max_model_len)
            models[path] = derived.model
        except ConfigError as exc:
            where = f"{name}={display_name(path)}" + (f": {exc.key}" if exc.key else "")
            raise ScenarioError(where, exc.problem, exc.fix) from None
    return replace(cat, models=models)


def field_section(name: str) -> str:
    return FIELDS[name].metadata["section"]


# ---------------------------------------------------------------------------------------------
# Parsing


def _coerce(name: str, value: Any) -> Any:
    """Check a TOML value's type against the field (ints are accepted where floats are)."""
    meta = FIELDS[name].metadata
    kind = meta["kind"]
    if value is None and meta["optional"]:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        raise ScenarioError(name, f"must be {_kind_name(kind)}, got {value!r}",
                            f"write {name} = {_example(name)}")
    if kind is float and not math.isfinite(value):
        raise ScenarioError(name, f"must be a finite number, got {value!r}",
                            f"write {name} = {_example(name)}")
    if kind is str and not _is_utf8(value):
        fix = ("rename that file or folder to a UTF-8 name" if name in PATH_FIELDS + MODEL_FIELDS
               else f"write {name} in UTF-8 text")
        raise ScenarioError(name, f"{value!a} holds bytes that are not UTF-8 text, which scenario.toml "
                            "(UTF-8) cannot record for the run to be repeated", fix)
    return value


def _is_utf8(text: str) -> bool:
    """Whether text encodes as UTF-8: a path read from a non-UTF-8 file name carries its bytes
    as lone surrogates ('\\udcff'), which no TOML file can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind_name(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[kind]


def _example(name: str) -> str:
    default = FIELDS[name].default
    if default is None or default == "":
        return {"acceptance": "0.6", "rate": "4.0", "drafter_gpu": '"l40s"', "tp_link": '"pcie4"',
                "trace": '"requests.jsonl"', "catalog": '"my_catalog.toml"', "profile": '"profile.json"',
                "enable_chunked_prefill": "true",
                "num_gpu_blocks_override": "2000"}.get(name, "500.0")
    if isinstance(default, bool):
        return "true" if default else "false"
    return f'"{default}"' if isinstance(default, str) else str(default)


def plain_label(text: str) -> str:
    """text as a label safe in a folder name (result folders are named after the scenario)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip(".-") or "my-run"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """The fix for an unknown name: the nearest known one, or (none near) where the list is."""
    known = list(choices)
    close = list(dict.fromkeys([k for k in known if k.startswith(name)]
                               + difflib.get_close_matches(name, known, n=3, cutoff=0.6)))[:3]
    if close:
        return f"did you mean {' or '.join(map(repr, close))}?"
    return "see `psdsim scenario` for every field and its value (docs/scenario.md explains them)"


def parse_override(text: str) -> tuple[str, Any]:
    """`FIELD=VALUE` from the command line, VALUE parsed by the field's type."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name:
        raise ScenarioError("--set", f"expected FIELD=VALUE, got {text!r}", "write e.g. --set k=4")
    if name not in FIELDS:
        raise ScenarioError(name, "unknown field", did_you_mean(name, FIELDS))
    meta = FIELDS[name].metadata
    kind = meta["kind"]
    if meta["optional"] and raw.lower() in ("", "none", "null"):
        return name, None
    if kind is bool:
        lowered = raw.lower()
        if lowered in ("true", "1", "yes", "on"):
            return name, True
        if lowered in ("false", "0", "no", "off"):
            return name, False
        raise ScenarioError(name, f"must be true or false, got {raw!r}", f"write --set {name}=true")
    try:
        if kind is int:
            return name, integer(raw)
        if kind is float:
            return name, number(raw)
    except ValueError:
        raise ScenarioError(name, f"must be {_kind_name(kind)}, got {raw!r}",
                            f"write --set {name}={_example(name).strip(chr(34))}") from None
    return name, raw.strip('"').strip("'")


def _flatten(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Accept flat keys and the known tables; reject anything else, naming it."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            if key not in SECTIONS:
                raise ScenarioError(f"[{key}]", f"unknown table in {source}",
                                    f"use the tables {', '.join(SECTIONS)} or flat keys")
            for sub, subvalue in value.items():
                if sub not in FIELDS:
                    raise ScenarioError(f"{key}.{sub}", f"unknown field in {source}",
                                        did_you_mean(sub, FIELDS))
                if field_section(sub) != key:
                    raise ScenarioError(f"{key}.{sub}", f"belongs in [{field_section(sub)}]",
                                        f"move {sub} to the [{field_section(sub)}] table")
                _once(flat, sub, source, key)
                flat[sub] = subvalue
        elif key in FIELDS:
            _once(flat, key, source, field_section(key))
            flat[key] = value
        else:
            raise ScenarioError(key, f"unknown field in {source}", did_you_mean(key, FIELDS))
    return flat


def _once(flat: Mapping[str, Any], name: str, source: str, section: str) -> None:
    """A field given both at the top level and in its table would silently lose one value."""
    if name in flat:
        raise ScenarioError(name, f"given twice in {source}, at the top level and in [{section}]",
                            f"keep one {name} (in [{section}] or at the top, not both)")


def scenario_from_mapping(values: Mapping[str, Any], source: str = "scenario") -> Scenario:
    """Build and validate a scenario from (possibly sectioned) field values."""
    flat = _flatten(values, source)
    coerced = {name: _coerce(name, value) for name, value in flat.items()}
    return validate(Scenario(**coerced))


def read_toml(p: Path, field_name: str, what: str) -> tuple[str, dict[str, Any]]:
    """(text, document) of a TOML file the user named in `field_name` (scenario, sweep spec,
    plan); every way it can be unreadable is a one-line ScenarioError."""
    input_file(p, field_name, "a TOML file", f"give the path of {what}")  # a pipe would be read forever
    try:
        text = p.read_text(encoding="utf-8")
        return text, parse_document(tomllib.loads, text, field_name, p.name)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(field_name, f"{p.name} is not valid TOML ({exc})",
                            "fix the TOML syntax at the position given") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(field_name, f"cannot read {str(p)!r} ({exc.__class__.__name__})",
                            "give a readable UTF-8 TOML file") from None


def load_scenario(path: str | Path | None = None, overrides: Iterable[str] = (),
                  method: str | None = None, preset: str | None = None) -> Scenario:
    """A preset (if any), then a scenario file (None = the built-in default), then `--set`."""
    values: dict[str, Any] = preset_fields(preset) if preset else {}
    if path is not None:
        if not str(path):   # Path("") is ".", the current folder: say what was given
            raise ScenarioError("scenario", "the path is empty", "give the path of a .toml scenario, or "
                                "none (None) for the default")
        p = Path(path)
        values.update(_flatten(read_toml(p, "scenario", "a .toml scenario, or none for the default")[1],
                               p.name))
        if "name" not in values or preset:
            values["name"] = plain_label(p.stem)
        for name in PATH_FIELDS + MODEL_FIELDS:  # relative to the scenario file
            if _is_path(name, values.get(name)):
                values[name] = str(resolved_path_field(name, p.parent / values[name]))
    for text in overrides:
        name, value = parse_override(text)
        if _is_path(name, value):
            value = str(resolved_path_field(name, value))
        values[name] = value
    if method is not None:
        values["method"] = method
    return scenario_from_mapping(values, str(path) if path else "scenario")


# What each path field names, for its refusals: (what it must be, how to fix it)
PATH_WHAT = {
    "trace": ("a trace file", "give the path of a JSONL or CSV request trace file"),
    "profile": ("a profile", "give the path of a profile written by `psdsim calibrate … --out profile.json`"),
    "catalog": CATALOG_FILE, "target": CONFIG_FILE, "draft": CONFIG_FILE,
}


def resolved_path_field(name: str, value: str | Path) -> Path:
    """A path field's value (trace, catalog, profile, a target or draft config) made absolute,
    refused in one line naming the field if the system cannot follow it."""
    return input_path(value, name, PATH_WHAT[name][1])


def path_field_file(name: str, value: str | Path) -> Path:
    """The resolved file a path field (trace, profile) names; refused in one line naming the
    field where it names no regular file psdsim can read."""
    return input_file(value, name, *PATH_WHAT[name])


def _is_path(name: str, value: Any) -> bool:
    """Whether a field's value is a path to resolve (a model field only if it names a config.json)."""
    if name in MODEL_FIELDS:
        return is_config_path(value)
    return name in PATH_FIELDS and isinstance(value, str) and bool(value)


# ---------------------------------------------------------------------------------------------
# Validation


def _need(ok: bool, name: str, problem: str, fix: str) -> None:
    if not ok:
        raise ScenarioError(name, problem, fix)


def _in_catalog(name: str, value: str, table: Mapping[str, Any], what: str) -> None:
    also = ", or the path of a Hugging Face config.json" if name in MODEL_FIELDS else ""
    _need(value in table, name, f"unknown {what} {value!r}",
          f"use one of: {', '.join(table)} (see `psdsim catalog`){also}")


def _positive(s: Scenario, *names: str) -> None:
    for name in names:
        v = getattr(s, name)
        _need(v > 0, name, f"must be > 0, got {v!r}", f"set {name} to a positive number")


def _in_range(s: Scenario, name: str, lo: float, hi: float) -> None:
    v = getattr(s, name)
    _need(lo <= v <= hi, name, f"must be between {_bound(lo)} and {_bound(hi)}, got {shown(v)}",
          f"set {name} to a value in [{_bound(lo)}, {_bound(hi)}]")


def _bound(value: float) -> str:
    """A bound as a message shows it: an integer whole (2**63 - 1 is no 9.22337e+18), else short."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _at_most(s: Scenario, name: str, hi: float, why: str) -> None:
    """An upper bound past which a value describes no machine or run (`why` says which), so that
    no product of it overflows the arithmetic the run does."""
    v = getattr(s, name)
    _need(v <= hi, name, f"{shown(v)} is past {_bound(hi)}, {why}", f"set {name} to at most {_bound(hi)}")


_CHECKS: list[Callable[[Scenario, Catalog], None]] = []


def _check(fn: Callable[[Scenario, Catalog], None]) -> Callable[[Scenario, Catalog], None]:
    _CHECKS.append(fn)
    return fn


@_check
def _check_run(s: Scenario, cat: Catalog) -> None:
    _need(bool(s.name.strip()), "name", "must not be empty", 'write name = "my-run"')
    safe = plain_label(s.name)
    _need(s.name == safe, "name", f"{s.name!r} is not a plain label (it names result folders: no "
          "path separators, leading dots or spaces)", f"write name = {safe!r}")
    _need(len(s.name) <= MAX_NAME, "name", f"{len(s.name)} characters, past {MAX_NAME}: it names result "
          "folders, NAME-METHOD-HASH, and a folder's name holds at most 255 bytes",
          f"write a name of at most {MAX_NAME} characters")
    _need(s.method in METHODS, "method", f"unknown method {s.method!r}",
          f"use one of: {', '.join(METHODS)}")
    _in_range(s, "k", 1, MAX_K)
    _in_range(s, "m", 1, 4096)
    _in_range(s, "extra", 0, MAX_K)
    if s.method == "psd+tetris":
        _need(s.extra >= 1, "extra", "psd+tetris drafts k + extra tokens, extra must be >= 1",
              "set extra=1 (MineDraft's runs use 1 to 3)")
        _need(s.sub_batches == 2 and s.drafters == 1, "sub_batches",
              "psd+tetris is modelled for MineDraft's two sub-batches and one drafter only",
              "use sub_batches=2 and drafters=1, or method=psd")
    _in_range(s, "sub_batches", 2, 16)
    _in_range(s, "drafters", 1, 16)
    _need(s.drafters < s.sub_batches, "drafters", "more drafter GPUs than sub-batches to draft",
          f"set drafters to at most {s.sub_batches - 1}")
    _one_of(s, "sd_5gpu_layout", ("drafter", "tp"))
    _one_of(s, "pearl_variant", PEARL_VARIANTS)
    _one_of(s, "pearl_stale", PEARL_STALE)
    _in_range(s, "pearl_stale_acceptance", 0.0, 1.0)
    _need(s.pearl_stale == "rate" or s.pearl_stale_acceptance == 0.0, "pearl_stale_acceptance",
          f'applies only with pearl_stale = "rate", not "{s.pearl_stale}"',
          "set pearl_stale=rate, or remove pearl_stale_acceptance")
    _one_of(s, "balance_by", ("requests", "kv"))
    _need(s.balance_by == "requests" or (s.method == "psd" and s.batch_managed), "balance_by",
          f"balancing by KV is built for two-sub-batch psd, not {s.method}"
          + (" as a ring" if s.method == "psd" else ""), "set balance_by=requests")
    _one_of(s, "k_policy", ("fixed", "adaptive"))
    _need(s.k_policy == "fixed" or s.method in ("sd", "sd-2m", "sd-5gpu")
          or (s.method == "psd" and s.batch_managed), "k_policy",
          f"adaptive k is built for sd, sd-2m, sd-5gpu and two-sub-batch psd, not {s.method}"
          + (" as a ring" if s.method == "psd" else ""), "set k_policy=fixed")
    _one_of(s, "sampler_output", ("full", "compact"))
    _one_of(s, "transfers", ("per-tensor", "one-message"))
    _one_of(s, "kv_sizing", ("vllm", "exact"))
    _positive(s, "confidence_spread")
    _at_most(s, "confidence_spread", MAX_CONCENTRATION, CONCENTRATION_WHY)
    _need(s.seed >= 0, "seed", f"must be >= 0, got {shown(s.seed)}", "use a non-negative integer seed")
    _at_most(s, "seed", MAX_SEED, "the largest integer TOML holds (scenario.toml records the seed)")


def _model_name(value: str) -> str:
    """A target or draft as a message names it: a catalog key, or a config.json's folder/name."""
    return display_name(value) if is_config_path(value) else value


@_check
def _check_models(s: Scenario, cat: Catalog) -> None:
    _in_catalog("target", s.target, cat.models, "model")
    _in_catalog("draft", s.draft, cat.models, "model")
    draft, target = cat.models[s.draft], cat.models[s.target]
    mismatch = vocabulary_mismatch(draft, target, (_model_name(s.draft), _model_name(s.target)))
    _need(mismatch is None or not s.speculates, "draft", mismatch or "",
          f"pick a draft with the target's vocab_size, {target.vocab:,} (a model of its family)")
    if s.acceptance is not None:
        # the trace reader's bound too: a higher mean would be clamped where it is drawn (imported
        # here: sim.acceptance loads numpy, which `psdsim run --help` must not)
        from psdsim.sim.acceptance import MAX_ACCEPTANCE

        _need(0.0 < s.acceptance <= MAX_ACCEPTANCE, "acceptance",
              f"must be in (0, 1 - 1e-9], got {s.acceptance}",
              "set acceptance to a per-token acceptance rate such as 0.6")
    elif s.speculates:
        _need(cat.acceptance_prior(s.draft, s.target) is not None, "acceptance",
              f"no catalog prior for draft {s.draft!r} with target {s.target!r}",
              "set acceptance to the per-token acceptance rate you expect, e.g. acceptance=0.6")
    _positive(s, "acceptance_spread")
    _at_most(s, "acceptance_spread", MAX_CONCENTRATION, CONCENTRATION_WHY)


@_check
def _check_hardware(s: Scenario, cat: Catalog) -> None:
    _in_catalog("gpu", s.gpu, cat.gpus, "GPU")
    if s.drafter_gpu:
        _in_catalog("drafter_gpu", s.drafter_gpu, cat.gpus, "GPU")
    _in_catalog("link", s.link, cat.links, "link")
    if s.tp_link:
        _in_catalog("tp_link", s.tp_link, cat.links, "link")
    tp = s.tensor_parallel_size
    target = cat.models[s.target]
    _need(tp >= 1 and target.heads % tp == 0, "tensor_parallel_size",
          f"must divide the target's {target.heads} attention heads, got {shown(tp)}",
          f"use one of its divisors: {_divisors(target.heads)}")


def _divisors(n: int) -> str:
    """The tensor-parallel sizes an n-head target splits evenly into, as '1, 2, 3 or 6'."""
    sizes = [str(d) for d in range(1, n + 1) if n % d == 0]
    return " or ".join([", ".join(sizes[:-1]), sizes[-1]]) if len(sizes) > 1 else sizes[0]


def _one_of(s: Scenario, name: str, allowed: tuple[str, ...]) -> None:
    value = getattr(s, name)
    _need(value in allowed, name, f"unknown value {value!r}", f"use one of: {', '.join(allowed)}")


@_check
def _check_engine(s: Scenario, cat: Catalog) -> None:
    _in_range(s, "gpu_memory_utilization", 0.05, 1.0)
    _in_range(s, "block_size", 1, 256)
    _in_range(s, "max_model_len", 2, MAX_MODEL_LEN)
    _one_of(s, "scheduler", SCHEDULERS)
    if s.engine:
        _in_catalog("engine", s.engine, cat.engines, "engine")
    _one_of(s, "preemption_mode", PREEMPTION_MODES)
    _one_of(s, "kv_patch", KV_PATCHES)
    _one_of(s, "swap_in_batch", SWAP_IN_BATCHES)
    _one_of(s, "psd_prefill_chunks", PSD_PREFILL_CHUNKS)
    if s.scheduler == "vllm-v1":
        _need(s.enable_chunked_prefill is not False, "enable_chunked_prefill",
              "vllm-v1 always chunks prefills", "remove enable_chunked_prefill or use vllm-v0")
        _need(s.preemption_mode == "recompute", "preemption_mode",
              "vllm-v1 preempts by recompute only", "use preemption_mode=recompute or vllm-v0")
    _in_range(s, "max_num_batched_tokens", 1, MAX_STEP_TOKENS)
    if not s.chunked_prefill:
        _need(s.max_num_batched_tokens >= s.max_model_len, "max_num_batched_tokens",
              f"must be >= max_model_len ({s.max_model_len}) without chunked prefill, "
              f"got {s.max_num_batched_tokens}",
              f"set max_num_batched_tokens to at least {s.max_model_len}")
    if s.num_gpu_blocks_override is not None:
        _in_range(s, "num_gpu_blocks_override", 1, 1 << 30)
    _need(s.swap_space_gb >= 0, "swap_space_gb", f"must be >= 0, got {s.swap_space_gb}",
          "set swap_space_gb to 0 or more")
    _at_most(s, "swap_space_gb", MAX_MEMORY_GB, MEMORY_WHY)


@_check
def _check_workload(s: Scenario, cat: Catalog) -> None:
    _in_catalog("dataset", s.dataset, cat.datasets, "dataset")
    ds = cat.datasets[s.dataset]
    _need(s.requests >= 1, "requests", f"must be >= 1, got {s.requests}", "set requests=1000")
    _at_most(s, "requests", MAX_REQUESTS, "a trillion prompts, whose results alone no disk holds")
    _need(s.n >= 1, "n", f"must be >= 1, got {shown(s.n)}", "set n=1 (one sample per prompt) or more")
    _at_most(s, "n", MAX_SAMPLES, "the most sequences a batch holds (m's bound): vLLM keeps a prompt's "
             "samples in one batch")
    if ds.max_requests:
        _need(s.requests <= ds.max_requests, "requests",
              f"{s.dataset} has only {ds.max_requests} prompts, got {s.requests}",
              f"set requests to at most {ds.max_requests}")
    _at_most(s, "output_len", MAX_MODEL_LEN - 1, "max_model_len's bound less a prompt token")
    if s.output_len >= s.max_model_len >= 1:   # blame the one moved from its default
        blame = "output_len" if s.max_model_len == FIELDS["max_model_len"].default else "max_model_len"
        lower = s.max_model_len - max(ds.min_prompt, 1)
        _need(False, blame, f"max_model_len {s.max_model_len} leaves no room for output_len "
              f"{s.output_len} plus a prompt", f"raise max_model_len to at least "
              f"{s.output_len + max(ds.min_prompt, 1)}"
              + (f" or lower output_len to {lower}" if lower > 0 else ""))
    _in_range(s, "output_len", 1, s.max_model_len - 1)
    _need(s.prompt_len >= 0, "prompt_len", f"must be >= 0, got {s.prompt_len}",
          "use 0 for the dataset's distribution or a positive length")
    room = s.max_model_len - s.output_len
    if s.prompt_len:
        _need(s.prompt_len <= room, "prompt_len",
              f"prompt_len + output_len exceeds max_model_len ({s.max_model_len})",
              f"set prompt_len to at most {room} or raise max_model_len")
    else:
        _need(ds.min_prompt <= room, "output_len",
              f"output_len {s.output_len} leaves no room for {s.dataset} prompts "
              f"(>= {ds.min_prompt} tokens) within max_model_len {s.max_model_len}",
              f"lower output_len or raise max_model_len to {ds.min_prompt + s.output_len}")
    if s.rate is not None:
        _positive(s, "rate")
        _at_most(s, "rate", MAX_RATE, "a billion requests a second, more than any service receives")
        span = s.requests / s.rate
        _need(span <= MAX_SPAN_S, "rate", f"{s.requests:,} requests at {s.rate:g} a second arrive over "
              f"~{span:.3g} s, past the {MAX_SPAN_S:g} s within which the simulated clock (a float64) "
              "resolves a tenth of a microsecond", f"raise rate to at least {least_rate(s.requests)}")
    _in_range(s, "abort_fraction", 0.0, 1.0)
    _positive(s, "abort_window_s")
    _at_most(s, "abort_window_s", MAX_SPAN_S, SPAN_WHY)
    if s.trace:
        path_field_file("trace", s.trace)
        _need(s.rate is None, "rate", "a trace gives its own arrival times",
              "remove rate when replaying a trace")
        _check_trace_window(s)
    else:
        for name in TRACE_WINDOW:
            _need(getattr(s, name) == FIELDS[name].default, name, "applies only to a replayed trace",
                  f"set trace, or remove {name}")
    for name in ("slo_ttft_ms", "slo_tpot_ms", "slo_latency_ms"):
        if getattr(s, name) is not None:
            _positive(s, name)
            _at_most(s, name, MAX_SPAN_S * 1e3, SPAN_WHY)


TRACE_WINDOW = ("trace_speedup", "trace_start_s", "trace_duration_s")


def _check_trace_window(s: Scenario) -> None:
    """A window of the trace's clock, replayed at a positive finite pace."""
    _need(math.isfinite(s.trace_speedup) and s.trace_speedup > 0, "trace_speedup",
          f"must be a positive finite multiple, got {s.trace_speedup}",
          "use 1 for the recorded rate, 2 for twice it")
    _need(math.isfinite(s.trace_start_s) and s.trace_start_s >= 0, "trace_start_s",
          f"must be a finite number of seconds >= 0, got {s.trace_start_s}", "use 0 for the trace's start")
    if s.trace_duration_s is not None:
        _need(math.isfinite(s.trace_duration_s) and s.trace_duration_s > 0, "trace_duration_s",
              f"must be a finite number of seconds > 0, got {s.trace_duration_s}",
              "remove it to replay to the trace's end")


@_check
def _check_costs(s: Scenario, cat: Catalog) -> None:
    _in_range(s, "mem_efficiency", 0.01, 1.0)
    _in_range(s, "compute_efficiency", 0.01, 1.0)
    for name, most, why in (("launch_overhead_us", MAX_OVERHEAD_S * 1e6, OVERHEAD_WHY),
                            ("step_overhead_ms", MAX_OVERHEAD_S * 1e3, OVERHEAD_WHY),
                            ("reject_overhead_ms", MAX_OVERHEAD_S * 1e3, OVERHEAD_WHY),
                            ("activation_reserve_gb", MAX_MEMORY_GB, MEMORY_WHY)):
        v = getattr(s, name)
        _need(v >= 0, name, f"must be >= 0, got {v}", f"set {name} to 0 or more")
        _at_most(s, name, most, why)
    if s.profile:
        path_field_file("profile", s.profile)


def warnings(s: Scenario) -> list[str]:
    """What a valid scenario asks that no real system has, or that the paper did not run."""
    cat = catalog_for(s)
    out = []
    for role, gpu, link in (("verifier", s.gpu, s.tp_link_key), ("drafter", s.drafter_gpu_key, s.link)):
        if cat.links[link].nvlink and not cat.gpus[gpu].nvlink:
            out.append(f"hypothetical: {link} on the {role}'s {gpu}, which has no NVLink")
    if s.method == "psd" and not s.batch_managed:
        out.append(f"beyond the paper: PSD with {s.sub_batches} sub-batches and {s.drafters} drafters")
    if s.sampler_output == "compact":
        out.append("hypothetical: compact sampler output (MineDraft sends full-vocabulary rows)")
    if s.scheduler == "vllm-v1" and s.method in ("psd", "psd+tetris", "pearl"):
        out.append(f"hypothetical: {s.method} on vllm-v1 (MineDraft runs on vLLM 0.9.2, V0)")
    changed = [name for name in ROOFLINE_ONLY if getattr(s, name) != FIELDS[name].default]
    if changed and s.engine_key != "roofline" and not s.profile:
        verb = "prices" if len(changed) == 1 else "price"
        out.append(f"ignored: {' and '.join(changed)} {verb} the roofline engine only; the {s.engine_key} "
                   "engine profile prices launches and framework work itself (set engine = \"roofline\" to "
                   "use them)")
    return out + _code_warnings(s)


# The longest arrival span a run may have: a float64 second count keeps steps of 1.2e-7 s at 1e9 s
# (2^-53 relative); beyond it a step's duration starts to vanish into the clock's rounding.
MAX_SPAN_S = 1e9

SPAN_WHY = f"the {MAX_SPAN_S:g} s within which the simulated clock resolves a tenth of a microsecond"

# Upper bounds of the fields no other check bounds: each lies far past any machine or run, so a valid
# scenario never meets one, and none of their products (blocks of swap, Beta parameters, step times)
# overflows a float or an int64.
MAX_SEED = 2**63 - 1
MAX_MODEL_LEN = 1 << 20   # a million tokens of context, past every model's window
MAX_REQUESTS = 10**12
MAX_K = 32   # draft tokens a step proposes: the scenario's bound and the reference engine's
MAX_CONCENTRATION = 1e9
CONCENTRATION_WHY = "where a Beta draw's spread (below 2e-5) is lost in the acceptance itself"
MAX_MEMORY_GB = 1e6
MEMORY_WHY = "a petabyte, more memory than any machine's GPU or host has"
MAX_STEP_TOKENS = 1 << 24   # 16 M tokens in one engine step: activations no GPU holds
MAX_SAMPLES = 4096
MAX_RATE = 1e9
MAX_NAME = 200   # characters of `name` (plain ASCII): its folder NAME-METHOD-HASH stays under 255 bytes


def least_rate(requests: int) -> str:
    """The slowest rate at which `requests` arrivals fit in MAX_SPAN_S, written short and
    rounded up: a refusal's fix names a value that is itself taken (30 requests: 3.01e-08, as
    30 / 3e-08 is a hair past 1e9 s)."""
    rate = requests / MAX_SPAN_S
    text = f"{rate:.3g}"
    while requests / float(text) > MAX_SPAN_S:
        rate *= 1.001
        text = f"{rate:.3g}"
    return text
MAX_OVERHEAD_S = 3600.0   # an hour, the largest time a profile's coefficient may take
OVERHEAD_WHY = "an hour per launch or step, which no GPU or framework takes"

# Analytic constants that only the roofline engine reads: an engine execution profile (sim/execution.py)
# replaces them with its own per-kernel and framework terms.
ROOFLINE_ONLY = ("launch_overhead_us", "step_overhead_ms")


# MineDraft's code scores PEARL's stale drafts against the real sequence; how often one matches is
# not published (docs/minedraft-fidelity.md §6), so every PEARL result says which model it used.
_PEARL_STALE_WARNINGS = {
    "rejected": "lower bound: PEARL's stale drafts are scored and accept nothing (pearl_stale = rejected); "
                "MineDraft's code may accept some, at a rate no source publishes",
    "as-fresh": "hypothetical: pearl_stale = as-fresh accepts PEARL's stale drafts like fresh ones, "
                "an upper bound (they were drafted for other positions)",
    "rate": "assumed: PEARL's stale drafts accept {:g} per token (pearl_stale_acceptance), a rate no "
            "source publishes",
}


def _code_warnings(s: Scenario) -> list[str]:
    """Where a two-sub-batch PSD run follows a bug of MineDraft's code (the default), or leaves
    the code for a what-if (docs/minedraft-fidelity.md)."""
    out = []
    if s.method == "pearl" and s.pearl_variant == "minedraft":
        out.append(_PEARL_STALE_WARNINGS[s.pearl_stale].format(s.pearl_stale_acceptance))
    if not s.batch_managed:
        return out
    if s.chunked_prefill and s.psd_prefill_chunks == "verified-only":
        out.append("MineDraft's code: a prompt chunk is computed only when its sub-batch is verified, "
                   "and an earlier chunk of the drafted one is marked computed without being computed "
                   "(psd_prefill_chunks = every-pass computes every chunk)")
    if s.preemption_mode == "swap" and s.swap_in_batch == "verified":
        out.append("MineDraft's code: a swapped-in request joins the sub-batch verified in that step, "
                   "without drafts, and that step's drafts meet the wrong requests: scored, rejected "
                   "(swap_in_batch = drafted for the intended behaviour)")
    if s.kv_patch == "intended":
        out.append("hypothetical: kv_patch = intended grows a request's KV only when it is verified; "
                   "the drafter would write its drafts' KV into slots the request does not hold")
    return out


def validate(s: Scenario, catalog: Catalog | None = None) -> Scenario:
    """Return `s` unchanged if every field is valid, else raise the first ScenarioError."""
    cat = catalog or catalog_for(s)
    for name in FIELDS:
        _coerce(name, getattr(s, name))  # types, also for scenarios built in Python
    for check in _CHECKS:
        check(s, cat)
    return s


# ---------------------------------------------------------------------------------------------
# Writing


def toml_value(value: Any) -> str:
    """A bool, number or string as a TOML value (a JSON string is a valid TOML basic string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def scenario_to_toml(s: Scenario) -> str:
    """The scenario as a sectioned TOML document that loads back to an equal Scenario."""
    values = asdict(s)
    lines = ["# psdsim scenario (resolved): `psdsim run THIS_FILE` reproduces the run exactly"]
    for section in SECTIONS:
        lines.append("")
        lines.append(f"[{section}]")
        for name, f in FIELDS.items():
            if f.metadata["section"] == section and values[name] is not None:
                lines.append(f"{name} = {toml_value(values[name])}")
    return "\n".join(lines) + "\n"
