"""This checkout's speed against an earlier commit's, measured side by side in one run.

Why: this machine's absolute times move ±30% with its load, so a speed target is a
ratio against a baseline measured in the same run, interleaved (old, new, old, new, …) so that
load shifts hit both. The baseline commit is checked out into a temporary git worktree; each
measurement is a fresh process that imports one tree only.

Measured per tree: `simulate()` of the default scenario's engine loop for each method (after a
warm-up run of 8 requests, so that modules imported on first use are not timed), priced by
the roofline in both trees (the cost model the old commit had, so that both simulate the same
work; the newer default engine adds CPU-side terms to every step), and the whole `psdsim run`
process of the same scenario (start-up, simulation and writing the results folder). Ratios are
per interleaved pair, then the median, of elapsed (wall) time and of the process's CPU time (which
other jobs sharing the machine disturb less than wall time).

`--engine default` runs each tree's own default scenario instead, engine included: what a user
of each commit waits for (the newer one simulates more work a step), recorded apart
(docs/measurements/speed_vs_default_engine.md).

    python benchmarks/speed_vs.py --against REV [--repeats N] [--methods psd,sd,ar]
                                  [--engine roofline|default] [--record]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recording import ROOT, add_record_flag, write

# Run in a child process with the tree's folder as argv[1]: make `psdsim.*` importable from that
# tree whatever its layout (the old one had top-level sim/, the new one maps sim/ under psdsim),
# then time simulate() of the default scenario for one method, roofline-priced (argv[5] "roofline")
# or with the tree's own default engine ("default").
CHILD = r"""
import json, sys, time
tree, method, mode, engine = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
sys.path.insert(0, tree)
import psdsim
if "from sim." in open(tree + "/psdsim/__init__.py").read():  # the old layout: top-level sim/
    from sim.run import simulate
    from sim.scenario import Scenario
else:  # the new one: the tree's sim/ is psdsim.sim (as its package-dir mapping installs it)
    psdsim.__path__.append(tree)
    from psdsim.sim.run import simulate
    from psdsim.sim.scenario import Scenario
pinned = {"engine": "roofline"} if engine == "roofline" and "engine" in Scenario.__dataclass_fields__ else {}
s = Scenario(method=method, **pinned)
if mode == "loop":
    simulate(Scenario(method=method, requests=8, **pinned))   # lazy imports land outside the timing
    began, cpu = time.perf_counter(), time.process_time()
    summary = simulate(s).summary
    print(json.dumps({"wall_s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu,
                      "steps": summary["decode_steps"] + summary["prefill_steps"]}))
else:
    from psdsim.cli import main
    began = time.perf_counter()
    out = sys.argv[4]
    main(["run", "--method", method, "--out", out] + (["--set", "engine=roofline"] if pinned else []))
    print(json.dumps({"wall_s": time.perf_counter() - began}), file=sys.stderr)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measure(tree: Path, method: str, mode: str, engine: str, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds: simulate() alone ("loop", timed inside the child), or the whole
    process ("process", timed outside it); `engine`: "roofline" pinned, or each tree's "default"."""
    out = scratch / f"run-{tree.name}-{method}"
    began, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, "-c", CHILD, str(tree), method, mode, str(out), engine],
                          capture_output=True, text=True, check=True, cwd=scratch)
    took, took_cpu = time.perf_counter() - began, _children_cpu() - cpu
    subprocess.run(["rm", "-rf", str(out)], check=True)
    if mode == "loop":
        timed = json.loads(done.stdout.strip().splitlines()[-1])
        return timed["wall_s"], timed["cpu_s"]
    return took, took_cpu


def compare_against(rev: str, methods: list[str], repeats: int, engine: str = "roofline") -> list[str]:
    """The table of this checkout against commit `rev`, checked out into a temporary worktree."""
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(old), rev],
                       cwd=ROOT, check=True)
        try:
            return _compare(old, ROOT, methods, repeats, engine, Path(tmp))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)


def compare_and_record(rev: str, methods: list[str], repeats: int, record: bool,
                       engine: str = "roofline") -> None:
    """The comparison against `rev`, printed, and with `record` written to
    docs/measurements/speed_vs.md (this script and sim_speed.py --against), or with
    `engine` = "default" to speed_vs_default_engine.md."""
    lines = compare_against(rev, methods, repeats, engine)
    if record:
        priced = ("priced by the roofline in both trees" if engine == "roofline" else
                  "with each tree's own default engine (this checkout's adds the engine model's "
                  "CPU-side terms and MineDraft's semantics to every step: more work than the old one)")
        notes = (f"Baseline: {rev}. Median over {repeats} interleaved pairs of fresh processes; "
                 f"`loop` is simulate() of the default scenario {priced}, "
                 "`process` the whole `psdsim run` of it (start-up, simulation, results folder). "
                 "ratio = old / new per pair, median (above 1: this checkout is faster). `wall` is "
                 "elapsed time, `cpu` the process's own user + system time, which other jobs on a "
                 "shared machine disturb less.")
        name, title = (("speed_vs", "Speed against a baseline commit") if engine == "roofline" else
                       ("speed_vs_default_engine", "Speed against a baseline commit, default engines"))
        print(f"recorded: {write(name, title, lines, notes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the baseline commit (any git revision)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="psd,sd,ar")
    parser.add_argument("--engine", choices=("roofline", "default"), default="roofline",
                        help="price both trees by the roofline (the same work), or run each one's default")
    add_record_flag(parser)
    args = parser.parse_args()
    compare_and_record(args.against, args.methods.split(","), args.repeats, args.record, args.engine)


def _compare(old: Path, new: Path, methods: list[str], repeats: int, engine: str,
             scratch: Path) -> list[str]:
    head = "".join(f"{'old ' + kind:>10}{'new ' + kind:>10}{'ratio':>8}" for kind in ("wall", "cpu"))
    lines = [f"{'case':<16}{head}"]
    print(lines[0], flush=True)
    for mode in ("loop", "process"):
        for method in methods:
            pairs = [tuple(_measure(tree, method, mode, engine, scratch) for tree in (old, new))
                     for _ in range(repeats)]
            cells = []
            for i in (0, 1):   # wall, then CPU
                o = statistics.median(p[0][i] for p in pairs)
                n = statistics.median(p[1][i] for p in pairs)
                ratio = statistics.median(p[0][i] / p[1][i] for p in pairs)
                cells.append(f"{o:>10.3f}{n:>10.3f}{ratio:>7.2f}×")
            lines.append(f"{mode + ' ' + method:<16}{''.join(cells)}")
            print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
