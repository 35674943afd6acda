"""Keys for mcl2's commands: where they come from, and the bytes they are.

Keys come from the command line and from ``--keys-from FILE|-`` (one key per line; for
``put``, ``KEY<TAB>FILE`` or ``KEY=FILE`` per line).  A key is a string of bytes, like a
file name: arguments and lines that are not valid UTF-8 are kept as the bytes given (held
as ``str`` with Python's ``surrogateescape``, turned back into those bytes by
:func:`wire_key` for Mooncake and by :func:`key_bytes` for standard output).  A key Mooncake
cannot hold (one with a NUL byte, which only a ``--keys-from`` line can carry) is not sent:
:func:`unusable` says why, and the command reports that key as an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

import click

from .output import binary_stdin

STDIN = "-"

#: Why a key with a NUL byte is not sent (Mooncake's keys are NUL-terminated strings).
NUL_KEY = "the key holds a NUL byte, which a Mooncake key cannot (keys are NUL-terminated)"


def read_lines(source: str) -> Iterator[str]:
    """Non-empty lines of a file, or of stdin for ``-``, without their line ending."""
    if source == STDIN:
        stream: IO[bytes] = binary_stdin("the lines of --keys-from -")
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


def unusable(key: str) -> str | None:
    """Why Mooncake cannot hold ``key`` (so it is not sent), or None."""
    return NUL_KEY if "\0" in key else None


def split_usable(keys: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(the keys that can be sent, {key: why not} for the others), order kept."""
    usable: list[str] = []
    refused: dict[str, str] = {}
    for key in keys:
        why = unusable(key)
        if why is None:
            usable.append(key)
        else:
            refused[key] = why
    return usable, refused


def split_pair(text: str, where: str) -> tuple[str, str]:
    """``KEY<TAB>FILE`` or ``KEY=FILE`` (split at the first tab, else the first ``=``)."""
    sep = "\t" if "\t" in text else "="
    key, found, path = text.partition(sep)
    if not found or not key or not path:
        raise click.UsageError(f"{where}: expected KEY=FILE or KEY<TAB>FILE, got {text!r}")
    return key, path


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
