"""What mcl2 writes to its standard streams, and how it tells whether they are terminals.

Results go to standard output through :func:`write_stdout` (raw bytes) and
:func:`write_json` (one JSON document; one per line inside :func:`json_lines`, as in
``mcl2 --json shell``): both write every byte or raise ``BrokenPipeError``, which
the click group turns into exit status 141, so a reader that went away is never mistaken for
success.  A standard stream that is needed but closed (``>&-``, ``<&-``), or standard input
inside ``mcl2 shell`` (whose lines come from it), is a :class:`~.errors.StreamUnusable` naming
it (exit status 2), never an ``AttributeError``.  Progress bars (:class:`Progress`) go to
standard error only when it is a terminal and the work is long (:func:`wants_progress`).
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

from .batches import CHUNK_KEYS
from .errors import StreamUnusable

#: Show a progress bar (on a terminal) from more keys than one batch holds ...
PROGRESS_MIN_KEYS = CHUNK_KEYS + 1
#: ... or this many bytes.
PROGRESS_MIN_BYTES = 128 << 20


def binary_stdout() -> IO[bytes]:
    """Standard output as a binary stream; StreamUnusable when it is closed (``>&-``)."""
    out: IO[bytes] | None = getattr(sys.stdout, "buffer", None) if sys.stdout else None
    if out is None or out.closed:
        raise StreamUnusable("standard output is closed: redirect it to a file or a pipe")
    return out


def require_stdout() -> None:
    """Refuse, before any work, a command whose result goes to a closed standard output."""
    binary_stdout()


#: Why standard input is not the command's (``mcl2 shell`` reads its lines from it), or None.
_stdin_owner: str | None = None


@contextmanager
def stdin_taken(why: str) -> Iterator[None]:
    """While the block runs, a command that reads standard input is refused, saying ``why``."""
    global _stdin_owner
    previous, _stdin_owner = _stdin_owner, why
    try:
        yield
    finally:
        _stdin_owner = previous


def binary_stdin(what: str = "the input") -> IO[bytes]:
    """Standard input as a binary stream, for ``what`` (a value, keys...); StreamUnusable
    when it is closed (``<&-``) or not the command's (inside ``mcl2 shell``)."""
    if _stdin_owner is not None:
        raise StreamUnusable(f"{what} cannot come from standard input: {_stdin_owner}")
    source: IO[bytes] | None = getattr(sys.stdin, "buffer", None) if sys.stdin else None
    if source is None or source.closed:
        raise StreamUnusable(
            f"standard input is closed, so {what} cannot come from it: redirect a file or a "
            "pipe into it, or give a FILE"
        )
    return source


def require_stdin(what: str) -> None:
    """Refuse, before any work, a command that would read ``what`` from an unusable stdin."""
    binary_stdin(what)


def write_stdout(data: bytes | memoryview) -> None:
    """Write all of ``data`` to standard output, or raise BrokenPipeError.

    A buffered write to a pipe whose reader has gone may return a short count instead of
    failing; that is treated as the closed pipe it is.
    """
    out = binary_stdout()
    try:
        sys.stdout.flush()
    except ValueError:
        pass
    view = memoryview(data)
    while len(view):
        n = out.write(view)
        if n is None:  # a non-blocking stream that is full: not ours to wait on
            raise BlockingIOError(errno.EAGAIN, "standard output would block")
        if n <= 0:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        view = view[n:]
    out.flush()


#: True while every JSON document is written on one line (``mcl2 shell --json``, ``top``).
_json_lines = False


@contextmanager
def json_lines() -> Iterator[None]:
    """While the block runs, :func:`write_json` writes each document on one line."""
    global _json_lines
    previous, _json_lines = _json_lines, True
    try:
        yield
    finally:
        _json_lines = previous


def writes_json_lines() -> bool:
    """Whether JSON documents go on one line each (inside :func:`json_lines`)."""
    return _json_lines


def write_json(data: Any) -> None:
    """``data`` as one JSON document (and a newline) on standard output: indented, or on
    one line inside :func:`json_lines`."""
    text = json.dumps(data, separators=(",", ":")) if _json_lines else json.dumps(data, indent=2)
    write_stdout((text + "\n").encode())


def _is_terminal(stream: IO[Any] | None) -> bool:
    try:
        return stream is not None and not stream.closed and stream.isatty()
    except (AttributeError, ValueError):
        return False


def stderr_is_terminal() -> bool:
    return _is_terminal(sys.stderr)


def stdin_is_terminal() -> bool:
    """True only for an open standard input that is a terminal (closed: False)."""
    return _is_terminal(sys.stdin)


def plural(n: int, word: str) -> str:
    """``1 key``, ``2 keys``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def wants_progress(n_keys: int, n_bytes: int = 0) -> bool:
    """Whether work of this size is long enough for a progress bar."""
    return n_keys >= PROGRESS_MIN_KEYS or n_bytes >= PROGRESS_MIN_BYTES


class Progress:
    """A click progress bar on stderr, or nothing (not a terminal, short work, -q, --json)."""

    def __init__(self, show: bool, total: int, label: str) -> None:
        self._bar: Any = None
        if show and stderr_is_terminal():
            self._bar = click.progressbar(
                length=total, label=label, file=sys.stderr, show_pos=True, show_eta=True
            )
            self._bar.__enter__()

    @property
    def active(self) -> bool:
        return self._bar is not None

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            bar.__exit__(None, None, None)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
