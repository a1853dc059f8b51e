"""What a plan's searches mean: a row per configuration, the Pareto front, and for each PSD
configuration beside its SD twin (the same fields but the method and PSD's own) whether the
extra GPU pays off, in which regime, and the metric that shows it.

Regimes, each with the evidence that puts a configuration in it (thresholds are stated in the
verdict text so a reader can judge them):
- KV-bound: PSD keeps 2m requests' KV; preemptions, or a pool above 95% at peak.
- communication-bound: the drafter<->verifier link holds >= 15% of a PSD step (link_share).
- tail-bound: < 85% of PSD's decode steps overlap drafting (parallelization_rate).
- compute-bound: in SD drafting takes r of verification; hiding it gains at most 1 + r
  (theory: (t + V) / max(t, V)) per step, which is within 10% of the extra GPUs' share
  (1 + r < 1.1 x GPUs_psd / GPUs_sd): the link, the tail and the 2m requests' KV eat the rest.
- drafter-bound: r > 1, drafting outlasts verification and PSD cannot hide it (the ring with more
  sub-batches and drafters can).
- draft-hiding: none of the above; PSD hides drafting.
Every verdict also quotes PSD's costs (link share, overlapped steps, KV peak) below the thresholds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import check_at_once
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.numbers import percent
from psdsim.sim.scenario import Scenario
from psdsim.studies.plan import PlanSpec, RateSearch, configurations, search_all

KV_FULL = 0.95
LINK_HEAVY = 0.15
OVERLAP_LOW = 0.85
COMPUTE_MARGIN = 1.1   # PSD pays more than GPUs (link, tail, 2m KV): a 10% margin on the ceiling
CONFIG_KEYS = ("method", "gpu", "tensor_parallel_size", "drafter_gpu", "link", "target", "draft", "k", "m",
               "tail", "balance_by", "service_verifiers", "service_drafters", "service_branches")
SERVICE_KEYS = CONFIG_KEYS[-3:]   # the decoupled service's alone
# the methods on PSD's deployment (a drafter GPU beside the verifier group) judged against SD, and
# the name each verdict gives them
ON_PSD_GPUS = {"psd": "PSD", "psd+tetris": "PSD", "adaptive": "adaptive", "decoupled": "decoupled"}
# PSD's own fields, at the values SD accepts in a PSD configuration's SD twin
SD_TWIN = {"method": "sd", "extra": 0, "balance_by": "requests", "tail": "sd"}
METRIC_KEYS = ("output_tok_s", "throughput_tok_s", "vsr", "parallelization_rate", "link_share",
               "comm_share", "preemptions", "mean_draft_ms", "mean_verify_ms")


def _p99(summary: dict[str, Any] | None, key: str) -> float | None:
    return (summary or {}).get(key, {}).get("p99") if summary else None


def hourly_cost(s: Scenario, price: dict[str, float]) -> float | None:
    """$ per hour of the configuration's GPUs (verifier group and dedicated drafters), or None
    when a GPU it uses has no price."""
    layout = layout_for(s)
    gpus = [(s.gpu, layout.verifier_tp * layout.verifier_groups)]
    if layout.drafter == DEDICATED:
        gpus.append((s.drafter_gpu_key, layout.drafter_gpus))
    if any(g not in price for g, _ in gpus):
        return None
    return sum(price[g] * n for g, n in gpus)


def row(s: Scenario, search: RateSearch, price: dict[str, float] | None = None) -> dict[str, Any]:
    """One configuration: its fields, best rate, per-GPU (and per-dollar) figures, and the
    metrics behind them."""
    sm = search.summary or {}
    usd = hourly_cost(s, price or {})
    gpus = sm.get("gpus")
    out = {key: getattr(s, key) for key in CONFIG_KEYS}
    out["drafter_gpu"] = s.drafter_gpu_key
    if not s.speculates:
        out.update(draft=None, k=None, drafter_gpu=None, link=None)
    if s.method != "decoupled":
        out.update(dict.fromkeys(SERVICE_KEYS))
    out.update({
        "gpus": gpus,
        "max_rate_req_s": search.rate,
        "rate_req_s_per_gpu": search.rate / gpus if search.rate and gpus else None,
        "tok_s_per_gpu": sm["output_tok_s"] / gpus if sm.get("output_tok_s") and gpus else None,
        "usd_per_hour": usd,
        "requests_per_usd": search.rate * 3600 / usd if search.rate and usd else None,
        "latency_p99_ms": _p99(sm, "latency_ms"),
        "ttft_p99_ms": _p99(sm, "ttft_ms"),
        "tpot_p99_ms": _p99(sm, "tpot_ms"),
        **{key: sm.get(key) for key in METRIC_KEYS},
        "kv_peak": max(sm["kv_peak_usage"].values()) if sm.get("kv_peak_usage") else None,
        "limit": "; ".join(search.failing) if search.failing_rate is not None or search.rate is None
        else "rate_max reached",
        "evaluations": len(search.runs),
    })
    return out


def pareto(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of rows no other row beats on all of: fewer GPUs, higher rate, lower p99 latency."""
    ok = [i for i, r in enumerate(rows) if r["max_rate_req_s"] and r["latency_p99_ms"] is not None]
    pts = {i: (rows[i]["gpus"], -rows[i]["max_rate_req_s"], rows[i]["latency_p99_ms"]) for i in ok}
    front = []
    for i in ok:
        dominated = any(all(a <= b for a, b in zip(pts[j], pts[i], strict=True)) and pts[j] != pts[i]
                        for j in ok if j != i)
        if not dominated:
            front.append(i)
    return front


