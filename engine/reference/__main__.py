"""`python -m psdsim.engine.reference`: one reference-engine run from the command line.

    python -m psdsim.engine.reference --method psd --k 3 --m 4 --requests 32 --output-len 64 \
        --trace-dir out --set model.draft_noise=0.3 --json

Every EngineConfig field can be given with --set NAME=VALUE (model fields as model.NAME); the
summary is printed as JSON with --json, else laid out as `psdsim run` lays out its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from psdsim.engine.reference.config import EngineConfig, EngineConfigError, ModelConfig, parse_field
from psdsim.sim.numbers import integer


def add_arguments(p: argparse.ArgumentParser, with_set: bool = True) -> None:
    """The reference engine's flags (also `psdsim engine run`'s, which adds its own --set).
    The defaults are EngineConfig's, applied by config_from_namespace (None = not given)."""
    p.add_argument("--method", help="ar | sd | psd | pearl (default psd)")
    p.add_argument("--k", type=integer, help="draft tokens per verification (default 3)")
    p.add_argument("--m", type=integer, help="requests per verification batch; psd runs 2m (default 4)")
    p.add_argument("--requests", type=integer, help="requests (default 16)")
    p.add_argument("--output-len", type=integer, help="output tokens per request (default 32)")
    p.add_argument("--trace-dir", type=Path, help="write per-process step traces (JSONL) here")
    p.add_argument("--profile", action="store_true", help="also write Kineto traces (needs --trace-dir)")
    if with_set:
        p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="engine field, or model.NAME for the models, e.g. --set prompt_len=64 "
                            "--set model.draft_noise=0.3")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")


def config_from_namespace(a: argparse.Namespace, base: dict[str, Any] | None = None
                          ) -> tuple[EngineConfig, bool]:
    """The run's configuration: EngineConfig's defaults, then `base` (a scenario's workload), then
    the flags given, then --set (EngineConfigError names a bad field)."""
    flags = {"method": a.method, "k": a.k, "m": a.m, "requests": a.requests, "output_len": a.output_len,
             "trace_dir": a.trace_dir, "profile": a.profile}
    changes: dict[str, Any] = {**(base or {}), **{n: v for n, v in flags.items() if v is not None}}
    for item in a.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise EngineConfigError(f"--set {item}: write FIELD=VALUE")
        cls = ModelConfig if name.startswith("model.") else EngineConfig
        changes[name] = parse_field(cls, name.removeprefix("model."), value)
    return EngineConfig().with_changes(**changes), a.json


def config_from_args(argv: list[str]) -> tuple[EngineConfig, bool]:
    p = argparse.ArgumentParser(prog="python -m psdsim.engine.reference", description=__doc__.split("\n")[0])
    add_arguments(p)
    return config_from_namespace(p.parse_args(argv))


def run_config(cfg: EngineConfig, as_json: bool) -> int:
    """Check cfg, run it, print its summary (EngineConfigError for a bad field, before any run)."""
    cfg.check()
    if importlib.util.find_spec("torch") is None:
        raise EngineConfigError("the reference engine needs PyTorch: pip install 'psdsim[engine]' "
                                "(CPU only: pip install torch==2.13.0)")
    from psdsim.engine.reference.runner import run

    print_summary(run(cfg).summary(), as_json)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run_config(*config_from_args(sys.argv[1:] if argv is None else argv))
    except EngineConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def print_summary(summary: dict[str, Any], as_json: bool) -> None:
    """An engine run's summary on stdout: one JSON line, or laid out as `psdsim run` lays out a
    simulated run's."""
    if as_json:
        print(json.dumps(summary))
    else:
        from psdsim.sim.output.report import format_engine_run

        print(format_engine_run(summary))


if __name__ == "__main__":
    sys.exit(main())
