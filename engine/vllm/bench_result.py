"""A vLLM run written in the shape `vllm bench serve --save-result --save-detailed` saves its result.

So that `psdsim validate --bench` can predict a run of this project's own runner as it predicts
any benchmark, the runner writes the keys that validation reads, under vLLM's names and units
(seconds; vLLM's benchmarks/serve.py): per request `input_lens`, `output_lens`, `ttfts`,
`latencies`, `start_times` and `errors`; over the run `duration`, `completed`, the token totals
and throughputs; and the traffic, `request_rate` "inf" with no `max_concurrency`, because an
offline `LLM.generate` takes every request at once. What a client would measure and offline vLLM
does not give is left out rather than invented: `itls` (per-token times) and `generated_texts`.

The times are the summary's (engine/vllm/summary.py `request_times`): each request's TTFT and
end counted from the start of the measured generate, which is when every request was sent, so
every `start_times` entry is 0.0 on that clock. An end adds the engine core's clock to the
frontend's and can pass the makespan timed around the generate by a fraction of a percent
(0.65% in one run on the 2-core VM); `duration` spans the requests, as a client's does, so it
is the later of the two.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from psdsim.engine.vllm.summary import request_times
from psdsim.sim.output.atomic_writes import write_file

LABEL = "psdsim engine run --engine vllm (offline LLM.generate, every request sent at the start)"


def bench_result(outputs: Sequence[Any], *, model_id: str, start_wall: float, makespan_s: float,
                 when: datetime) -> dict[str, Any] | None:
    """The run as a benchmark result, or None where vLLM gave no per-request metrics (engine
    stats off), without which there is no TTFT or latency to write."""
    ttft, end, generated, measured = request_times(outputs, start_wall, makespan_s)
    if not measured:
        return None
    n = len(outputs)
    prompts = [len(o.prompt_token_ids or ()) for o in outputs]
    total_in, total_out = sum(prompts), int(generated.sum())
    duration = max(makespan_s, float(end.max()))
    return {
        "date": when.strftime("%Y%m%d-%H%M%S"), "endpoint_type": "vllm", "backend": "vllm", "label": LABEL,
        "model_id": model_id, "tokenizer_id": model_id, "num_prompts": n,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
        "duration": duration, "completed": n, "failed": 0,
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": n / duration, "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "input_lens": prompts, "output_lens": [int(g) for g in generated],
        "ttfts": [float(t) for t in ttft], "latencies": [float(e) for e in end],
        "start_times": [0.0] * n, "errors": [""] * n,
    }


def write_bench_result(path: Path, result: dict[str, Any]) -> None:
    """One JSON document, as `vllm bench serve --save-result` writes it: atomically, and never over a
    file psdsim did not write (sim/output/atomic_writes.py), since a run that dies mid-write must
    not leave half a result where `psdsim validate --bench` reads one."""
    write_file(path, json.dumps(result) + "\n", "--bench-result")
