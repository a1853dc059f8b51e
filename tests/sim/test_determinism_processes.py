"""Same config + same seed => identical results, bit for bit, across processes too: two fresh
interpreters with different hash seeds (set and dict iteration orders differ between them) write
the same files for the same run, with arrivals, aborts, chunked prefill and a timeline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUN = ["--set", "requests=60", "--set", "output_len=24", "--set", "rate=20", "--set", "abort_fraction=0.2",
       "--set", "enable_chunked_prefill=true", "--set", "seed=11"]
OUTPUTS = ("summary.json", "steps.csv", "requests.csv")


def _run_in_fresh_process(out: Path, hash_seed: str, method: str) -> dict[str, bytes]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run([sys.executable, "-m", "psdsim", "run", "--method", method, *RUN, "--out", str(out),
                    "--trace", str(out.with_suffix(".trace.json"))],
                   check=True, env=env, capture_output=True, timeout=300)
    files = {name: (out / name).read_bytes() for name in OUTPUTS}
    return {**files, "timeline": out.with_suffix(".trace.json").read_bytes()}


def test_two_processes_with_different_hash_seeds_write_the_same_bytes(tmp_path: Path) -> None:
    for method in ("psd", "sd"):
        first = _run_in_fresh_process(tmp_path / f"{method}-a", "1", method)
        second = _run_in_fresh_process(tmp_path / f"{method}-b", "4242", method)
        assert first.keys() == second.keys()
        for name in first:
            assert first[name] == second[name], f"{method}: {name} differs between processes"
        assert all(first[name] for name in first)
