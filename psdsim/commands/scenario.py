"""`psdsim scenario`: print the resolved scenario (file, preset, --set, --method) as TOML."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from psdsim.commands.common import add_preset, add_set

HELP = "print the resolved scenario as TOML"


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.sim.scenario import METHODS

    p.add_argument("scenario", nargs="?", help="scenario TOML file (default: built-in)")
    add_preset(p)
    add_set(p)
    p.add_argument("--method", choices=METHODS, help="override the scenario's method")


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.scenario import load_scenario, scenario_to_toml

    s = load_scenario(args.scenario, args.overrides, args.method, args.preset)
    sys.stdout.write(scenario_to_toml(s))
    return 0
