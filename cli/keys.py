"""Keys and values for mcl2's multi-key commands: where they come from, and in what chunks.

Keys come from the command line and from ``--keys-from FILE|-`` (one key per line; for
``put``, ``KEY<TAB>FILE`` or ``KEY=FILE`` per line).  A key is a string of bytes, like a
file name: arguments and lines that are not valid UTF-8 are kept as the bytes given (held
as ``str`` with Python's ``surrogateescape``, turned back into those bytes by
:func:`wire_key` for Mooncake and by :func:`key_bytes` for standard output).  Work is sent
in batches of at most :data:`CHUNK_KEYS` keys (and, for put, about :data:`CHUNK_BYTES` of
values), with a progress bar on stderr only when it is a terminal and the work is long.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import click

T = TypeVar("T")

#: Keys per batch sent to Mooncake.
CHUNK_KEYS = 256
#: Bytes of values per put batch (a larger single value still goes alone).
CHUNK_BYTES = 64 << 20
#: Show a progress bar (on a terminal) from this many keys on ...
PROGRESS_MIN_KEYS = CHUNK_KEYS + 1
#: ... or this many bytes.
PROGRESS_MIN_BYTES = 128 << 20

STDIN = "-"


def read_lines(source: str) -> Iterator[str]:
    """Non-empty lines of a file, or of stdin for ``-``, without their line ending."""
    if source == STDIN:
        stream: IO[bytes] = sys.stdin.buffer
        close = False
    else:
        try:
            stream = open(source, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {source}: {exc.strerror}", param_hint="'--keys-from'"
            ) from None
        close = True
    try:
        for raw in stream:
            line = os.fsdecode(raw.rstrip(b"\r\n"))
            if line.strip():
                yield line
    finally:
        if close:
            stream.close()


def gather_keys(args: Sequence[str], keys_from: str | None) -> list[str]:
    """Keys from the command line, then from --keys-from; duplicates dropped, order kept."""
    keys = list(args)
    if keys_from is not None:
        keys.extend(read_lines(keys_from))
    seen: set[str] = set()
    unique: list[str] = []
    for key in keys:
        if not key:
            raise click.UsageError("empty key: Mooncake keys need at least one character")
        if key not in seen:
            seen.add(key)
            unique.append(key)
    if not unique:
        raise click.UsageError("no keys given (give KEY arguments or --keys-from FILE|-)")
    return unique


def wire_key(key: str) -> bytes:
    """The bytes Mooncake gets for a key: UTF-8, and the original bytes of undecodable ones."""
    return key.encode("utf-8", "surrogateescape")


def wire_keys(keys: Iterable[str]) -> list[bytes]:
    return [wire_key(k) for k in keys]


def key_bytes(key: str | bytes) -> bytes:
    """A key as the bytes to print on standard output."""
    return key if isinstance(key, bytes) else wire_key(key)


def show_key(key: str | bytes) -> str:
    """A key for a message or JSON: its text, with undecodable bytes kept as escapes."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "surrogateescape")
    return key


def write_stdout(data: bytes | memoryview) -> None:
    """Write all of ``data`` to standard output, or raise BrokenPipeError.

    A buffered write to a pipe whose reader has gone may return a short count instead of
    failing; that is treated as the closed pipe it is.
    """
    try:
        sys.stdout.flush()
    except ValueError:
        pass
    out = sys.stdout.buffer
    view = memoryview(data)
    while len(view):
        n = out.write(view)
        if n is None:  # a non-blocking stream that is full: not ours to wait on
            raise BlockingIOError(errno.EAGAIN, "standard output would block")
        if n <= 0:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        view = view[n:]
    out.flush()


def split_pair(text: str, where: str) -> tuple[str, str]:
    """``KEY<TAB>FILE`` or ``KEY=FILE`` (split at the first tab, else the first ``=``)."""
    sep = "\t" if "\t" in text else "="
    key, found, path = text.partition(sep)
    if not found or not key or not path:
        raise click.UsageError(f"{where}: expected KEY=FILE or KEY<TAB>FILE, got {text!r}")
    return key, path


def chunks(items: Sequence[T], size: int = CHUNK_KEYS) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def file_name_for(key: str) -> str:
    """The file name a key gets in a -d DIR; refuses keys that are not a plain file name."""
    if "/" in key or key in (".", "..") or "\0" in key:
        raise click.ClickException(
            f"key {key!r} cannot be used as a file name in the output directory "
            "(it contains '/' or is '.' or '..'); fetch it alone with -o FILE"
        )
    return key


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then rename)."""
    if str(path) == os.devnull or (path.exists() and not path.is_file()):
        with open(path, "wb") as out:  # /dev/null, a FIFO...: write in place
            out.write(data)
        return
    tmp = path.with_name(f".{path.name}.mcl2-{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


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


def wants_progress(n_keys: int, n_bytes: int = 0) -> bool:
    return n_keys >= PROGRESS_MIN_KEYS or n_bytes >= PROGRESS_MIN_BYTES


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def iter_regular_files(directory: Path) -> Iterable[Path]:
    """Regular files directly in ``directory`` (not recursing), sorted by name."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot list {directory}: {exc.strerror}", param_hint="'--dir'"
        ) from None
    return [p for p in entries if p.is_file()]
