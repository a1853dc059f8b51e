"""The reference engine described to the simulator: a catalog, a request trace and scenarios.

`psdsim validate` (engine/validate.py) simulates the engine it measured, so everything the
simulator needs is written from the engine's own configuration, never guessed:

- catalog.toml: the engine's target and draft models, their shapes from its ModelConfig (the
  draft is the target's first `draft_layers` blocks with an LM head of its own; float32, so 4
  bytes per parameter); a "device" for one CPU core with memory to spare (the engine gives every
  running request its cache slot: KV never binds, nothing is preempted); a link for the
  pipe + shared-memory channel between the driver and the verifier process. Bandwidth, FLOPS
  and link speed are nominal: the fitted profile replaces every compute and channel term it has,
  and the run's warnings name any term that fell back to them.
- requests.jsonl: the engine's workload exactly (all requests at t = 0, each its prompt length
  and output length; engine/reference/schedule.py draws them from the seed).
- one scenario per (method, k): m as the engine uses it (max_num_seqs per verification batch;
  PSD keeps 2m running in two sub-batches, as the simulator does), TP 1, vLLM V0 prefill-first
  FCFS without chunked prefill (the engine's scheduler), the draft on its own device where the
  engine runs the target in a second process (psd, pearl, and SD's two-process variant, which
  the simulator calls sd-5gpu with the drafter layout), the fitted profile, and the acceptance
  measured by the SD runs at that k (engine/validate_acceptance.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psdsim.engine.reference.config import EngineConfig, ModelConfig
from psdsim.sim.scenario import Scenario, scenario_from_mapping, toml_value

TARGET_KEY = "reference-target"
DRAFT_KEY = "reference-draft"
DEVICE_KEY = "cpu-core"
LINK_KEY = "cpu-channel"
FLOAT32_BYTES = 4.0

# Engine runs (labels) and the simulator method each corresponds to.
SIM_METHOD = {"ar": "ar", "sd": "sd", "sd-2proc": "sd-5gpu", "psd": "psd", "pearl": "pearl"}
# The profile each is simulated with (engine/validate.py: assemble_profiles): by process layout.
PROFILE_FILE = {"ar": "profile-ar.json", "sd": "profile-one-process.json",
                "sd-2proc": "profile.json", "psd": "profile.json", "pearl": "profile.json"}


@dataclass(frozen=True)
class EngineRun:
    """One engine configuration of a validation: its label (a key of SIM_METHOD) and k; `tag`
    tells apart runs of the same label and k (validate --traces: their folders' names)."""

    label: str
    k: int
    tag: str = ""

    @property
    def method(self) -> str:
        return "sd" if self.label == "sd-2proc" else self.label

    @property
    def name(self) -> str:
        name = self.label if self.label == "ar" else f"{self.label}_k{self.k}"
        return f"{name}@{self.tag}" if self.tag else name

    def config(self, base: EngineConfig, trace_dir: Path | None) -> EngineConfig:
        return base.with_changes(method=self.method, k=self.k, separate_verifier=self.label == "sd-2proc",
                                 trace_dir=trace_dir)


def _model_entry(m: ModelConfig, layers: int, role: str) -> dict[str, Any]:
    return {
        "hf_id": f"psdsim/reference-{role}",
        "layers": layers, "hidden": m.hidden, "intermediate": m.mlp, "heads": m.heads,
        "kv_heads": m.heads, "head_dim": m.hidden // m.heads, "vocab": m.vocab,
        "tie_embeddings": False, "qk_norm": False, "bytes_per_param": FLOAT32_BYTES,
        "source": (f"psdsim reference engine ModelConfig (seed {m.seed}): {role}, {layers} blocks of "
                   "fused QKV + output projection + SwiGLU MLP, RMSNorm, untied embedding and LM head, "
                   "float32 weights"),
    }


def cpu_hardware() -> dict[str, Any]:
    """The catalog's `gpus` and `links` for an engine on CPU cores: one core as the device, the
    driver <-> verifier process channel as the link (nominal numbers: a fitted profile replaces
    every term it has, and a run's warnings name any that fell back to them)."""
    return {
        "gpus": {DEVICE_KEY: {
            "name": "one CPU core (reference engine: one pinned process, one thread)",
            "memory_gb": 1000.0, "memory_bandwidth_gbps": 20.0, "bf16_tflops": 0.08, "nvlink": False,
            "host_link": LINK_KEY,
            "source": "nominal (a core's ~20 GB/s, ~80 GFLOPS float32 with AVX2 FMA); memory set large "
                      "because the engine never runs out of cache slots. The fitted profile replaces "
                      "the compute terms; warnings name any analytic fallback",
        }},
        "links": {LINK_KEY: {
            "name": "driver <-> verifier process: pipe (inputs) + shared memory (outputs)",
            "nvlink": False, "p2p_latency_us": 50.0, "p2p_bandwidth_gbps": 5.0,
            "allreduce_latency_us": 50.0, "allreduce_busbw_gbps": 5.0,
            "source": "nominal; the profile's comm and broadcast terms, fitted to the engine's "
                      "two-process SD traces, replace it",
        }},
    }


def catalog_doc(cfg: EngineConfig) -> dict[str, Any]:
    """The catalog tables describing the engine's models, its CPU core and its channel."""
    m = cfg.model
    return {**cpu_hardware(),
            "models": {TARGET_KEY: _model_entry(m, m.layers, "target"),
                       DRAFT_KEY: _model_entry(m, m.draft_layers, "draft")}}


def catalog_toml(cfg: EngineConfig) -> str:
    return catalog_text(catalog_doc(cfg))


def catalog_text(doc: dict[str, Any]) -> str:
    """A catalog document as the TOML a scenario's `catalog` field reads."""
    lines = ["# The engine as the simulator sees it (written by `psdsim validate`)."]
    for table, entries in doc.items():
        for key, fields in entries.items():
            lines += ["", f'[{table}."{key}"]']
            lines += [f"{name} = {toml_value(value)}" for name, value in fields.items()]
    return "\n".join(lines) + "\n"


def requests_jsonl(prompt_lens: Sequence[int], output_len: int | Sequence[int],
                   arrivals: Sequence[float] | None = None) -> str:
    """A workload as a request trace: the engine's offline one (one output length, arrival 0
    for all), or a real run's requests (validate --traces) with their own output lengths and
    arrival times."""
    outs = [output_len] * len(prompt_lens) if isinstance(output_len, int) else list(output_len)
    times = [0.0] * len(prompt_lens) if arrivals is None else list(arrivals)
    return "".join(json.dumps({"arrival_s": t, "prompt_tokens": n, "output_tokens": o}) + "\n"
                   for n, o, t in zip(prompt_lens, outs, times, strict=True))


def scenario_values(run: EngineRun, cfg: EngineConfig, requests: int, folder: Path,
                    acceptance: Mapping[int, float], spread: float) -> dict[str, Any]:
    """The scenario fields of one engine run (paths absolute, inside `folder`)."""
    max_len = cfg.with_changes(k=run.k).max_len   # the engine's cache length
    values: dict[str, Any] = {
        "name": f"reference-{run.name}", "method": SIM_METHOD[run.label], "k": run.k, "m": cfg.m,
        "seed": cfg.seed, "catalog": str(folder / "catalog.toml"),
        "target": TARGET_KEY, "draft": DRAFT_KEY, "acceptance_spread": spread,
        "gpu": DEVICE_KEY, "drafter_gpu": DEVICE_KEY, "link": LINK_KEY, "tensor_parallel_size": 1,
        "sd_5gpu_layout": "drafter",
        "gpu_memory_utilization": 0.9, "max_model_len": max_len,
        "max_num_batched_tokens": max(cfg.max_num_batched_tokens, max_len),
        "scheduler": "vllm-v0", "enable_chunked_prefill": False, "overlap_draft_prefill": True,
        # one pickled call each way; the verifier writes its output into shared memory when its
        # pass ends, whatever the driver is doing (engine/reference/workers.py)
        "transfers": "one-message",
        # every GPU counts the KV it holds (the engine gives each running request its cache slot)
        "kv_sizing": "exact",
        # prompt_len only satisfies the checks: the trace gives every request's prompt length.
        "requests": requests, "output_len": cfg.output_len, "prompt_len": cfg.longest_prompt,
        "trace": str(folder / "requests.jsonl"),
        "profile": str(folder / PROFILE_FILE[run.label]),
    }
    if run.label != "ar":
        values["acceptance"] = acceptance[run.k]
    if run.label == "pearl":   # the engine's PEARL is the lossless per-request form
        values["pearl_variant"] = "per-request"
    return values


def scenario_for(run: EngineRun, cfg: EngineConfig, requests: int, folder: Path,
                 acceptance: Mapping[int, float], spread: float) -> Scenario:
    return scenario_from_mapping(scenario_values(run, cfg, requests, folder, acceptance, spread),
                                 f"validate {run.name}")

