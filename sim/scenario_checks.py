"""Whether a scenario can run: every field's type, each field's bounds and choices, and the
rules between fields (a trace gives its own arrival times; vllm-v1 always chunks prefills).

Every check raises a ScenarioError whose message is one line naming the field and the fix, in
the order the fields are documented, so the first bad field is the one reported. The checks read
a field's default through the scenario they check (sim/scenario_fields.py, where the dataclass
is, imports `validate` for Scenario.replace).

Why one module: the cross-field checks of a scenario read in one place, in the order a scenario is
validated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from psdsim.sim.catalog import Catalog, CatalogError, load_catalog, vocabulary_mismatch
from psdsim.sim.catalog.hf_config import ConfigError, derive_model, display_name, is_config_path
from psdsim.sim.catalog.hf_context import check_context
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import shown
from psdsim.sim.scenario_paths import MODEL_FIELDS, path_field_file
from psdsim.sim.scenario_values import (
    ADAPTIVE_MODES,
    CONCENTRATION_WHY,
    KV_PATCHES,
    MAX_CONCENTRATION,
    MAX_K,
    MAX_M,
    MAX_MEMORY_GB,
    MAX_MODEL_LEN,
    MAX_NAME,
    MAX_OVERHEAD_S,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_SERVICE,
    MAX_SPAN_S,
    MAX_STEP_TOKENS,
    MEMORY_WHY,
    METHODS,
    MODEL_ERROR_BOUNDS,
    OVERHEAD_WHY,
    PEARL_STALE,
    PEARL_VARIANTS,
    PREEMPTION_MODES,
    PSD_PREFILL_CHUNKS,
    SCHEDULERS,
    SPAN_WHY,
    SWAP_IN_BATCHES,
    TAILS,
    arrival_span_s,
    least_rate,
    typed_field,
)
from psdsim.sim.user_input import plain_label

if TYPE_CHECKING:
    from psdsim.sim.scenario_fields import Scenario


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


def _default(s: Scenario, name: str) -> Any:
    """The default of the field `name` of the dataclass `s` is an instance of."""
    return next(f.default for f in fields(s) if f.name == name)


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
    _in_range(s, "m", 1, MAX_M)
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
    _check_adaptive(s)
    _check_service(s)
    _one_of(s, "sd_5gpu_layout", ("drafter", "tp"))
    _one_of(s, "pearl_variant", PEARL_VARIANTS)
    _one_of(s, "pearl_stale", PEARL_STALE)
    _in_range(s, "pearl_stale_acceptance", 0.0, 1.0)
    _need(s.pearl_stale == "rate" or s.pearl_stale_acceptance == 0.0, "pearl_stale_acceptance",
          f'applies only with pearl_stale = "rate", not "{s.pearl_stale}"',
          "set pearl_stale=rate, or remove pearl_stale_acceptance")
    _one_of(s, "balance_by", ("requests", "kv"))
    _need(s.balance_by == "requests" or (s.method in ("psd", "adaptive") and s.batch_managed), "balance_by",
          f"balancing by KV is built for two-sub-batch psd and adaptive, not {s.method}"
          + (" as a ring" if s.method == "psd" else ""), "set balance_by=requests")
    _one_of(s, "tail", TAILS)
    _need(s.tail == "sd" or (s.method in ("psd", "psd+tetris") and s.batch_managed), "tail",
          f"pre-drafting the tail is built for two-sub-batch psd and psd+tetris, not {s.method}"
          + (" as a ring" if s.method == "psd" else ""), "set tail=sd")
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


def _check_service(s: Scenario) -> None:
    """The decoupled drafter service: V replicas, D drafters, b of the k + 1 accepted lengths."""
    _in_range(s, "service_verifiers", 1, MAX_SERVICE)
    _in_range(s, "service_drafters", 1, MAX_SERVICE)
    _in_range(s, "service_branches", 1, s.k + 1)


def _check_adaptive(s: Scenario) -> None:
    """The adaptive method switches MineDraft's two-sub-batch PSD, its fallback SD and AR."""
    named = [m.strip() for m in s.adaptive_modes.split(",")]
    unknown = [m for m in named if m not in ADAPTIVE_MODES]
    _need(not unknown, "adaptive_modes", f"unknown mode {unknown[0]!r}" if unknown else "",
          f"use a comma-separated subset of {','.join(ADAPTIVE_MODES)} with psd, e.g. psd,sd")
    _need(len(set(named)) == len(named), "adaptive_modes", f"names a mode twice in {s.adaptive_modes!r}",
          "name each mode once, e.g. psd,sd,ar")
    _need("psd" in named, "adaptive_modes", f"{s.adaptive_modes!r} leaves out psd, the deployment's own mode",
          "include psd, e.g. psd,sd")
    _in_range(s, "adaptive_margin", 0.0, 1.0)
    _check_adaptive_m(s)
    if s.method != "adaptive":
        return
    _need(s.sub_batches == 2 and s.drafters == 1, "sub_batches",
          "adaptive switches MineDraft's PSD of two sub-batches and one drafter",
          "use sub_batches=2 and drafters=1")
    _need(s.kv_patch != "intended", "kv_patch",
          "kv_patch = intended grows only the verified sub-batch's KV, which SD and AR steps do not have",
          "use kv_patch=has_deferred (MineDraft's) or default")


def _check_adaptive_m(s: Scenario) -> None:
    """adaptive_m changes the adaptive method's m between its bounds, which hold the scenario's m."""
    _need(not s.adaptive_m or s.method == "adaptive", "adaptive_m",
          f"changing m is built for the adaptive method, not {s.method}",
          "set method=adaptive, or remove adaptive_m")
    for name in ("adaptive_m_min", "adaptive_m_max"):
        _need(s.adaptive_m or getattr(s, name) == _default(s, name), name,
              "applies only with adaptive_m = true", f"set adaptive_m=true, or remove {name}")
    _in_range(s, "adaptive_m_min", 1, s.m)
    if s.adaptive_m_max:
        _in_range(s, "adaptive_m_max", s.m, MAX_M)


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
        blame = "output_len" if s.max_model_len == _default(s, "max_model_len") else "max_model_len"
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
        span = arrival_span_s(s.requests, s.rate)
        _need(span <= MAX_SPAN_S, "rate", f"{s.requests:,} requests at {s.rate:g} a second may arrive over "
              f"{span:.3g} s, past the {MAX_SPAN_S:g} s within which the simulated clock (a float64) "
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
            _need(getattr(s, name) == _default(s, name), name, "applies only to a replayed trace",
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
    for name in ("verify_error", "draft_error"):
        v = getattr(s, name)
        if v is not None:
            _need(math.isfinite(v) and MODEL_ERROR_BOUNDS[0] <= v <= MODEL_ERROR_BOUNDS[1], name,
                  f"must be a factor from {MODEL_ERROR_BOUNDS[0]} to {MODEL_ERROR_BOUNDS[1]}, got {v}",
                  f"remove {name} to price passes as the model does, or give e.g. {name} = 1.1")
    if s.profile:
        path_field_file("profile", s.profile)


def validate(s: Scenario, catalog: Catalog | None = None) -> Scenario:
    """Return `s` unchanged if every field is valid, else raise the first ScenarioError."""
    cat = catalog or catalog_for(s)
    for f in fields(s):
        typed_field(f, getattr(s, f.name))  # types, also for scenarios built in Python
    for check in _CHECKS:
        check(s, cat)
    return s
