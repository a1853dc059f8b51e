"""What the `psdsim` command does to its own process before a command runs: its output streams
and matplotlib's backend. Only the standard library is imported: `psdsim --help` pays for this.

* A terminal that cannot show psdsim's few non-ASCII signs (an ASCII stdout: `LC_ALL=C
  PYTHONUTF8=0`; `LC_ALL=C` alone turns on Python's UTF-8 mode) gets
  ASCII spellings of them (× as x, ↑ as ^, – as -) instead of a UnicodeEncodeError; `--json`
  output is ASCII already (json.dumps escapes everything else).
* Output that cannot be written (stdout on a full disk, a closed pipe) is told apart from every
  other OSError: stdout is wrapped so that its failures arrive as OutputLost, which the CLI turns
  into one line (or, for a reader that went away, silence) instead of a traceback.
* Diagnostics never kill the work: stderr (the estimate, progress, warnings) is wrapped so that a
  write it cannot take (a full log disk, `2>/dev/full`, `2>&-`) is dropped, and later ones with it.
* Figures only ever go to files (every figure writer picks Agg): an MPLBACKEND meant for
  interactive use cannot change that and, when matplotlib does not know its name, would only
  stop `import matplotlib` with a traceback; psdsim and its worker processes use Agg.
  MATPLOTLIBRC is pointed at an empty file: `import matplotlib` reads the file it names (a pipe
  or /dev/zero forever), and psdsim's figures take matplotlib's defaults anyway
  (sim/output/plots.py default_style), whatever rc file a user keeps.
"""

from __future__ import annotations

import codecs
import errno
import functools
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

# psdsim's signs, spelled as a reader of an ASCII-only terminal would write them.
ASCII_SPELLINGS = {
    "×": "x", "·": ".", "–": "-", "—": "-", "−": "-", "…": "...", "→": "->", "←": "<-", "↔": "<->",
    "↑": "^", "↓": "v", "±": "+-", "≤": "<=", "≥": ">=", "µ": "u", "²": "^2", "÷": "/", "§": "sect. ",
    "α": "alpha", "β": "beta", "θ": "theta", "Σ": "sum", "Π": "prod", "∥": "||",
}
ASCII_ERRORS = "psdsim-ascii"   # the codec error handler that writes those spellings
EXIT_OUTPUT_LOST = 74   # sysexits.h EX_IOERR: not bad input (2), not a bug (1); the output failed


class OutputLost(Exception):
    """Writing to stdout failed: `error` is the OSError (ENOSPC for /dev/full, EPIPE for a
    closed pipe)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _ascii_byte(ch: str) -> bytes:
    """One character the stream cannot encode: a byte of a file name that was not valid text
    (Python's surrogateescape, as such a locale reads argv) goes out as that byte again."""
    if "\udc80" <= ch <= "\udcff":
        return bytes([ord(ch) - 0xDC00])
    return ASCII_SPELLINGS.get(ch, "?").encode("ascii")


def _spell_in_ascii(exc: UnicodeError) -> tuple[bytes, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return b"".join(map(_ascii_byte, exc.object[exc.start:exc.end])), exc.end


def ascii_fallback(stream: Any) -> None:
    """Let `stream` write psdsim's signs in ASCII where its encoding has no room for them."""
    if not isinstance(stream, io.TextIOWrapper):
        return
    try:
        "".join(ASCII_SPELLINGS).encode(stream.encoding)
    except UnicodeEncodeError:
        codecs.register_error(ASCII_ERRORS, _spell_in_ascii)
        stream.reconfigure(errors=ASCII_ERRORS)


class ReportingStdout:
    """stdout whose write and flush failures are OutputLost; everything else is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if self.stream is None:   # descriptor 1 closed at start (`psdsim run >&-`): Python's is None
            raise OutputLost(OSError(errno.EBADF, "stdout is closed"))
        try:
            return self.stream.write(text)
        except OSError as exc:
            raise OutputLost(exc) from None

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except OSError as exc:
            raise OutputLost(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class DroppingStderr:
    """stderr that drops what it cannot write: the first failure points the descriptor at
    /dev/null, so that neither later lines nor the buffer flushed at interpreter exit fail again
    (a failed flush there would turn the exit code into 120)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            if self.stream is not None:
                self.stream.write(text)
        except OSError:
            self._drop()
        return len(text)

    def flush(self) -> None:
        try:
            if self.stream is not None:
                self.stream.flush()
        except OSError:
            self._drop()

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def _drop(self) -> None:
        silence(self.stream)
        self.stream = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def silence(stream: Any) -> None:
    """Point a stream's descriptor at /dev/null, so that what is left in its buffer, flushed at
    interpreter exit, does not fail a second time ("Exception ignored … BrokenPipeError")."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):   # no descriptor: closed, or a test's capture
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def figures_to_files_only() -> None:
    """Agg for this process and its workers, whatever MPLBACKEND says, and no MATPLOTLIBRC read
    (see the module's note)."""
    os.environ["MPLBACKEND"] = "agg"
    os.environ["MATPLOTLIBRC"] = os.devnull


def _report_lost_output(lost: OutputLost, stdout: Any) -> int:
    """Silence for a reader that went away (`psdsim catalog | head -1`), as other tools keep; one
    line and EXIT_OUTPUT_LOST for output that could not be written (a full disk, /dev/full)."""
    silence(stdout)
    if isinstance(lost.error, BrokenPipeError):
        return 0
    reason = lost.error.strerror or lost.error.__class__.__name__
    print(f"psdsim: error: stdout: cannot write the output ({reason}); fix: send the output where it "
          "can be written (a disk with free space, an open stdout)", file=sys.stderr)
    return EXIT_OUTPUT_LOST


def guard_output(main: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
    """`main` with ASCII fallbacks, Agg figures, stdout failures reported and stderr failures
    dropped (the module's note).
    stdout is flushed before `main`'s result is returned: data still buffered at interpreter exit
    would fail where nothing can report it."""

    @functools.wraps(main)
    def guarded(argv: Sequence[str] | None = None) -> int:
        figures_to_files_only()
        for stream in (sys.stdout, sys.stderr):
            ascii_fallback(stream)
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = ReportingStdout(stdout), DroppingStderr(stderr)
        try:
            code = main(argv)
            sys.stdout.flush()
            return code
        except OutputLost as lost:
            return _report_lost_output(lost, stdout)
        finally:
            sys.stdout, sys.stderr = stdout, stderr

    return guarded
