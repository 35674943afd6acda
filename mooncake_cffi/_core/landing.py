"""Landing memory: where a failing-open load reads, before its bytes reach the caller's.

A load with a deadline answers at the deadline while Mooncake's transfer goes on (a
transfer cannot be cancelled): bytes that arrive later land wherever the load pointed.
A stack takes the failed load as its answer and reuses that memory at once (vLLM hands a
failed load's KV blocks to the next request), so such a load reads into memory of ours
instead and its bytes are copied to the caller's only when it succeeds within its call.
Memory that a timed-out load may still write is never reused here: the batch holds it
until the shim is done with it, and then it is simply freed.

:class:`LandingPool` keeps the buffers of loads that ended for the next ones (a fresh
buffer costs zeroing and a page fault per page, about as much as the copy itself).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["LandingPool", "copy_out"]

#: The smallest buffer the pool hands out; larger ones are powers of two, so loads of
#: nearby sizes reuse each other's memory.
_MIN_BYTES = 64 << 10


#: A copy-out of at least this many bytes is split between the calling thread and a helper
#: (both release the GIL): one thread copies about 5 GB/s on this project's 2-core VM.
SPLIT_BYTES = 8 << 20

_memmove = ctypes.memmove
_helper: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def _copy(copies: Sequence[tuple[int, int, int]]) -> None:
    for dst, src, n in copies:
        _memmove(dst, src, n)


def copy_out(copies: Sequence[tuple[int, int, int]]) -> None:
    """Copy each ``(destination, source, bytes)`` of a landed load into the caller's
    memory; a large one on two threads, half the bytes each."""
    total = sum(n for _, _, n in copies)
    if total < SPLIT_BYTES:
        _copy(copies)
        return
    half, given = total // 2, 0
    mine: list[tuple[int, int, int]] = []
    theirs: list[tuple[int, int, int]] = []
    for dst, src, n in copies:
        if given >= half:
            mine.append((dst, src, n))
        elif given + n <= half:
            theirs.append((dst, src, n))
            given += n
        else:  # split this copy at the half
            cut = half - given
            theirs.append((dst, src, cut))
            mine.append((dst + cut, src + cut, n - cut))
            given = half
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(1, thread_name_prefix="mooncake-landing")
        helper = _helper
    done: Future[None] = helper.submit(_copy, theirs)
    _copy(mine)
    done.result()


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
