"""The Scenario dataclass: every field of a run, with its table, type and meaning, and the
scenario written back as the TOML file that reproduces it.

A scenario file may be flat (`k = 4`) or grouped into the tables `[run]`, `[models]`,
`[hardware]`, `[engine]`, `[workload]`, `[slo]` and `[costs]`; field names are the flat names of
docs/design.md §7, so `--set k=4` works whatever the file's layout. Reading one is
sim/scenario_parse.py's job, checking one sim/scenario_checks.py's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from psdsim.sim.scenario_checks import validate
from psdsim.sim.scenario_values import ADAPTIVE_MODES

SCHEDULER_ENGINES = {"vllm-v0": "vllm-0.9.2-v0-eager", "vllm-v1": "vllm-v1"}  # engine = "" resolves so
SECTIONS = ("run", "models", "hardware", "engine", "workload", "slo", "costs")


def _field(default: Any, section: str, kind: type, doc: str, optional: bool = False) -> Any:
    return field(default=default,
                 metadata={"section": section, "kind": kind, "doc": doc, "optional": optional})


@dataclass(frozen=True)
class Scenario:
    """Everything that determines a simulated run. Same scenario + same seed => same result."""

    # [run]
    name: str = _field("default", "run", str, "label used in result folders and tables")
    method: str = _field("psd", "run", str,
                         "ar | sd | psd | sd-2m | sd-5gpu | pearl | psd+tetris | adaptive | decoupled")
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
    tail: str = _field("sd", "run", str,
                       "two-sub-batch PSD once one sub-batch is empty: sd (MineDraft: sequential SD) | "
                       "pre-draft (draft the remaining sub-batch's next k beside its pass, PEARL style; "
                       "a request that rejected a draft is drafted again) | pre-draft-pearl (... verified "
                       "without drafts, as MineDraft's PEARL mode)")
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
    adaptive_modes: str = _field("psd,sd,ar", "run", str,
                                 "adaptive: the modes its policy may run, comma-separated, psd among "
                                 "them (psd,sd never turns speculation off)")
    adaptive_margin: float = _field(0.05, "run", float,
                                    "adaptive: hysteresis; a switch needs the other mode's priced tokens/s "
                                    "above the current one's by this fraction, in [0, 1]")
    adaptive_m: bool = _field(False, "run", bool,
                              "adaptive: also change m (the running cap 2m) while PSD runs: more seats while "
                              "requests wait and drafting stays hidden, fewer when KV runs out or drafting "
                              "exceeds verification")
    adaptive_m_min: int = _field(1, "run", int, "adaptive_m: the smallest m it may run, at most m")
    adaptive_m_max: int = _field(0, "run", int,
                                 "adaptive_m: the largest m it may run, at least m; 0 = no bound of its own "
                                 "(m's, 4096)")
    service_verifiers: int = _field(2, "run", int,
                                    "decoupled: verifier replicas V, each a TP group with its own scheduler "
                                    "and KV, request i served by replica i mod V (round robin)")
    service_drafters: int = _field(1, "run", int,
                                   "decoupled: drafter GPUs D shared by the V replicas over one link, first "
                                   "come first served")
    service_branches: int = _field(2, "run", int,
                                   "decoupled: accepted lengths b, the most probable under the acceptance "
                                   "model, each request's next drafts are prepared for, in 1..k+1")
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
                           "PSD KV: has_deferred (MineDraft's patch as V0 runs it: the verified sub-"
                           "batch skips its append, a block short after a step that verified it too) | "
                           "default (vLLM: all append) | intended (what-if: a request grows only "
                           "when verified)")
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
                                "Poisson arrival rate, requests/s (the arrivals within 1e9 s but "
                                "for a 1e-9 chance: a little over requests / rate); absent = all at t=0",
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
    verify_error: float | None = _field(None, "costs", float,
                                        "the model's error on target passes: each takes this times "
                                        "as long as priced; absent = 1, drawn by --intervals",
                                        optional=True)
    draft_error: float | None = _field(None, "costs", float,
                                       "the model's error on draft passes, as verify_error",
                                       optional=True)
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
        imbalance the summary reports; the adaptive method's PSD mode too); other N and D run
        the round-robin ring."""
        pipelined = self.method in ("psd", "psd+tetris", "adaptive")
        return pipelined and self.sub_batches == 2 and self.drafters == 1

    @property
    def output_after_drafting(self) -> bool:
        """Whether the sampler output crosses the link only once the driver has drafted beside
        the pass (`transfers = "per-tensor"`: MineDraft's point-to-point receive, posted after
        its drafting), rather than when the pass ends."""
        return self.transfers == "per-tensor"

    @property
    def allowed_modes(self) -> tuple[str, ...]:
        """The adaptive method's modes (adaptive_modes), in ADAPTIVE_MODES' order."""
        named = {m.strip() for m in self.adaptive_modes.split(",")}
        return tuple(m for m in ADAPTIVE_MODES if m in named)

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


def field_section(name: str) -> str:
    return FIELDS[name].metadata["section"]


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
