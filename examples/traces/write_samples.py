"""Write the tiny synthetic traces under examples/traces/, one in each public format psdsim reads.

    python examples/traces/write_samples.py [FOLDER]     # default: examples/traces/

They are not the public data (whose licences and sizes are their owners'): twelve requests each,
drawn from one seeded Generator, written in the columns and clock each format uses, so that a
reader's test and the README's examples run on a fresh clone. Same files every time.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROWS = 12


def _requests() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival offsets in microseconds (Poisson at ~4 a second), prompt and output lengths."""
    rng = np.random.default_rng(2024)
    gaps_us = np.round(rng.exponential(250_000.0, ROWS)).astype(np.int64)
    gaps_us[0] = 0
    return np.cumsum(gaps_us), rng.integers(40, 900, ROWS), rng.integers(8, 200, ROWS)


def _csv(path: Path, header: str, lines: list[str]) -> None:
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")


def write_samples(folder: Path) -> list[Path]:
    offsets_us, prompts, outputs = _requests()
    start = datetime(2023, 11, 16, 18, 15, 46, 680590)
    azure_2023 = [f"{(start + timedelta(microseconds=int(t))).strftime('%Y-%m-%d %H:%M:%S.%f')}0,{p},{o}"
                  for t, p, o in zip(offsets_us, prompts, outputs, strict=True)]
    start_2024 = datetime(2024, 5, 10, 0, 0, 0, 9930, tzinfo=UTC)
    azure_2024 = [f"{(start_2024 + timedelta(microseconds=int(t))).isoformat(sep=' ')},{p},{o}"
                  for t, p, o in zip(offsets_us, prompts, outputs, strict=True)]
    burstgpt = [f"{5 + t // 1_000_000},{'ChatGPT' if i % 3 else 'GPT-4'},{p},{o},{p + o},"
                f"{'Conversation log' if i % 2 else 'API log'}"
                for i, (t, p, o) in enumerate(zip(offsets_us, prompts, outputs, strict=True))]
    mooncake = [json.dumps({"timestamp": int(t // 1000), "input_length": int(p), "output_length": int(o),
                            "hash_ids": list(range(3 * i, 3 * i + 1 + int(p) // 512))})
                for i, (t, p, o) in enumerate(zip(offsets_us, prompts, outputs, strict=True))]
    paths = [folder / name for name in ("azure_2023.csv", "azure_2024.csv", "burstgpt.csv",
                                        "mooncake.jsonl", "vllm_bench.json")]
    _csv(paths[0], "TIMESTAMP,ContextTokens,GeneratedTokens", azure_2023)
    _csv(paths[1], "TIMESTAMP,ContextTokens,GeneratedTokens", azure_2024)
    _csv(paths[2], "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", burstgpt)
    paths[3].write_text("\n".join(mooncake) + "\n", encoding="utf-8")
    paths[4].write_text(json.dumps(_bench_result(offsets_us, prompts, outputs)) + "\n",
                        encoding="utf-8")
    return paths


def _bench_result(offsets_us: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> dict:
    """A `vllm bench serve --save-result --save-detailed` result in its keys (timings invented:
    TTFT grows with the prompt, 20 ms between tokens)."""
    ttfts = [round(0.03 + 4e-5 * int(p), 6) for p in prompts]
    itls = [[0.02] * (int(o) - 1) for o in outputs]
    latencies = [round(t + sum(i), 6) for t, i in zip(ttfts, itls, strict=True)]
    start = 81234.5
    starts = [round(start + int(t) / 1e6, 6) for t in offsets_us]
    duration = max(s + lat for s, lat in zip(starts, latencies, strict=True)) - start
    return {
        "date": "20250101-000000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": ROWS, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": round(duration, 6), "completed": ROWS, "failed": 0,
        "total_input_tokens": int(prompts.sum()), "total_output_tokens": int(outputs.sum()),
        "request_throughput": round(ROWS / duration, 6),
        "output_throughput": round(int(outputs.sum()) / duration, 6),
        "input_lens": [int(p) for p in prompts], "output_lens": [int(o) for o in outputs],
        "ttfts": ttfts, "itls": itls, "latencies": latencies, "start_times": starts,
        "generated_texts": [""] * ROWS, "errors": [""] * ROWS,
    }


if __name__ == "__main__":
    for written in write_samples(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(written)
