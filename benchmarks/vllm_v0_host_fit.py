"""The fits of benchmarks/vllm_v0_host.py's table: each host part as `a + b*B + c*B*k` (B running
sequences), fitted to relative error, and the table of engines.toml's host constants against them.

Kept apart from the measurement so that the fit, its tables and the record read on their own: the
measurement (vLLM's code called with the GPU stubbed) needs vLLM 0.9.2, these only the timings.
"""

from __future__ import annotations

import datetime
import os
import statistics
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vllm_v0_host import Timings

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "measurements" / "vllm_v0_host.md"
PARTS = ("schedule", "propose", "score", "expand", "split", "reject", "outputs", "process",
         "sampling", "pickle", "unpickle")


@dataclass(frozen=True)
class Fit:
    """t = fixed + per_seq * B + per_seq_k * B * k (microseconds), fitted to relative error, and
    how well it fits."""

    part: str
    fixed: float
    per_seq: float
    per_seq_k: float
    rms: float        # root-mean-square of residual / measured
    worst: float      # largest |residual| / measured

    def at(self, batch: int, k: int) -> float:
        return self.fixed + self.per_seq * batch + self.per_seq_k * batch * k


def fit(part: str, rows: list[Timings], stat: str,
        total: Callable[[Timings, str], float] | None = None) -> Fit:
    """Least squares of a part's step time (or of `total`) over the configurations; without
    the B·k term where the rows share one k."""
    y = np.array([total(r, stat) if total else r.us(part, stat) for r in rows])
    x = np.array([[1.0, r.config.batch, r.config.batch * r.config.k] for r in rows])
    if len({r.config.k for r in rows}) == 1:
        x[:, 2] = 0.0
    # relative residuals: B spans 8-256, and a plain fit would answer to the largest batches only
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones(len(y)), rcond=None)
    relative = (y - x @ coef) / y
    return Fit(part, *coef.tolist(), float(np.sqrt(np.mean(relative ** 2))),
               float(np.max(np.abs(relative))))


SPEC_WORKER = ("propose", "score", "reject", "outputs")


def _spec_worker(r: Timings, stat: str) -> float:
    return sum(r.us(p, stat) for p in SPEC_WORKER)


def _sampler(r: Timings, stat: str) -> float:
    return r.us("sampling", stat) + r.us("reject", stat)


def _process(r: Timings, stat: str) -> float:
    return r.us("process", stat)


def fits(rows: list[Timings], stat: str) -> dict[str, Fit]:
    """A fit per part; the spec-decode worker's parts together; the sampler's host side
    (metadata and rejection); output processing with detokenization."""
    plain = [r for r in rows if not r.config.detok]
    detok = [r for r in rows if r.config.detok]
    out = {p: fit(p, plain, stat) for p in PARTS}
    out["spec worker"] = fit("spec worker", plain, stat, _spec_worker)
    out["sampler"] = fit("sampler", plain, stat, _sampler)
    if detok:
        out["process detok"] = fit("process detok", detok, stat, _process)
    return out


# -- printing and recording ------------------------------------------------------------------


