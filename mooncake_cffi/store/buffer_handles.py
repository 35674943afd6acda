"""``BufferHandle``: a value read into Mooncake's local buffer, as Mooncake's own client gives it.

A handle is a ctypes byte array over the value's memory (so it has the buffer protocol:
``memoryview``, ``bytes``, ``torch.frombuffer``, ``numpy.frombuffer``) with ``ptr()`` and
``size()``; the handles of one ``get_buffer`` batch share one hold on Mooncake's buffer,
released when the last of them (and every view of them) is gone.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BufferHandle", "handles"]


class BufferHandle:
    """A value read into Mooncake's local buffer (``get_buffer`` / ``batch_get_buffer``), as
    Mooncake's own ``BufferHandle``: ``ptr()`` its address, ``size()`` and ``len()`` its
    length, and the buffer protocol (``memoryview``, ``torch.frombuffer``, ``bytes``).  The
    memory stays valid while the handle (or a view of it) is alive and is released when the
    last handle of its batch is dropped; until then it occupies ``local_buffer_size``."""

    __slots__ = ()

    def ptr(self) -> int:
        """The value's address."""
        return ctypes.addressof(self)  # type: ignore[arg-type]

    def size(self) -> int:
        """The value's length in bytes."""
        return len(self)  # type: ignore[arg-type]


_TYPES: dict[int, Any] = {}


def _handle_type(n: int) -> Any:
    """The BufferHandle class of values of n bytes (a ctypes byte array, cached by size)."""
    t = _TYPES.get(n)
    if t is None:
        if len(_TYPES) > 4096:
            _TYPES.clear()
        t = _TYPES[n] = type(
            "BufferHandle",
            (BufferHandle, ctypes.c_byte * n),
            {"__slots__": ("_held",), "__module__": "mooncake_cffi.store"},
        )
    return t


class _Held:
    """One batch's hold on Mooncake's buffer: ``release()`` runs when the last handle goes."""

    __slots__ = ("release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self.release = release

    def __del__(self) -> None:
        self.release()


def handles(sizes: Sequence[int], addrs: Sequence[int], release: Callable[[], None]) -> list[Any]:
    """A handle per value (None where ``sizes[i]`` is negative: unread), over ``addrs[i]``;
    ``release()`` is called once every handle has been dropped (at once if there is none)."""
    held = _Held(release)
    out: list[Any] = []
    for size, addr in zip(sizes, addrs):
        if size < 0:
            out.append(None)
            continue
        h = _handle_type(size).from_address(addr) if size else _handle_type(0)()
        h._held = held
        out.append(h)
    return out
