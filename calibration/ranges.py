"""Which trace ranges are which kind of work, and what their names say about the batch.

A *range rule* maps a range-name regular expression to a kind of work (calibration.samples.KINDS)
or to `step`, a range that opens an engine step: phases on the same thread after it, up to the
next step range, inherit its attributes (vLLM V1 names the step `execute_context_…_generation_…`
and runs sampling and drafting after that range closes). Attributes come from the pattern's named
groups and from `key=value` words in the name (`psdsim:draft batch=16 k=3 ctx=4096`).

Presets:
- `minedraft`: MineDraft's NVTX ranges (reference/paper.md §4.2): `propose` (drafting on the
  driver), `score` (the target pass on each verifier rank), `…_verify_tokens` (rejection
  sampling), `…_run_no_spec` (a prompt step; the range is on the driver, so its GPU work is
  the draft model's prefill: the target's prefill on ranks 1-4 has no range of its own). The
  names carry no batch facts: give MineDraft's JSONL step trace beside the nsys export and they
  are joined step by step (by order).
- `vllm`: vLLM V1 with VLLM_NVTX_SCOPES_FOR_PROFILING=1: the step range
  `execute_context_{a}({b})_generation_{c}({d})` (a prefill requests of b tokens, c decodes of d
  tokens, d = Σ(1 + k)), phases `gpu_model_runner: forward` / `draft` / `sample`.
- `psdsim`: ranges named `psdsim:KIND key=value …`, the convention of psdsim's own engines and
  synthetic traces; every attribute is in the name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from psdsim.calibration.samples import ATTRIBUTES, KINDS
from psdsim.calibration.trace_error import TraceError

STEP = "step"
_WORD = re.compile(r"\b([a-z_]+)=(-?[0-9][0-9.eE+-]*)")
# vLLM's step-range attribute names → sample attributes.
_ALIASES = {"decode_reqs": "batch", "decode_tokens": "tokens", "bytes": "nbytes"}


@dataclass(frozen=True)
class RangeRule:
    kind: str                # one of KINDS, or STEP
    pattern: re.Pattern[str]


def rule(kind: str, pattern: str) -> RangeRule:
    if kind not in (*KINDS, STEP):
        raise TraceError("--range", f"{kind}={pattern}: unknown kind {kind!r}",
                         f"use one of {', '.join((*KINDS, STEP))}")
    try:
        return RangeRule(kind, re.compile(pattern))
    except re.error as exc:
        raise TraceError("--range", f"{kind}={pattern}: bad regular expression ({exc})",
                         "write a Python regular expression, e.g. draft='^propose$'") from None


PRESETS: dict[str, tuple[RangeRule, ...]] = {
    "minedraft": (
        rule(STEP, r"^(ParallelSpecDecodeWorker|spec_decode_worker)\._run_speculative_decoding_step$"),
        rule("draft", r"^propose$"),
        rule("verify", r"^score$"),
        rule("draft_prefill", r"^(ParallelSpecDecodeWorker|spec_decode_worker)\._run_no_spec$"),
        rule("reject", r"^(ParallelSpecDecodeWorker|spec_decode_worker)\._verify_tokens$"),
    ),
    "vllm": (
        rule(STEP, r"^execute_context_(?P<prefill_reqs>\d+)\((?P<prefill_tokens>\d+)\)"
                   r"_generation_(?P<decode_reqs>\d+)\((?P<decode_tokens>\d+)\)"),
        rule("verify", r"^gpu_model_runner: ?forward$"),
        rule("draft", r"^gpu_model_runner: ?draft$"),
        rule("reject", r"^gpu_model_runner: ?sample$"),
    ),
    "psdsim": tuple(rule(kind, rf"^psdsim:{kind}(\s|$)") for kind in (*KINDS, STEP)),
}


# The order `psdsim calibrate` tries the presets in when none is given: the most specific names
# first, so a trace is read with the first preset whose rules match its ranges.
AUTO_ORDER = ("psdsim", "vllm", "minedraft")


def parse_rules(preset: str, extra: list[str]) -> tuple[RangeRule, ...]:
    """The preset's rules, with `KIND=REGEX` rules from the command line taking precedence."""
    if preset not in PRESETS:
        raise TraceError("--ranges", f"unknown range preset {preset!r}", f"use one of {', '.join(PRESETS)}")
    own = []
    for text in extra:
        kind, sep, pattern = text.partition("=")
        if not sep or not pattern:
            raise TraceError("--range", f"{text!r} is not KIND=REGEX",
                             "write it as KIND=REGEX, e.g. draft='^propose$'")
        own.append(rule(kind.strip(), pattern))
    return (*own, *PRESETS[preset])


@lru_cache(maxsize=65536)
def classify(rules: tuple[RangeRule, ...], name: str) -> tuple[str, dict[str, float]] | None:
    """(kind, attributes) of the first rule the name matches, or None. Cached: a trace repeats a
    few names millions of times (callers must not change the attributes returned)."""
    for r in rules:
        m = r.pattern.search(name)
        if m is None:
            continue
        raw = {k: v for k, v in m.groupdict().items() if v is not None}
        raw.update(dict(_WORD.findall(name)))
        attrs = {}
        for key, value in raw.items():
            key = _ALIASES.get(key, key)
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):   # `ctx=1e999` reads as infinity: no attribute
                attrs[key] = number
        return r.kind, attrs
    return None


def step_attributes(attrs: dict[str, float]) -> dict[str, float]:
    """What a step range's attributes mean for the phases in it: vLLM's decode requests and
    tokens become batch and tokens, and k = tokens / batch - 1 (every request scores 1 + k)."""
    out = {k: v for k, v in attrs.items() if k in ATTRIBUTES or k.startswith("prefill_")}
    batch, tokens = out.get("batch"), out.get("tokens")
    if batch and tokens and "k" not in out:
        out["k"] = tokens / batch - 1
    return out