def _regimes(psd: dict[str, Any], sd: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    if psd["preemptions"] or (psd["kv_peak"] or 0) >= KV_FULL:
        found.append(("KV-bound", f"PSD keeps 2m requests' KV: {psd['preemptions']} preemptions, KV peak "
                                  f"{percent(psd['kv_peak'] or 0)} (>= {KV_FULL:.0%})"))
    if (psd["link_share"] or 0) >= LINK_HEAVY:
        found.append(("communication-bound", f"the link holds {percent(psd['link_share'])} of each PSD step "
                                             f"(>= {LINK_HEAVY:.0%})"))
    if psd["parallelization_rate"] is not None and psd["parallelization_rate"] < OVERLAP_LOW:
        found.append(("tail-bound", f"only {percent(psd['parallelization_rate'])} of PSD's decode steps "
                                    f"overlap drafting (< {OVERLAP_LOW:.0%})"))
    r = (sd["mean_draft_ms"] or 0) / sd["mean_verify_ms"] if sd["mean_verify_ms"] else None
    if r is not None:
        gpu_ratio = psd["gpus"] / sd["gpus"]
        ceiling = (f"drafting is {percent(r)} of verification in SD, so hiding it gains at most {1 + r:.2f}x "
                   "per step")
        if r > 1:
            found.append(("drafter-bound", f"drafting takes {r:.2f}x verification in SD: PSD's steps wait "
                                           "on the drafter (the ring, sub_batches=3 drafters=2, hides it)"))
        elif 1 + r < gpu_ratio * COMPUTE_MARGIN:
            found.append(("compute-bound", f"{ceiling}: within {COMPUTE_MARGIN - 1:.0%} of the "
                                           f"{gpu_ratio:.2f}x GPUs PSD uses"))
        elif not found:
            found.append(("draft-hiding", f"{ceiling}, against {gpu_ratio:.2f}x the GPUs"))
    return found


def verdicts(configs: list[Scenario], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each PSD configuration with an SD twin: rates, gain (per dollar where every GPU has a
    price, else per GPU), regimes and the verdict."""
    by_digest = {s.digest(): i for i, s in enumerate(configs)}
    out = []
    for s, psd in zip(configs, rows, strict=True):
        who = ON_PSD_GPUS.get(s.method)
        if who is None:
            continue
        j = by_digest.get(s.replace(**SD_TWIN).digest())
        if j is None:
            continue
        sd = rows[j]
        if not psd["max_rate_req_s"]:
            gain, pays = None, False
            why = f"{who} meets the objectives at no rate tried ({psd['limit']})"
        elif not sd["max_rate_req_s"]:
            gain, pays = None, True
            why = f"SD meets the objectives at no rate tried ({sd['limit']}); {who} sustains " \
                  f"{psd['max_rate_req_s']:.3g} req/s"
        else:
            gain = psd["rate_req_s_per_gpu"] / sd["rate_req_s_per_gpu"]
            why = (f"{who} sustains {psd['max_rate_req_s']:.3g} req/s on {psd['gpus']} GPUs, SD "
                   f"{sd['max_rate_req_s']:.3g} on {sd['gpus']}: {gain:.2f}x the rate per GPU")
            if psd["requests_per_usd"] and sd["requests_per_usd"]:
                gain = psd["requests_per_usd"] / sd["requests_per_usd"]
                why += f", {gain:.2f}x per dollar"
            pays = gain > 1
        both = psd["max_rate_req_s"] and sd["max_rate_req_s"]
        regimes = _regimes(psd, sd) if both else []
        costs = (f"PSD's link holds {percent(psd['link_share'] or 0)} of a step, "
                 f"{percent(psd['parallelization_rate'] or 0)} of its decode steps overlap drafting, "
                 f"KV peak {percent(psd['kv_peak'] or 0)}") if both else ""
        out.append({"config": {k: psd[k] for k in CONFIG_KEYS if k != "method"}, "method": s.method,
                    "psd_rate": psd["max_rate_req_s"], "sd_rate": sd["max_rate_req_s"],
                    "per_gpu_gain": gain, "pays_off": pays, "why": why,
                    "regimes": [name for name, _ in regimes], "evidence": [text for _, text in regimes],
                    "costs": costs})
    return out


@dataclass
class PlanResult:
    spec: PlanSpec
    configs: list[Scenario]
    searches: list[RateSearch]
    rows: list[dict[str, Any]]
    front: list[int]
    verdicts: list[dict[str, Any]]
    invalid: list[tuple[dict[str, Any], str]]


def run_plan(spec: PlanSpec, workers: int = 1,
             progress: Callable[[float], None] | None = None) -> PlanResult:
    """Search every valid configuration of the space and judge the results."""
    configs, invalid = configurations(spec)
    if not configs:
        if not invalid:
            raise ScenarioError("space", "the space is empty", "give each [space] field a list of values")
        changes, reason = invalid[0]
        what, _, fix = reason.rpartition("; fix: ")
        raise ScenarioError("space", f"no valid configuration ({len(invalid)} invalid; the first, {changes}: "
                            f"{what})", f"{fix} (in [space] or [base])")
    # before any run: a [space] candidate (requests = [100000000]) must fit in memory and disk too
    check_at_once(configs, workers)
    searches = search_all(configs, spec, workers, progress)
    rows = [row(s, r, spec.price) for s, r in zip(configs, searches, strict=True)]
    return PlanResult(spec, configs, searches, rows, pareto(rows), verdicts(configs, rows), invalid)
