"""What a valid scenario should be told about itself: where it asks for hardware no real system
has, leaves the paper's configurations, follows a bug of MineDraft's code (the default) or leaves
the code for a what-if (docs/minedraft-fidelity.md). A run's summary lists them (`warnings`).
"""

from __future__ import annotations

from psdsim.sim.scenario_checks import catalog_for
from psdsim.sim.scenario_fields import FIELDS, Scenario

# The fields only the adaptive method reads; another method set with them runs as if they were not
# there, which a reader of `--set adaptive_margin=0.5` must be told.
ADAPTIVE_ONLY = ("adaptive_modes", "adaptive_margin")
# Analytic constants that only the roofline engine reads: an engine execution profile (sim/execution.py)
# replaces them with its own per-kernel and framework terms.
ROOFLINE_ONLY = ("launch_overhead_us", "step_overhead_ms")


SERVICE_FIELDS = ("service_verifiers", "service_drafters", "service_branches")


def warnings(s: Scenario) -> list[str]:
    """What a valid scenario asks that no real system has, or that the paper did not run."""
    cat = catalog_for(s)
    out = []
    for role, gpu, link in (("verifier", s.gpu, s.tp_link_key), ("drafter", s.drafter_gpu_key, s.link)):
        if cat.links[link].nvlink and not cat.gpus[gpu].nvlink:
            out.append(f"hypothetical: {link} on the {role}'s {gpu}, which has no NVLink")
    if s.method == "psd" and not s.batch_managed:
        out.append(f"beyond the paper: PSD with {s.sub_batches} sub-batches and {s.drafters} drafters")
    if s.tail != "sd":
        out.append(f"beyond the paper: the tail pre-drafted (tail = {s.tail}), the mitigation its §A "
                   "proposes")
    if s.method == "decoupled":
        out.append(f"beyond the paper: a decoupled drafter service (V = {s.service_verifiers} verifier "
                   f"replicas, D = {s.service_drafters} drafter GPUs, b = {s.service_branches} branches); "
                   "its hit rate is an upper bound (the bonus token taken as guessed)")
    service = _set(s, SERVICE_FIELDS)
    if service and s.method != "decoupled":
        verb = "applies" if len(service) == 1 else "apply"
        out.append(f"ignored: {' and '.join(service)} {verb} to method decoupled only")
    if s.sampler_output == "compact":
        out.append("hypothetical: compact sampler output (MineDraft sends full-vocabulary rows)")
    if s.scheduler == "vllm-v1" and s.method in ("psd", "psd+tetris", "pearl", "adaptive"):
        out.append(f"hypothetical: {s.method} on vllm-v1 (MineDraft runs on vLLM 0.9.2, V0)")
    changed = _set(s, ROOFLINE_ONLY)
    if changed and s.engine_key != "roofline" and not s.profile:
        verb = "prices" if len(changed) == 1 else "price"
        out.append(f"ignored: {' and '.join(changed)} {verb} the roofline engine only; the {s.engine_key} "
                   "engine profile prices launches and framework work itself (set engine = \"roofline\" to "
                   "use them)")
    unread = _set(s, ADAPTIVE_ONLY)
    if unread and s.method != "adaptive":
        out.append(f"ignored: {' and '.join(unread)} {'is' if len(unread) == 1 else 'are'} read by method "
                   f"adaptive only; {s.method} runs without {'it' if len(unread) == 1 else 'them'}")
    return out + _code_warnings(s)


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


def _set(s: Scenario, names: tuple[str, ...]) -> list[str]:
    """The fields of `names` that `s` sets away from their defaults."""
    return [name for name in names if getattr(s, name) != FIELDS[name].default]
