"""How mcl2 cuts multi-key work into batches for Mooncake.

Keys go in batches of at most :data:`CHUNK_KEYS`; for ``put``, a batch also holds about
:data:`CHUNK_BYTES` of values at most (a larger single value still goes alone).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Keys per batch sent to Mooncake.
CHUNK_KEYS = 256
#: Bytes of values per put batch (a larger single value still goes alone).
CHUNK_BYTES = 64 << 20


def chunks(items: Sequence[T], size: int = CHUNK_KEYS) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items``, ``size`` items each (the last may be shorter)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def byte_chunks(sizes: Sequence[int]) -> list[range]:
    """Index ranges of at most CHUNK_KEYS items and about CHUNK_BYTES bytes each (a size
    below 0, unknown until read, counts as 0)."""
    out: list[range] = []
    start = 0
    total = 0
    for i, size in enumerate(sizes):
        size = max(size, 0)
        if i > start and (i - start >= CHUNK_KEYS or total + size > CHUNK_BYTES):
            out.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out
