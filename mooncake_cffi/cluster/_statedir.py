"""The local cluster's state directory, kept private and safe on a shared machine.

The directory is created ``0700``; an existing one must belong to the current user and must
not be writable by group or others (a ``0755`` one of ours, as older versions made it, is
tightened to ``0700``).  Every file in it is opened relative to the directory's own file
descriptor with ``O_NOFOLLOW``, and created with ``O_EXCL`` (mode ``0600``), so a symlink
planted in the directory is never followed.  ``state.json`` is read only when it belongs to
the user and nobody else can write it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ._common import ClusterError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _check_owned_private(st: os.stat_result, what: str) -> None:
    if st.st_uid != os.getuid():
        raise ClusterError(
            f"{what} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); refusing it"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ClusterError(
            f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            "refusing it"
        )


def ensure_dir(path: Path) -> None:
    """Create ``path`` private (0700), or check that an existing one is safe to use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    with open_dir(path) as dfd:
        st = os.fstat(dfd)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(dfd, 0o700)


@contextlib.contextmanager
def open_dir(path: Path) -> Iterator[int]:
    """A file descriptor of the state directory, after checking that it is ours and private."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    if stat.S_ISLNK(st.st_mode):
        raise ClusterError(f"state directory {path} is a symlink; refusing it")
    if not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"state directory {path} is not a directory")
    try:
        dfd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise ClusterError(f"cannot open state directory {path}: {exc}") from exc
    try:
        _check_owned_private(os.fstat(dfd), f"state directory {path}")
        yield dfd
    finally:
        os.close(dfd)


def create_file(path: Path) -> int:
    """A fresh ``0600`` file at ``path`` (an old file or symlink of that name is removed first).

    Returns a writable file descriptor; the caller closes it.
    """
    with open_dir(path.parent) as dfd:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=dfd)  # removes a symlink itself, never its target
        return os.open(
            path.name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically through a fresh, randomly named temp file."""
    with open_dir(path.parent) as dfd:
        tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def read_private(path: Path) -> bytes | None:
    """Contents of ``path`` (None if absent), refused unless it is a regular file of ours
    that nobody else can write."""
    try:
        with open_dir(path.parent) as dfd:
            try:
                fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise ClusterError(f"cannot read {path}: {exc}") from exc
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise ClusterError(f"{path} is not a regular file; refusing it")
                _check_owned_private(st, str(path))
                return fh.read()
    except FileNotFoundError:
        return None


def remove(path: Path) -> None:
    """Remove ``path`` (a file or a symlink, never what it points to); absent is fine."""
    try:
        with open_dir(path.parent) as dfd, contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=dfd)
    except FileNotFoundError:
        pass


def remove_tree(path: Path) -> None:
    """Remove the directory ``path`` inside the state directory (symlinks are not followed)."""
    with open_dir(path.parent):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
        else:
            shutil.rmtree(path)
