"""`python -m psdsim.engine.vllm` (= `psdsim engine run --engine vllm`): one vLLM run from the command line.

    psdsim engine run --engine vllm --method sd --k 3 --m 4 --requests 16 --output-len 64 --json
    psdsim engine run --engine vllm --scenario my.toml --set requests=32 --method sd
    psdsim engine run --engine vllm --target ./Qwen3-8B --draft ./Qwen3-0.6B --set engine.dtype=auto

Without --target the tiny local Qwen3 pair is built (seconds, no download) and used. --set
changes scenario fields (with --scenario or the built-in default scenario: k, m, requests,
output_len, seed and the dataset's prompt lengths come from it); `psdsim engine run` sets any
VllmConfig field with --set engine.NAME=VALUE and the tiny models' with --set model.NAME=VALUE
(`python -m psdsim.engine.vllm`: --option NAME=VALUE and --option tiny.NAME=VALUE). The summary
is printed as JSON with --json, else laid out as `psdsim run` lays out its own; vLLM's own log
goes to stderr either way, so stdout holds the summary alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from psdsim.engine.reference.__main__ import print_summary
from psdsim.engine.vllm.config import EngineConfigError, VllmConfig, option_changes
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import integer, number

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported as one line naming it (EngineConfigError) instead of the
    usage block and exit."""

    def error(self, message: str) -> NoReturn:
        raise EngineConfigError(message)


def add_arguments(p: argparse.ArgumentParser, with_set: bool = True) -> None:
    """vLLM's run flags (also `psdsim engine run --engine vllm`'s, which adds its own --set)."""
    p.add_argument("--method", help="ar | sd | psd (psd needs the MineDraft plugin; default sd)")
    p.add_argument("--k", type=integer, help="num_speculative_tokens (default 3)")
    p.add_argument("--m", type=integer, help="max_num_seqs (default 4)")
    p.add_argument("--requests", type=integer)
    p.add_argument("--prompt-len", type=integer)
    p.add_argument("--output-len", type=integer)
    p.add_argument("--temperature", type=number)
    p.add_argument("--seed", type=integer)
    p.add_argument("--target", help="target model folder or name (default: the tiny local Qwen3)")
    p.add_argument("--draft", help="draft model folder or name (needed with --target for sd)")
    p.add_argument("--models-dir", type=Path,
                   help="where the tiny models are built (default ~/.cache/psdsim/vllm-tiny)")
    p.add_argument("--compile", action="store_true",
                   help="let vLLM compile (no enforce_eager): faster steps, much slower start")
    p.add_argument("--profile-dir", type=Path, help="write a torch-profiler trace of the measured run here")
    p.add_argument("--bench-result", type=Path, metavar="FILE",
                   help="also write the run as a `vllm bench serve --save-result --save-detailed` result, "
                        "for `psdsim validate --bench FILE`")
    p.add_argument("--scenario", type=Path, help="take k, m, requests, output_len, seed, prompt lengths "
                                                 "from this psdsim scenario")
    if with_set:
        p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="scenario field override (implies the default scenario without --scenario)")
        p.add_argument("--option", action="append", default=[], metavar="FIELD=VALUE",
                       help="any VllmConfig field, e.g. dtype=auto, temperature_fix=off, "
                            "tiny.draft_noise=0.1")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line (vLLM's log "
                                                       "goes to stderr)")


def config_from_args(argv: list[str]) -> tuple[VllmConfig, bool]:
    p = _Parser(prog="python -m psdsim.engine.vllm", description=__doc__.split("\n")[0])
    add_arguments(p)
    return config_from_namespace(p.parse_args(argv))


def config_from_namespace(a: argparse.Namespace) -> tuple[VllmConfig, bool]:
    """The run's configuration: defaults, then the scenario, then flags, then --option."""
    changes: dict[str, Any] = {}
    if a.scenario is not None or a.set:
        from psdsim.engine.vllm.workload import from_scenario

        changes.update(from_scenario(a.scenario, a.set))
    flags = {"method": a.method, "k": a.k, "m": a.m, "requests": a.requests, "prompt_len": a.prompt_len,
             "output_len": a.output_len, "temperature": a.temperature, "seed": a.seed, "target": a.target,
             "draft": a.draft, "models_dir": a.models_dir, "profile_dir": a.profile_dir,
             "bench_result": a.bench_result}
    changes.update({name: value for name, value in flags.items() if value is not None})
    if a.requests is not None and "prompt_lens" in changes:
        changes["prompt_lens"] = _resize(changes["prompt_lens"], a.requests)
    if a.compile:
        changes["enforce_eager"] = False
    changes.update(option_changes(a.option))
    return VllmConfig().with_changes(**changes), a.json


def _resize(lengths: tuple[int, ...], n: int) -> tuple[int, ...]:
    """A scenario's prompt lengths cut or cycled to n requests (--requests after --scenario)."""
    return tuple(lengths[i % len(lengths)] for i in range(n))


@contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """Point file descriptor 1 at stderr (inherited by vLLM's engine processes, whose logs go to
    stdout by default), so that --json leaves nothing but the JSON on stdout."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_config(cfg: VllmConfig, as_json: bool) -> int:
    """Check cfg, run it, print its summary; a bad field or a missing vLLM raises before any run."""
    from psdsim.engine.vllm.runner import require_vllm, run

    cfg.check()
    require_vllm(cfg)
    with stdout_to_stderr(True):   # vLLM's log on stderr: stdout holds psdsim's summary alone
        summary = run(cfg)   # a model folder it cannot load: EngineConfigError, before any run
    print_summary(summary, as_json)
    return 0


def main(argv: list[str] | None = None) -> int:
    from psdsim.engine.vllm.runner import VllmUnavailable

    try:
        return run_config(*config_from_args(sys.argv[1:] if argv is None else argv))
    except (EngineConfigError, VllmUnavailable, ScenarioError) as exc:   # each names its field
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
