"""Local files mcl2 reads values from and writes values to.

``get -d DIR`` names each file after its key (:func:`file_name_for`) and writes it atomically
(:func:`write_file`); ``put --dir DIR`` takes the regular files directly in a directory
(:func:`iter_regular_files`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import click


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


def iter_regular_files(directory: Path) -> Iterable[Path]:
    """Regular files directly in ``directory`` (not recursing), sorted by name."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot list {directory}: {exc.strerror}", param_hint="'--dir'"
        ) from None
    return [p for p in entries if p.is_file()]
