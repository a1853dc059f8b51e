"""`psdsim engine run [--engine reference|vllm] …`: one run of a real engine.

The flags are the chosen engine's own (`psdsim engine run --help` lists the reference engine's,
`psdsim engine run --engine vllm --help` vLLM's); errors are the CLI's one-line user errors.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

HELP = ("run a real engine once: `psdsim engine run [--engine reference|vllm] --method psd --k 3 …` "
        "(default: the PyTorch reference engine)")
ENGINES = ("reference", "vllm")


def pick_engine(argv: Sequence[str]) -> str:
    """The engine named by `--engine NAME` / `--engine=NAME` on the line (default reference), read
    before parsing because the flags that follow depend on it."""
    name = "reference"
    for i, item in enumerate(argv):
        if item == "--engine" and i + 1 < len(argv):
            name = argv[i + 1]
        elif item.startswith("--engine="):
            name = item.partition("=")[2]
    return name


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    engine = pick_engine(argv)
    which = "vLLM" if engine == "vllm" else "the PyTorch reference engine"
    other = ("`psdsim engine run --engine vllm --help` lists vLLM's flags." if engine != "vllm"
             else "`psdsim engine run --help` lists the reference engine's flags.")
    r = sub.add_parser("run", help="one engine run", epilog=other,
                       description=f"One run of {which}; the summary on stdout.")
    r.add_argument("--engine", choices=ENGINES, default="reference",
                   help="reference: the PyTorch reference engine (default); vllm: vLLM (README, The vLLM "
                        "runner)")
    if engine == "vllm":
        from psdsim.engine.vllm.__main__ import add_arguments as engine_arguments
    else:
        from psdsim.engine.reference.__main__ import add_arguments as engine_arguments
    engine_arguments(r)


def run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        from psdsim.engine.vllm.__main__ import config_from_namespace, run_config
    else:
        from psdsim.engine.reference.__main__ import config_from_namespace, run_config
    return run_config(*config_from_namespace(args))
