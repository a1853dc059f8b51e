"""`psdsim theory`: the closed-form PSD theory, and its tie to a scenario (--tail, --bridge)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import Progress, add_set, guarded_write, user_error
from psdsim.sim.numbers import integer, number

HELP = ("closed-form PSD theory (optima, ratio, published constants); --tail and --bridge tie it to a "
        "scenario")


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.theory.published import A0

    # The closed-form model's flags default to None so that one given with --tail or --bridge
    # (which do not read them) is seen and refused; theory_model fills in MODEL_DEFAULTS.
    p.add_argument("--alpha", type=number, help="frontier sharpness (1/time unit; default 1)")
    p.add_argument("--V", type=number, help=f"verification time per step (default a0 = {A0:.4f})")
    p.add_argument("--c", type=number, help="PSD link time on the verifier's side (default 0)")
    p.add_argument("--c-drafter", type=number, help="PSD link time on the drafter's side (default 0)")
    p.add_argument("--serial-psd", type=number, help="PSD time outside the overlap (default 0)")
    p.add_argument("--serial-sd", type=number, help="SD time besides draft + verify (default 0)")
    p.add_argument("--bonus", type=number,
                   help="tokens per verification beyond the frontier (1 counts the bonus token; default 0)")
    p.add_argument("--scale", type=number, help="tokens the frontier saturates at (default 1)")
    p.add_argument("--t-token", type=number, help="drafting time per draft token: report the best whole k")
    p.add_argument("--k-max", type=integer, help="largest k considered (default 32)")
    p.add_argument("--plot", type=Path, metavar="DIR", help="write the theory figures (PNG and SVG)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--tail", action="store_true",
                   help="expected parallelization rate of the scenario's finite request pool")
    p.add_argument("--bridge", action="store_true",
                   help="simulate SD and PSD over --ks and compare with the fitted theory")
    p.add_argument("--ks", help="k values for --bridge: 1-6 or 1,2,4 (default 1-6)")
    p.add_argument("scenario", nargs="?", help="scenario for --tail/--bridge (default: built-in)")
    add_set(p, "scenario field for --tail/--bridge, e.g. --set requests=64")


def parse_ks(text: str) -> list[int]:
    try:
        if "-" in text:
            lo, hi = (integer(x) for x in text.split("-", 1))
            ks = list(range(lo, hi + 1))
        else:
            ks = [integer(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ks = []
    if len(ks) < 2 or min(ks) < 1 or max(ks) > 32 or len(set(ks)) != len(ks):
        raise user_error("--ks", f"expected at least two distinct k in 1..32, got {text!r}",
                         "write e.g. --ks 1-6 or --ks 1,2,4,8")
    return ks


def model_defaults() -> dict[str, float]:
    from psdsim.theory.published import A0

    return {"alpha": 1.0, "V": A0, "c": 0.0, "c_drafter": 0.0, "serial_psd": 0.0, "serial_sd": 0.0,
            "bonus": 0.0, "scale": 1.0, "k_max": 32}


def theory_model(args: argparse.Namespace) -> Any:
    """The model the flags describe; unset flags take model_defaults() (written into `args`)."""
    from psdsim.theory.model import FrontierModel

    for name, default in model_defaults().items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for name in ("alpha", "V", "scale"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise user_error(f"--{name}", f"must be a positive number, got {value}",
                             f"write e.g. --{name} 1.0")
    for name in ("c", "c_drafter", "serial_psd", "serial_sd", "bonus"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            flag = "--" + name.replace("_", "-")
            raise user_error(flag, f"must be >= 0, got {value}", f"write e.g. {flag} 0")
    if args.t_token is not None and not (math.isfinite(args.t_token) and args.t_token > 0):
        raise user_error("--t-token", f"must be a positive number, got {args.t_token}",
                         "write e.g. --t-token 0.1")
    if args.k_max < 1:
        raise user_error("--k-max", f"must be >= 1, got {args.k_max}", "write e.g. --k-max 16")
    return FrontierModel(alpha=args.alpha, V=args.V, bonus=args.bonus, scale=args.scale,
                         comm=args.c, comm_drafter=args.c_drafter, serial_psd=args.serial_psd,
                         serial_sd=args.serial_sd)


# Past it (or below its inverse) a product or ratio of two inputs can leave a float's range.
EXTREME = 1e150


def _not_finite(doc: Any, path: str = "") -> list[str]:
    """The dotted names (as --json writes them) of the results that are not finite numbers."""
    if isinstance(doc, dict):
        return [bad for key, value in doc.items() for bad in _not_finite(value, f"{path}{key}.")]
    if isinstance(doc, list | tuple):
        return [bad for i, value in enumerate(doc) for bad in _not_finite(value, f"{path}{i}.")]
    if isinstance(doc, float) and not math.isfinite(doc):
        return [f"{path.rstrip('.')} = {doc}"]
    return []


def _extreme_inputs(args: argparse.Namespace) -> str:
    """The model's flags whose values lie outside [1/EXTREME, EXTREME] (0 aside), else every flag
    given a value other than its default: the inputs an overflow came from."""
    defaults = {**model_defaults(), "t_token": None}
    values = {name: getattr(args, name) for name in defaults if name != "k_max"}
    names = [name for name, v in values.items() if v and not 1 / EXTREME <= abs(v) <= EXTREME]
    names = names or [name for name, v in values.items() if v != defaults[name]]
    return ", ".join(f"--{name.replace('_', '-')} {values[name]:g}" for name in names) or "the defaults"


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.output.overwrite_guard import check_output_file
    from psdsim.sim.output.places import landing
    from psdsim.sim.scenario import load_scenario
    from psdsim.studies.theory_bridge import bridge, scenario_tail
    from psdsim.studies.theory_report import (
        THEORY_FIGURES,
        bridge_json,
        bridge_lines,
        optima_lines,
        plot_theory,
        published_lines,
        tail_lines,
        theory_json,
    )

    # a scenario, --set or --ks that nothing reads is refused, not ignored
    scenario_read = args.tail or args.bridge
    for flag, given, read, by in (("scenario", args.scenario, scenario_read, "--tail or --bridge"),
                                  ("--set", args.overrides, scenario_read, "--tail or --bridge"),
                                  ("--ks", args.ks, args.bridge, "--bridge")):
        if given and not read:
            raise user_error(flag, f"applies with {by} only", f"add {by}, or leave {flag} out")
    for name in (*model_defaults(), "t_token", "plot"):   # the closed-form model's own flags
        if scenario_read and getattr(args, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise user_error(flag, "applies to the closed-form model, which --tail and --bridge do not read",
                             f"run `psdsim theory {flag} …` on its own, or leave {flag} out")
    doc: dict[str, Any] = {}
    lines: list[str] = []
    if args.tail or args.bridge:
        s = load_scenario(args.scenario, args.overrides)
        if args.tail:
            est = scenario_tail(s)
            doc["tail"] = {"requests": s.requests, "m": s.m, **vars(est)}
            lines += tail_lines(est, s.requests, s.m)
        if args.bridge:
            progress = Progress(not args.json)
            rep = bridge(s, parse_ks(args.ks or "1-6"), progress=lambda f: progress("bridge", f))
            doc["bridge"] = bridge_json(rep)
            lines += bridge_lines(rep)
    else:
        import numpy as np

        m = theory_model(args)
        with np.errstate(all="ignore"):   # an overflow is refused below, in one line, not warned of
            doc = theory_json(m, args.t_token, args.k_max)
        overflowed = _not_finite(doc)
        if overflowed:   # finite inputs whose products overflow: alpha 1e308 gives T* = inf
            verb = "overflows" if len(overflowed) == 1 else "overflow"
            raise user_error("theory", f"{', '.join(overflowed)} {verb} a float, from "
                                       f"{_extreme_inputs(args)}",
                             f"give alpha, V and the times in units that keep each within "
                             f"[{1 / EXTREME:g}, {EXTREME:g}]")
        lines += [*optima_lines(m, args.t_token, args.k_max), "", *published_lines()]
        if args.plot:
            folder = landing(args.plot, "--plot")   # a name too long is refused here, in one line
            if folder.exists() and not folder.is_dir():
                raise user_error("--plot", f"{str(args.plot)!r} is a file; --plot takes a folder",
                                 "give a folder (new or existing) with --plot DIR")
            figures = [("--plot", args.plot / name) for name in THEORY_FIGURES]
            with output_locks(figures):   # from the checks to the last rename
                for _, path in figures:   # the folder may be the user's: replace only our own figures
                    check_output_file(path, "--plot")
                paths = guarded_write(args.plot, lambda: plot_theory(m, args.plot), "--plot",
                                      "choose a writable folder with --plot DIR")
            doc["figures"] = [str(p) for p in paths]
            lines += ["", "figures: " + ", ".join(str(p) for p in paths)]
    if args.json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print("\n".join(lines))
    return 0
