"""Where a write lands, and the one-line errors about a place that name its option: a name the
system cannot take or a file in the way (landing) and a umask that would lock psdsim out of its
own staging (check_umask), both refused before any work; and a write that fails there
(naming_failures: a full disk, a read-only folder)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import path_trouble


def landing(path: Path, option: str) -> Path:
    """Where a write to `path` lands: the path with every link and `..` resolved as the system
    will once missing folders are made (`new/../notes.txt` is `notes.txt`, which exists even though
    `new/` does not). Checks look there, not at the spelling. A name the system cannot take (too
    long, a loop of links) is refused in one line."""
    try:
        path = Path(path)
        real = path.resolve()
        real.exists()   # raises for a name too long, which resolve() lets through
    except (OSError, RuntimeError, ValueError) as exc:   # RuntimeError: a loop of links (Python 3.11)
        fix = ("choose a folder you may search and write" if isinstance(exc, PermissionError)
               else "choose a shorter or plainer name")
        raise ScenarioError(option, f"cannot use {str(path)!r} ({path_trouble(exc)})", fix) from None
    blocker = next((p for p in real.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():   # refused now, not after the work is done
        raise ScenarioError(option, f"cannot write {str(path)!r}: {str(blocker)!r} is a file, not a folder",
                            f"choose a path in a folder with {option}")
    return real


@contextlib.contextmanager
def naming_failures(option: str, path: Path) -> Iterator[None]:
    """An OSError in the block (a full disk, a read-only folder) as one line naming `option`."""
    try:
        yield
    except OSError as exc:
        raise ScenarioError(option, f"cannot write {str(path)!r} ({exc.strerror or exc})",
                            f"free some space, or choose a writable place with {option}") from None


def check_umask(given: Path) -> None:
    """Refuse, before any work, a umask that takes the owner's write or search permission off
    what psdsim makes: its staging folders could not be filled, renamed or replaced."""
    mask = current_umask()
    if mask & 0o300:
        raise ScenarioError("umask", f"{mask:03o} takes your own write or search permission off the files "
                            f"and folders psdsim makes, so it could not write {str(given)!r}",
                            "run psdsim under a umask that keeps them, e.g. `umask 022`")


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
