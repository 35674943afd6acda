"""How multi-step operations proceed, shared by the synchronous and asynchronous clients.

A plan is a generator: it yields requests ``(op, keys, buffers)``, receives each one's
per-key results from whichever driver runs it (``Client`` blocks in the shim, ``AsyncClient``
awaits a completion), and returns the answer.  Also here: turning per-key error codes into
exceptions, and cutting the values of a GET_BUFFER batch into ``bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Sequence
from typing import Any

from ._binding import ffi, lib
from ._marshal import Packed
from .errors import MooncakeError, error_for
from .status import (
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_NOT_FOUND,
    describe,
)

__all__ = [
    "MAX_RESIZE_ROUNDS",
    "Deadline",
    "batch_get_plan",
    "gather_values",
    "raise_key_errors",
    "segment_note",
]

OP_EXISTS, OP_GET, OP_SIZE = lib.MCS_OP_EXISTS, lib.MCS_OP_GET, lib.MCS_OP_SIZE
OP_GET_BUFFER = lib.MCS_OP_GET_BUFFER

#: A value that keeps changing size while it is read is given up on after this many rounds
#: (with an error: never a truncated value, never "missing" for a present key).
MAX_RESIZE_ROUNDS = 16
#: GET_BUFFER values are copied out one by one for few keys or large values (one copy),
#: else gathered into one buffer by the shim and cut (no per-key call into C).
_PER_KEY_COPY_KEYS = 8
_PER_KEY_COPY_BYTES = 32 * 1024

Request = tuple[int, list[Any], list[Any] | None]


class Deadline:
    """What is left of a call's time limit, for each of its steps (None: no limit).

    A plan of several round trips answers within the limit of the call as a whole: each
    step gets what the steps before it left (at least 1 ms, so a late step times out
    rather than running unbounded)."""

    __slots__ = ("end",)

    def __init__(self, limit: float | None, start: float | None = None) -> None:
        """``limit`` seconds from ``start`` (a time.monotonic() reading; default now)."""
        begin = time.monotonic() if start is None else start
        self.end = None if limit is None else begin + limit

    def left(self) -> float | None:
        return None if self.end is None else max(0.001, self.end - time.monotonic())


def segment_note(config: Any) -> str:
    """What a NO_AVAILABLE_HANDLE message says about the client's own segment."""
    gss = config.setup_config.get("global_segment_size", "16 MiB (default)")
    return f" (this client contributes global_segment_size={gss})"


def raise_key_errors(
    keys: Sequence[Any],
    results: Sequence[int],
    allow: Iterable[int] = (),
    sizes: Sequence[int] | None = None,
    segment_note: str = "",
) -> None:
    """Raise the exception for the first per-key error not in ``allow``."""
    if not results or min(results) >= 0:
        return
    allowed = set(allow)
    for i, (k, r) in enumerate(zip(keys, results)):
        if r < 0 and r not in allowed:
            msg = f"key {k!r}: {describe(r)}"
            if r == NO_AVAILABLE_HANDLE and sizes is not None:
                msg = (
                    f"key {k!r}: no space for {sizes[i]} bytes in the cluster's memory "
                    f"segments{segment_note}; the value is larger than the free space of any "
                    "segment: remove keys or add storage"
                )
            raise error_for(r, msg, results)


def gather_values(packed: Packed, results: list[int]) -> list[bytes | None]:
    """The values a GET_BUFFER batch read, as bytes; None where it read none (unread).

    Call before the batch's values are released.
    """
    n = packed.n
    total = 0
    for r in results:
        if r > 0:
            total += r
    if n <= _PER_KEY_COPY_KEYS or total >= _PER_KEY_COPY_BYTES * n:
        ptrs = ffi.cast("char **", packed.values)
        return [
            ffi.unpack(ptrs[i], r) if r > 0 else (b"" if r == 0 else None)
            for i, r in enumerate(results)
        ]
    blob = bytes(total)  # fresh and private (total > 0): the shim fills it in place
    written = ffi.new("uint64_t *")
    rc = lib.mcs_gather(written, ffi.from_buffer(blob), total, packed.values, packed.results, n)
    if rc != 0:  # pragma: no cover - the sizes come from the same results
        raise error_for(rc, "gathering values failed")
    out: list[bytes | None] = []
    pos = 0
    for r in results:
        if r >= 0:
            end = pos + r
            out.append(blob[pos:end])
            pos = end
        else:
            out.append(None)
    return out


def batch_get_plan(
    keys: list[Any], segment_note: str = ""
) -> Generator[Request, list[Any], list[bytes | None]]:
    """Values of ``keys`` (None where missing), in as few round trips as the data allows.

    1. One GET_BUFFER batch: Mooncake sizes and reads every key into its local buffer
       (``local_buffer_size``) in one round trip; the driver sends back the values (a
       fresh list: the plan fills it in), None for keys it did not read.
    2. Keys it did not read (missing, or the local buffer was too small for them) are
       looked up with one EXISTS batch; present ones are sized and read into buffers of
       their size, sized again and re-read while they keep growing (a value replaced by a
       larger one meanwhile is still read whole), at most MAX_RESIZE_ROUNDS times.
    """
    out: list[bytes | None] = yield OP_GET_BUFFER, keys, None
    unread = [i for i, v in enumerate(out) if v is None]
    if not unread:
        return out
    present = yield OP_EXISTS, [keys[i] for i in unread], None
    raise_key_errors([keys[i] for i in unread], present)
    todo = [i for i, p in zip(unread, present) if p == 1]
    for _round in range(MAX_RESIZE_ROUNDS):
        if not todo:
            return out
        sizes = yield OP_SIZE, [keys[i] for i in todo], None
        raise_key_errors([keys[i] for i in todo], sizes, (OBJECT_NOT_FOUND,))
        todo = [i for i, s in zip(todo, sizes) if s >= 0]
        sizes = [s for s in sizes if s >= 0]
        if not todo:
            return out
        # Fresh bytes objects (size >= 1), filled in place: the value is copied once.
        bufs = [bytes(max(1, s)) for s in sizes]
        read = yield OP_GET, [keys[i] for i in todo], bufs
        retry = []
        for i, buf, r in zip(todo, bufs, read):
            if r >= 0:
                out[i] = buf if r == len(buf) else buf[:r]
            elif r == INVALID_PARAMS:
                retry.append(i)  # replaced by a larger value meanwhile
            elif r != OBJECT_NOT_FOUND:
                raise error_for(r, f"key {keys[i]!r}: {describe(r)}", read)
        todo = retry
    if todo:
        raise MooncakeError(
            INVALID_PARAMS,
            f"key {keys[todo[0]]!r}: its value changed size {MAX_RESIZE_ROUNDS} times while "
            "being read; giving up rather than returning a truncated value",
        )
    return out
