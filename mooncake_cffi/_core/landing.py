"""Landing memory: where the LMCache connector's failing-open loads read, before their
bytes reach LMCache's buffers.

A load with a deadline answers at the deadline while Mooncake's transfer goes on (a
transfer cannot be cancelled): bytes that arrive later land wherever the load pointed.
LMCache takes the failed load as its answer and reuses that memory at once, so such a
load reads into memory of ours instead and its bytes are copied to LMCache's only when it
succeeds in time. Memory that a timed-out load may still write is never reused here: the
batch holds it until the shim is done with it, and then it is simply freed. (The drop-in's
blocking loads do the same inside the shim: ``MCS_FLAG_LAND`` in ``shim/mcs.h``.)

:class:`LandingPool` keeps the buffers of loads that ended for the next ones (a fresh
buffer costs zeroing and a page fault per page, about as much as the copy itself).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

__all__ = ["LandingPool"]

#: The smallest buffer the pool hands out; larger ones are powers of two, so loads of
#: nearby sizes reuse each other's memory.
_MIN_BYTES = 64 << 10


def _rounded(total: int) -> int:
    return max(_MIN_BYTES, 1 << max(0, total - 1).bit_length())


class LandingPool:
    """Buffers for landed loads, at most :attr:`KEEP_BYTES` of them kept; thread-safe."""

    KEEP_BYTES = 256 << 20

    def __init__(self) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, total: int) -> bytearray:
        """A buffer of at least ``total`` bytes, no other load's until given back."""
        size = _rounded(total)
        with self._lock:
            free = self._free.get(size)
            if free:
                self._kept -= size
                return free.pop()
        return bytearray(size)

    def views(self, sizes: Sequence[int]) -> tuple[bytearray, list[memoryview]]:
        """A buffer for ``sum(sizes)`` bytes and a writable view of it per key."""
        buf = self.take(sum(sizes))
        view = memoryview(buf)
        out, offset = [], 0
        for size in sizes:
            out.append(view[offset : offset + size])
            offset += size
        return buf, out

    def give_back(self, buf: bytearray | None) -> None:
        """``buf`` once Mooncake is done with it (its load completed within its call, or
        its completion was drained); never one a timed-out load may still write."""
        if buf is None:
            return
        size = len(buf)
        with self._lock:
            if self._kept + size > self.KEEP_BYTES:
                return
            self._free.setdefault(size, []).append(buf)
            self._kept += size