def table(rows: list[Timings], stat: str) -> str:
    head = (f"{'config':<20}" + "".join(f"{p:>9}" for p in PARTS)
            + f"{'total':>9}{'pickled':>9}{'extra':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        us = [r.us(p, stat) for p in PARTS]
        total = sum(us) - r.us("split", stat) - r.us("expand", stat)   # see the note below
        lines.append(f"{r.config.label:<20}" + "".join(f"{u:>9.0f}" for u in us) + f"{total:>9.0f}"
                     f"{statistics.median(r.pickled_bytes) / 1024:>8.0f}K"
                     f"{statistics.median(r.extra_rows):>6.0f}")
    return "\n".join(lines)


def fit_lines(found: dict[str, Fit]) -> str:
    head = (f"{'part':<14}{'fixed us':>10}{'us/seq':>9}{'us/seq/k':>10}{'B=64 k=3':>10}"
            f"{'rms':>7}{'worst':>7}")
    lines = [head, "-" * len(head)]
    for f in found.values():
        lines.append(f"{f.part:<14}{f.fixed:>10.1f}{f.per_seq:>9.2f}{f.per_seq_k:>10.2f}"
                     f"{f.at(64, 3):>10.0f}{f.rms:>7.0%}{f.worst:>7.0%}")
    return "\n".join(lines)


def engine_constants() -> dict[str, float]:
    raw = tomllib.loads((ROOT / "sim" / "catalog" / "engines.toml").read_text())
    return raw["vllm-0.9.2-v0-eager"]


K_POINT = 3   # MineDraft's calibration point (setting2, k = 3) for the per-request figures


def per_seq(f: Fit, k: int = K_POINT) -> float:
    return f.per_seq + f.per_seq_k * k


def constants_table(quiet: dict[str, Fit], typical: dict[str, Fit], now: dict[str, float]) -> str:
    """engines.toml's host constants against what the fits say on this machine (fastest-step
    fit first, median-step fit in brackets), per request at k = 3."""
    def both(value: Callable[[dict[str, Fit]], float], unit: str) -> str:
        return f"{value(quiet):.3g} {unit} ({value(typical):.3g})"
    rows = [
        ("step_ms", f"{now['step_ms']} ms", both(lambda f: f["schedule"].fixed / 1000, "ms"),
         "`Scheduler.schedule()`: the fixed part"),
        ("step_request_us", f"{now['step_request_us']} µs", both(lambda f: per_seq(f["schedule"]), "µs"),
         "`Scheduler.schedule()` per running sequence (block manager, k lookahead slots, metadata)"),
        ("output_request_us", f"{now['output_request_us']} µs",
         both(lambda f: per_seq(f["process"]) + per_seq(f["outputs"]), "µs"),
         "per verified sequence: the worker's output lists + the engine's appends and stop checks, "
         "detokenization off"),
        ("output_request_us, detok on", f"{now['output_request_us']} µs",
         both(lambda f: per_seq(f["process detok"]) + per_seq(f["outputs"]), "µs"),
         "the same with detokenization (fit over the k = 3 rows only)"),
        ("metadata_ms", f"{now['metadata_ms']} ms",
         both(lambda f: f["pickle"].fixed / 1000, "ms") + " / "
         + both(lambda f: f["unpickle"].fixed / 1000, "ms"),
         "pickling the sequence-group metadata list (driver) / unpickling it (receiving rank): "
         "the fixed part"),
        ("metadata_request_us", f"{now['metadata_request_us']} µs",
         both(lambda f: per_seq(f["pickle"]), "µs") + " / " + both(lambda f: per_seq(f["unpickle"]), "µs"),
         "the same per sequence; not the transfer, nor rank 1's input rebuild"),
        ("sampler_host_ms", f"{now['sampler_host_ms']} ms", both(lambda f: f["sampler"].fixed / 1000, "ms"),
         "`SamplingMetadata.prepare` + the rejection sampler's dispatch: the fixed part"),
        ("sampler_host_row_us", f"{now['sampler_host_row_us']} µs",
         both(lambda f: per_seq(f["sampler"]) / (K_POINT + 1), "µs"),
         "the same per scored row (k + 1 rows a sequence)"),
        ("(none)", "—", both(lambda f: per_seq(f["spec worker"]), "µs"),
         "spec-decode worker bookkeeping per sequence: proposal split, extra rows, the MQA "
         "scorer's inputs and reshapes, rejection, output lists"),
        ("prepare_ms, prepare_request_us", f"{now['prepare_ms']} ms, {now['prepare_request_us']} µs",
         "not measured", "the model runner's input builder needs the CUDA attention backend"),
    ]
    lines = ["| constant | engines.toml now | measured here at k = 3: fastest (median) | what it covers |",
             "|---|---|---|---|"]
    lines += [f"| `{a}` | {b} | {c} | {d} |" if a != "(none)" else f"| {a} | {b} | {c} | {d} |"
              for a, b, c, d in rows]
    return "\n".join(lines)


HOST_SPEED = """\
## The host-speed factor

These figures are this machine's, not a serving host's. Public system descriptions put H100 and
H200 serving nodes on Sapphire Rapids Xeons: MLCommons Inference v4.1, NVIDIA's
`H200-SXM-141GBx8_TRT_MaxQ` system, lists `Intel(R) Xeon(R) Platinum 8480C` (2.0 GHz base,
3.8 GHz boost in NVIDIA's DGX H200 description); v3.1's Dell `XE9680_H100_SXM_80GBx8_TRT` lists
a Xeon Platinum 8470. This machine is a KVM guest whose Xeon shows AMX and AVX-512 FP16
(Sapphire Rapids class or later) at a 2.6 GHz nominal clock, boost hidden. On the same core
design a lone Python thread scales about with clock, so the factor (serving host's single-thread
speed over this machine's, idle) lies between about 1.0 and 3.8 / 2.6 = 1.46. No published
single-thread benchmark of both was found, so it is **open**; MineDraft's own host (4×L40S plus a
fifth) is not described. The larger uncertainty here is contention: the load average beside the
table is that of a 2-core machine shared with other work, which is why the fastest step of each
configuration is fitted beside the median.
"""

NOT_MEASURED = """\
## What is not measured

* the model runner's input preparation (`prepare_ms`, `prepare_request_us`): V0's
  `ModelInputForGPUBuilder` needs the attention backend and CUDA tensors;
* kernel launches of the GPU passes (`launch_us`) and GPU->CPU syncs (`sync_us`);
* the broadcast's transfer and rank 1's rebuild of its inputs from the unpickled metadata;
* torch work that runs on the GPU on a serving host (the rejection sampler's kernels, the
  scoring contraction): here it runs on CPU tensors of a 64-token vocabulary, so what is timed is
  its Python and dispatch, about what launching it costs, not its GPU time.
"""


def versions() -> str:
    import torch
    import vllm
    return f"vLLM {vllm.__version__}, torch {torch.__version__} (one thread)"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_record(rows: list[Timings], found: dict[str, dict[str, Fit]], loads: tuple[str, str],
                 steps: int, versions: str) -> None:
    """docs/measurements/vllm_v0_host.md: the run's figures, fits and constants table, under
    the header every measurement has (benchmarks/recording.py)."""
    from recording import commit, machine
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "/work/venv-vllm092/bin/python benchmarks/vllm_v0_host.py " + " ".join(sys.argv[1:])
    head = f"""# vLLM 0.9.2 V0 host side per step, measured

- measured: {when}
- commit: {commit()}
- machine: {machine()}; {versions}
- command: `{command.strip()}`
- load average (1, 5, 15 min): {loads[0]} before, {loads[1]} after

What each part covers: the script's docstring. {steps} timed decode steps per configuration
after warm-up; microseconds per step. The engine constants are **not** changed by this record:
the table at the end says what the measurement would put in their place.

## Median step, per part

```
{table(rows, "median")}
```

`total` is the step's host time with the MQA scorer (the eager profile's): it leaves out
`expand` (the other scorer) and `split` (inside `expand`); `pickled` is the metadata list's size; `extra`
the MultiStepWorker's extra rows (sequences whose drafts were all accepted at the step before).

## Fits: t = fixed + a·B + b·B·k

Fastest step of each configuration (the least disturbed by other work):

```
{fit_lines(found["min"])}
```

Median step:

```
{fit_lines(found["median"])}
```

The fit minimises relative residuals (B spans 8-256); `rms` is their root mean square over the
configurations, `worst` the largest. A large `worst` says the part is not linear in B and B·k
over the whole range (or that other work disturbed some configurations); a fixed part below
zero says it is too small for the fit to resolve.

## Against engines.toml's `vllm-0.9.2-v0-eager`

Per request figures are at k = 3, MineDraft's calibration point. The fastest-step fit is the one
to apply (times the host-speed factor below); the median-step fit says how much the load here
moved it.

{constants_table(found["min"], found["median"], engine_constants())}

"""
    RECORD.write_text(head + HOST_SPEED + "\n" + NOT_MEASURED)
