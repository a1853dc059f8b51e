"""What each scenario field may hold: its type, the choices of a choice field, the bounds of a
number. The checks (sim/scenario_checks.py) hold a scenario to these; other modules read the
bounds they share (the most draft tokens, the simulated clock's span).
"""

from __future__ import annotations

import math
from dataclasses import Field
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import shown
from psdsim.sim.scenario_paths import MODEL_FIELDS, PATH_FIELDS
from psdsim.sim.user_input import KIND_NAMES, typed

METHODS = ("ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris", "adaptive", "decoupled")
ADAPTIVE_MODES = ("psd", "sd", "ar")   # the modes the adaptive method switches between
SCHEDULERS = ("vllm-v0", "vllm-v1")
PREEMPTION_MODES = ("recompute", "swap")
KV_PATCHES = ("has_deferred", "default", "intended")
PEARL_VARIANTS = ("minedraft", "per-request")
# MineDraft's fallback; the paper's §A mitigation (beyond the paper); the same with MineDraft's PEARL
# mode's answer to a rejection
TAILS = ("sd", "pre-draft", "pre-draft-pearl")
# MineDraft's code (the default, first) or the behaviour it meant (docs/minedraft-fidelity.md)
PEARL_STALE = ("rejected", "as-fresh", "rate")
SWAP_IN_BATCHES = ("verified", "drafted")
PSD_PREFILL_CHUNKS = ("verified-only", "every-pass")

# The longest arrival span a run may have: a float64 second count keeps steps of 1.2e-7 s at 1e9 s
# (2^-53 relative); beyond it a step's duration starts to vanish into the clock's rounding.
MAX_SPAN_S = 1e9

SPAN_WHY = f"the {MAX_SPAN_S:g} s within which the simulated clock resolves a tenth of a microsecond"

# Upper bounds of the fields no other check bounds: each lies far past any machine or run, so a valid
# scenario never meets one, and none of their products (blocks of swap, Beta parameters, step times)
# overflows a float or an int64.
MAX_SEED = 2**63 - 1
# A model-error factor (sim/model_error.py) past these is no longer an error of the model's form.
MODEL_ERROR_BOUNDS = (0.1, 10.0)
MAX_MODEL_LEN = 1 << 20   # a million tokens of context, past every model's window
MAX_REQUESTS = 10**12
MAX_K = 32   # draft tokens a step proposes: the scenario's bound and the reference engine's
MAX_M = 4096   # requests per verification batch: m's bound, and adaptive_m's where it has none
MAX_CONCENTRATION = 1e9
# Verifier replicas and drafter GPUs of a decoupled service: past a rack's 64 GPUs a shared link
# is no longer one link.
MAX_SERVICE = 64
CONCENTRATION_WHY = "where a Beta draw's spread (below 2e-5) is lost in the acceptance itself"
MAX_MEMORY_GB = 1e6
MEMORY_WHY = "a petabyte, more memory than any machine's GPU or host has"
MAX_STEP_TOKENS = 1 << 24   # 16 M tokens in one engine step: activations no GPU holds
MAX_SAMPLES = 4096
MAX_RATE = 1e9
MAX_NAME = 200   # characters of `name` (plain ASCII): its folder NAME-METHOD-HASH stays under 255 bytes


SPAN_RISK = 1e-9   # the chance left that a run's Poisson arrivals outlast arrival_span_s


def arrival_span_s(requests: int, rate: float) -> float:
    """A time that the last of `requests` Poisson arrivals at `rate` passes with a chance below
    SPAN_RISK. Checking the mean span, requests / rate, let half the runs at the slowest rate
    taken outlast the clock and be refused only at their summary. The last arrival is a sum of
    `requests` exponential gaps; by the Chernoff bound of such a sum (a Gamma variable) it passes
    n (1 + e) / rate with a chance of at most exp(-n (e - ln(1 + e))), and e solves that bound
    = SPAN_RISK (by bisection: e - ln(1 + e) grows with e)."""
    n = max(requests, 1)
    target = -math.log(SPAN_RISK) / n
    low, high = 0.0, 1.0
    while high - math.log1p(high) < target:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if mid - math.log1p(mid) < target else (low, mid)
    return n * (1 + high) / rate


def least_rate(requests: int) -> str:
    """The slowest rate at which `requests` arrivals fit in MAX_SPAN_S (arrival_span_s), written
    short and rounded up: a refusal's fix names a value that is itself taken."""
    rate = arrival_span_s(requests, 1.0) / MAX_SPAN_S
    text = f"{rate:.3g}"
    while arrival_span_s(requests, float(text)) > MAX_SPAN_S:
        rate *= 1.001
        text = f"{rate:.3g}"
    return text


MAX_OVERHEAD_S = 3600.0   # an hour, the largest time a profile's coefficient may take
OVERHEAD_WHY = "an hour per launch or step, which no GPU or framework takes"


def typed_field(f: Field, value: Any) -> Any:
    """A TOML value held to the type of the field `f` (ints are accepted where floats are)."""
    name, kind = f.name, f.metadata["kind"]
    if value is None and f.metadata["optional"]:
        return None
    try:
        value = typed(value, kind)
    except TypeError:
        raise ScenarioError(name, f"must be {KIND_NAMES[kind]}, got {shown(value)}",
                            f"write {name} = {field_example(f)}") from None
    except ValueError:
        raise ScenarioError(name, f"must be a finite number, got {shown(value)}",
                            f"write {name} = {field_example(f)}") from None
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


def field_example(f: Field) -> str:
    """A value of the field `f` as a fix writes it in TOML: its default, or (a field whose default
    is absent or empty) a typical value."""
    default = f.default
    if default is None or default == "":
        return {"acceptance": "0.6", "rate": "4.0", "drafter_gpu": '"l40s"', "tp_link": '"pcie4"',
                "trace": '"requests.jsonl"', "catalog": '"my_catalog.toml"', "profile": '"profile.json"',
                "enable_chunked_prefill": "true",
                "num_gpu_blocks_override": "2000", "verify_error": "1.1",
                "draft_error": "1.1"}.get(f.name, "500.0")
    if isinstance(default, bool):
        return "true" if default else "false"
    return f'"{default}"' if isinstance(default, str) else str(default)

