"""`psdsim engine run [--engine reference|vllm] …`: one run of a real engine.

The flags are the chosen engine's own (`psdsim engine run --help` lists the reference engine's,
`psdsim engine run --engine vllm --help` vLLM's); `--set` means what it means in every command
(psdsim/commands/engine_sets.py): scenario fields bare, engine.FIELD and model.FIELD namespaced.
Errors are the CLI's one-line user errors.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from psdsim.commands.common import user_error
from psdsim.commands.engine_sets import SET_HELP, engine_error, scenario_workload, split_sets

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
                   help="reference: the PyTorch reference engine (default); vllm: vLLM "
                        "(docs/engines.md, The vLLM runner)")
    if engine == "vllm":
        from psdsim.engine.vllm.__main__ import add_arguments as engine_arguments
    else:
        from psdsim.engine.reference.__main__ import add_arguments as engine_arguments

        r.add_argument("--scenario", type=Path,
                       help="take the workload (k, m, requests, output_len, prompt_len, seed, "
                            "max_num_batched_tokens) from this scenario; flags override it. A file "
                            "setting other scenario fields is refused (the engine would ignore them)")
    engine_arguments(r, with_set=False)
    r.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help=SET_HELP)


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _check_seed(base: dict[str, object]) -> None:
    """The scenario's seed seeds the engine's torch generators: refused, naming `seed` as the user
    wrote it, where torch cannot take it (the scenario itself only asks for >= 0)."""
    from psdsim.engine.reference.config import SEED_MAX, seed_problem

    # EngineConfig.check allows one less than SEED_MAX: the workload draws with seed + 1.
    if "seed" in base and (problem := seed_problem(base["seed"], SEED_MAX - 1)) is not None:
        raise user_error("seed", f"{base['seed']} {problem}", f"use a seed in [0, {SEED_MAX - 1}]")


def run(args: argparse.Namespace) -> int:
    from psdsim.engine.reference.config import EngineConfigError

    if args.engine == "vllm":
        from psdsim.engine.vllm import __main__ as vllm
        from psdsim.engine.vllm.config import TinySpec, VllmConfig

        fields, model_fields = _names(VllmConfig), _names(TinySpec)
        sets = split_sets(args.set, fields)
        args.set, args.option = sets.scenario, [*sets.engine, *(f"tiny.{item}" for item in sets.model)]
        configure, run_config = (lambda: vllm.config_from_namespace(args)), vllm.run_config
    else:
        from psdsim.engine.reference import __main__ as ref
        from psdsim.engine.reference.config import EngineConfig, ModelConfig

        fields, model_fields = _names(EngineConfig), _names(ModelConfig)
        sets = split_sets(args.set, fields)
        base = scenario_workload(args.scenario, sets.scenario)
        _check_seed(base)
        args.set = [*sets.engine, *(f"model.{item}" for item in sets.model)]
        configure, run_config = (lambda: ref.config_from_namespace(args, base)), ref.run_config
    try:
        return run_config(*configure())
    except EngineConfigError as exc:
        raise engine_error(exc, fields, model_fields) from None
