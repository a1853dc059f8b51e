"""`--record` for the benchmark scripts: their printed table, written to docs/measurements/NAME.md
under a header that says when, on which commit and on which machine it was measured, and with
which command, so that a figure in the docs can always be traced to its run."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ROOT / "docs" / "measurements"


class Lines(list):
    """Printed lines, kept for `write`: call it as print(line)."""

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.append(line)


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", action="store_true",
                        help="also write the table to docs/measurements/ with date, commit and machine")


def _git(*args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def commit() -> str:
    """HEAD's short hash, saying so when tracked files differ from it (their edits were measured too)."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"{head} with uncommitted changes" if dirty else head


def machine() -> str:
    """CPU model and count, memory, OS and Python: what the timings depend on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB memory"
    except (ValueError, OSError, AttributeError):
        memory = ""
    try:
        load = f"; load average {os.getloadavg()[0]:.1f} when it finished (other jobs share the CPUs)"
    except OSError:
        load = ""
    return (f"{os.cpu_count()} × {cpu}{memory}; {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}{load}")


def write(name: str, title: str, lines: list[str], notes: str = "") -> Path:
    """Write docs/measurements/NAME.md: header, the command as run, the table; returns its path."""
    command = "python " + " ".join([Path(sys.argv[0]).as_posix().split(f"{ROOT.as_posix()}/")[-1],
                                    *sys.argv[1:]])
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([f"# {title}", "", f"- measured: {when}", f"- commit: {commit()}",
                      f"- machine: {machine()}", f"- command: `{command}`", "",
                      *([notes, ""] if notes else []), "```", *lines, "```", ""])
    MEASUREMENTS.mkdir(parents=True, exist_ok=True)
    path = MEASUREMENTS / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path


def study_main(doc: str, name: str, title: str, study: Callable[[], list[str]], notes: str) -> None:
    """A study script's command line: print the table `study` makes and, with --record, write it
    as docs/measurements/NAME.md (`doc`: the script's docstring, its first line the help)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    lines = study()
    print("\n".join(lines))
    if args.record:
        write(name, title, lines, notes=notes)

