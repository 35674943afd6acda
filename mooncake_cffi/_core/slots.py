"""The slot allocator of the L1 staging area: first fit, never across an L1 block boundary.

Mooncake moves a value to or from one buffer, and with L1 registered every buffer must lie
inside one registered block, so a slot is carved out of one block's part of the staging
area.  Pure Python, no locking (:class:`~.staging.Staging` holds its lock around it).
"""

from __future__ import annotations

import bisect

__all__ = ["Slots", "block_spans"]


class Slots:
    """First-fit allocator over the staging slice that never crosses an L1 block boundary.

    ``spans`` are the blocks' parts inside the slice, as sorted ``(start, end)`` offsets into
    the region.  Not thread-safe: :class:`~.staging.Staging` calls it under its lock.
    """

    def __init__(self, spans: list[tuple[int, int]], align: int) -> None:
        self.align = align
        self.starts = [start for start, _ in spans]
        # per block: sorted, disjoint, non-adjacent free ranges [start, end)
        self.free: list[list[tuple[int, int]]] = [[span] for span in spans]
        self.largest = max(end - start for start, end in spans)
        self.total = sum(end - start for start, end in spans)
        self.used = 0

    def take(self, n: int) -> tuple[int, int] | None:
        """``(offset, length)`` of a free slot of at least ``n`` bytes, or None if none is free.

        ``length`` is ``n`` rounded up to the alignment (less at the end of a block).
        """
        need = -(-max(n, 1) // self.align) * self.align
        for ranges in self.free:
            for i, (start, end) in enumerate(ranges):
                if end - start >= n:
                    length = min(need, end - start)
                    if start + length == end:
                        del ranges[i]
                    else:
                        ranges[i] = (start + length, end)
                    self.used += length
                    return start, length
        return None

    def give(self, offset: int, length: int) -> None:
        """Return a slot from :meth:`take`, merged with its free neighbours."""
        ranges = self.free[bisect.bisect_right(self.starts, offset) - 1]
        i = bisect.bisect_left(ranges, (offset, offset + length))
        ranges.insert(i, (offset, offset + length))
        if i + 1 < len(ranges) and ranges[i][1] == ranges[i + 1][0]:
            ranges[i] = (ranges[i][0], ranges[i + 1][1])
            del ranges[i + 1]
        if i > 0 and ranges[i - 1][1] == ranges[i][0]:
            ranges[i - 1] = (ranges[i - 1][0], ranges[i][1])
            del ranges[i]
        self.used -= length


def block_spans(region_len: int, offset: int, size: int, block_size: int) -> list[tuple[int, int]]:
    """The parts of ``[offset, offset + size)`` inside each block of ``block_size`` bytes."""
    spans = []
    lo, hi = offset, offset + size
    while lo < hi:
        block_end = min((lo // block_size + 1) * block_size, region_len)
        end = min(block_end, hi)
        spans.append((lo, end))
        lo = end
    return spans
