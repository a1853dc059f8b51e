"""Driving the `psdsim` command as a user does: fast settings, a refusal's one line, a folder's
snapshot, a process killed mid-write, sweep specs and the README's command lines."""

from __future__ import annotations

import re
from pathlib import Path

from psdsim.cli import main

FAST = ["--set", "requests=12", "--set", "output_len=8", "--set", "m=2", "--set", "prompt_len=16"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: --") and "\n" not in err and "Traceback" not in err
    return err


SIGTERMED = """
import sys, time
from psdsim.sim.output import results
from psdsim.cli import main
def staged(folder):   # the files are in the staging folder; the rename is next
    print("staged", flush=True)
    time.sleep(60)
results._follow_umask = staged
sys.exit(main(sys.argv[1:]))
"""


SMALL = "[base]\nrequests = 20\noutput_len = 16\nprompt_len = 64\nm = 4\n"


def spec(tmp_path: Path, body: str, base: str = SMALL, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(base + body, encoding="utf-8")
    return path


BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.MULTILINE | re.DOTALL)


# The first screen's set-up lines make a virtual environment and install packages (the second also
# runs this whole suite): a test must not, so they are left out by name. tests/project/test_docs.py checks
# that they are the commands CI runs.
SETUP = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && psdsim run",
         "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest")


def readme_commands(text: str) -> list[str]:
    """The command lines of every ```bash block, in order, without the set-up lines."""
    lines = [line.strip() for block in BASH_BLOCK.findall(text) for line in block.splitlines()]
    return [line for line in lines if line and line not in SETUP]
