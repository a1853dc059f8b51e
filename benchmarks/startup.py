"""Start-up time of the `psdsim` command: what a user waits for before anything is simulated.

Times, as the median of several fresh processes, `psdsim --help`, `import psdsim.cli`, a
command's --help and `psdsim run --no-write` of a tiny scenario, and lists which heavy modules
each loads. The machine's load moves every figure (the bare interpreter's start is printed
for scale). Target: `psdsim --help` under 0.3 s; `psdsim run` never
imports scipy.stats or scipy.optimize (tests/cli/test_startup.py checks the modules, not the time).

    python benchmarks/startup.py [--repeats N] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from recording import add_record_flag, write

TARGET_HELP_S = 0.3
HEAVY = ("numpy", "scipy.special", "scipy.stats", "scipy.optimize", "simpy", "matplotlib", "torch")
TINY = ["--set", "requests=8", "--set", "output_len=8", "--set", "prompt_len=16", "--no-write", "--json"]
CASES = (
    ("psdsim --help", ["--help"]),
    ("psdsim run --help", ["run", "--help"]),
    ("psdsim engine run --help", ["engine", "run", "--help"]),
    ("psdsim run (8 requests)", ["run", *TINY]),
)


def _cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "psdsim", *argv]


def _median_s(cmd: list[str], repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)


def _loaded(argv: list[str]) -> str:
    """The heavy modules a command leaves in sys.modules (its output silenced)."""
    code = ("import contextlib, io, sys\nfrom psdsim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(sys.argv[1:])\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    add_record_flag(parser)
    args = parser.parse_args()
    python = _median_s([sys.executable, "-c", "pass"], args.repeats)
    rows = [("python -c pass (interpreter alone)", python, "")]
    cli = _median_s([sys.executable, "-c", "import psdsim.cli"], args.repeats)
    rows.append(("import psdsim.cli", cli, ""))
    for label, argv in CASES:
        rows.append((label, _median_s(_cli(argv), args.repeats), _loaded(argv) or "–"))
    lines = [f"{'what':<36}{'median s':>10}{'psdsim s':>10}  heavy modules loaded"]
    lines += [f"{label:<36}{wall:>10.3f}{wall - python:>10.3f}  {mods}" for label, wall, mods in rows]
    help_s = rows[2][1]
    verdict = "met" if help_s < TARGET_HELP_S else "NOT met"
    lines.append(f"\n`psdsim --help`: {help_s:.3f} s (target < {TARGET_HELP_S} s: {verdict}); "
                 f"median of {args.repeats} fresh processes; "
                 "psdsim s = median s less the bare interpreter's start (what psdsim itself adds)")
    print("\n".join(lines))
    if args.record:
        write("startup", "Start-up time of the psdsim command", lines)


if __name__ == "__main__":
    main()
