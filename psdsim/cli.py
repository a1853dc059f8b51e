"""The `psdsim` command: a thin dispatcher over psdsim/commands/, one module per command.

Only the chosen command's module adds its flags and imports its dependencies, so `psdsim --help`
loads no simulator (benchmarks/startup.py times it). Every user error, whatever raised it, ends
as one line on stderr, `psdsim: error: FIELD: problem; fix: what to do`, and exit code 2, with
nothing written; `--json` puts the result, and nothing else, on stdout.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

from psdsim.commands.common import EXIT_BAD_INPUT, interrupted_exit, user_error
from psdsim.terminal import guard_output

COMMANDS = ("run", "compare", "scenario", "catalog", "theory", "paper", "calibrate", "plan", "sweep",
            "validate", "engine")
_ARGPARSE_FIELD = re.compile(r"^argument ([^:]+): (.*)$")


class Parser(argparse.ArgumentParser):
    """argparse whose errors are the CLI's one-line user error (not a usage block), naming the flag
    and pointing at the command's --help. No abbreviations: `engine run --out 8` was taken for
    --output-len 8 (a prefix of it), and a flag added later could change what a short one means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)
        # Whose --help an error points at: the top-level parser reports the words no parser took,
        # which belong to the command named on the line (build_parser sets it).
        self.help_prog = self.prog

    def error(self, message: str) -> NoReturn:
        field, problem = "arguments", message
        if m := _ARGPARSE_FIELD.match(message):
            field, problem = m.group(1).split("/")[-1], m.group(2)
        elif message.startswith("unrecognized arguments: "):
            words = message.removeprefix("unrecognized arguments: ").split()
            if not words:   # only empty or blank words were left over ('' from an unset variable)
                raise user_error("arguments", "an empty argument ('') is not a value of any option",
                                 f"drop it, or give the value it stood for (`{self.help_prog} --help`)")
            field, problem = words[0], "unknown option"
            if not words[0].startswith("-"):   # a second file, e.g. from a pattern that matched two
                field, problem = "arguments", f"{words[0]!r} is one argument more than the command takes"
        raise user_error(field, problem, f"see `{self.help_prog} --help`")


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"psdsim.commands.{name}")


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named on the line (the first word that is not an option), if it is one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The top-level parser; only the chosen command's flags are added (and its imports paid)."""
    parser = Parser(prog="psdsim",
                    description="Simulate batch-parallel speculative decoding (PSD) against SD and AR.",
                    epilog="`psdsim COMMAND --help` lists a command's flags. Every error is one line: "
                           "psdsim: error: FIELD: problem; fix: what to do (exit code 2).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv)
    if chosen:
        parser.help_prog = f"psdsim {chosen}"
    for name in COMMANDS:
        module = _module(name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        if name == chosen:
            module.add_arguments(p, argv)
    return parser


def _user_error_line(exc: BaseException) -> str | None:
    """`FIELD: problem; fix: …` for every error type that means bad input; None for a bug."""
    from psdsim.sim.errors import ScenarioError

    if isinstance(exc, ScenarioError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG and exc.filename:
        # The system refuses the name itself, wherever a path the user gave is first looked at
        # (Path.exists() and is_file() raise for it): the path is the field.
        return (f"{exc.filename}: the system refuses this name ({exc.strerror}); fix: give a shorter "
                "path (each folder or file name at most 255 bytes)")
    if isinstance(exc, MemoryError):   # past the up-front estimates (sim/footprint.py): a limit they missed
        return ("memory: the command ran out of memory (the machine's, a container's or `ulimit -v`); "
                "fix: run with more memory, or give it less work (fewer requests, no --trace)")
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if name == "CatalogError":
        where, _, problem = text.partition(": ")
        return f"{where}: {problem}; fix: correct that entry (sim/catalog/*.toml show every field)"
    if name == "EngineConfigError":
        field = re.split(r"[ =:]", text.removeprefix("--set "), maxsplit=1)[0] or "engine"
        return f"{field}: {text}; fix: change {field} as stated (`psdsim engine run --help`)"
    if name == "VllmUnavailable":   # `what is missing; how to get it`
        problem, _, fix = text.partition("; ")
        return f"--engine: {problem}; fix: {fix or 'install it (docs/engines.md, The vLLM runner)'}"
    return None


@guard_output
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
        return int(_module(args.command).run(args))
    except SystemExit as exc:   # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM, SIGHUP, SIGQUIT while writing
        print("psdsim: interrupted; nothing was written", file=sys.stderr)
        return interrupted_exit(exc)
    except Exception as exc:
        line = _user_error_line(exc)
        if line is None:
            raise
        print(f"psdsim: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
