"""Sweep throughput (runs per minute): the local process pool against serial, side by side.

For two run sizes — short runs (where per-run overhead shows) and runs the size of examples/sweep.toml's
— the same grid is swept serially (`--workers 1`) and on the local pool (`--workers N`,
default all cores), each into a fresh folder; the tables must be identical. `--ray` adds the Ray
executor (a local instance; its start-up time is included). The first line measures what the
machine can give in parallel at all: a pure-Python loop in 1 process, then in N at once.

    python benchmarks/sweep_speed.py [--workers N] [--repeats R] [--ray] [--record]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from recording import Lines, add_record_flag, write

from psdsim.studies.executors import ray_available
from psdsim.studies.sweep import run_sweep
from psdsim.studies.sweep_design import load_design

SIZES = {  # label -> (base fields, grid)
    "short runs (40 req x 32 tok)": ("requests = 40\noutput_len = 32\nprompt_len = 128",
                                     'method = ["sd", "psd"]\nk = [1, 2, 3, 4, 5, 6]\nm = [4, 8, 16, 32]'),
    "example runs (200 req x 128 tok)": ('preset = "setting2"\nrequests = 200\noutput_len = 128',
                                         'method = ["sd", "psd"]\nk = [2, 3, 4]\nm = [8, 16]'),
}


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def parallel_capacity(workers: int, n: int = 4_000_000) -> float:
    """Speed-up of `workers` processes each burning n iterations over one process doing all."""
    began = time.perf_counter()
    for _ in range(workers):
        _burn(n)
    serial = time.perf_counter() - began
    began = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_burn, [n] * workers))
    return serial / (time.perf_counter() - began)


def sweep_once(spec: Path, out: Path, executor: str, workers: int, repeats: int) -> tuple[float, int, str]:
    """Best wall time of `repeats` sweeps, each into a fresh folder (nothing reused)."""
    design = load_design(spec)
    walls = []
    for r in range(repeats):
        began = time.perf_counter()
        report, _ = run_sweep(design, out / str(r), workers=workers, executor=executor)
        walls.append(time.perf_counter() - began)
        assert report.ran == len(design.runs)
    return min(walls), report.ran, (out / "0" / "results.csv").read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many sweeps per mode")
    parser.add_argument("--ray", action="store_true", help="also time the Ray executor")
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    modes = [("serial", "local", 1), (f"pool x{args.workers}", "local", args.workers)]
    if args.ray and ray_available():
        modes.append((f"ray x{args.workers}", "ray", args.workers))
    out(f"{os.cpu_count()} cores; parallel capacity (pure-Python loop, {args.workers} processes vs 1): "
          f"{parallel_capacity(args.workers):.2f}x")
    out(f"best of {args.repeats} sweeps per mode (design already validated, figures not drawn)")
    head = "".join(f"{name + ' runs/min':>22}" for name, _, _ in modes)
    out(f"{'sweep':<36}{'runs':>6}{head}{'pool/serial':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, (base, grid)) in enumerate(SIZES.items()):
            spec = Path(tmp) / f"spec{i}.toml"
            spec.write_text(f"[base]\n{base}\n[grid]\n{grid}\n")
            rates, tables, runs = [], set(), 0
            for name, executor, workers in modes:
                wall, runs, csv = sweep_once(spec, Path(tmp) / f"out{i}-{name}", executor, workers,
                                            args.repeats)
                rates.append(runs / wall * 60)
                tables.add(csv)
            assert len(tables) == 1, "executors disagree"
            cells = "".join(f"{r:>22.0f}" for r in rates)
            out(f"{label:<36}{runs:>6}{cells}{rates[1] / rates[0]:>12.2f}x")

    if args.record:
        notes = "Best of the repeats per mode; the executors' tables are asserted identical."
        print(f"recorded: {write('sweep_speed', 'Sweep throughput by executor', out, notes)}")


if __name__ == "__main__":
    main()
