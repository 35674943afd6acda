"""Moving values between mcl2 and Mooncake: directly, or staged through registered L1 memory.

Over TCP a client can put and get from any buffer, so values go straight to
``Client.batch_put`` / ``batch_get``.  With RDMA (or when ``--l1-size`` is given), Mooncake
needs the buffers to lie in memory registered with it: the client then registers one
anonymous mapping of ``--l1-size`` bytes (default 256 MiB, or the largest value to put), and every
batch is packed into it, moved with ``put_from`` / ``get_into``, and unpacked.  A batch
larger than the staging area is split; a single value larger than it is refused with a
message naming ``--l1-size``.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

from mooncake_cffi.status import INVALID_PARAMS, OBJECT_NOT_FOUND

from .errors import CliError

#: Staging area registered as L1 when RDMA needs one and --l1-size is not given.
DEFAULT_L1_BYTES = 256 << 20

_EXISTED = 1


def allocate_l1(size: int) -> mmap.mmap:
    """A writable anonymous mapping of ``size`` bytes, populated up front (not lazily, as
    memory to register with Mooncake should be)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(-1, size, flags=flags)


class Transfer:
    """Put and get batches of values with one client, staged through ``l1`` if given."""

    def __init__(self, client: Any, l1: mmap.mmap | None = None) -> None:
        self.client = client
        self.l1 = l1
        self.view = memoryview(l1) if l1 is not None else None

    @property
    def staged(self) -> bool:
        return self.view is not None

    # -- put ---------------------------------------------------------------------------------

    def put(self, keys: Sequence[str], values: Sequence[bytes], overwrite: bool) -> list[int]:
        """Per-key status: 0 stored, 1 existed and kept (without ``overwrite``), < 0 error."""
        if self.view is None:
            if overwrite:
                return list(self.client.batch_upsert(list(keys), list(values)))
            return list(self.client.batch_put(list(keys), list(values), skip_existing=True))
        out: list[int] = []
        for lo, hi in self._spans([len(v) for v in values]):
            bufs = self._pack(values[lo:hi])
            out.extend(
                self.client.put_from(
                    list(keys[lo:hi]), bufs, upsert=overwrite, skip_existing=not overwrite
                )
            )
        return out

    # -- get ---------------------------------------------------------------------------------

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of the keys, None for a missing key."""
        if self.view is None:
            return self.client.batch_get(list(keys))
        sizes = [self.client.size(k) for k in keys]
        out: list[bytes | None] = [None] * len(keys)
        present = [i for i, s in enumerate(sizes) if s is not None]
        for lo, hi in self._spans([sizes[i] or 0 for i in present]):
            idx = present[lo:hi]
            bufs = self._slots([sizes[i] or 0 for i in idx])
            got = self.client.get_into([keys[i] for i in idx], bufs)
            for i, buf, n in zip(idx, bufs, got, strict=True):
                if n >= 0:
                    out[i] = bytes(buf[:n])
                elif n == OBJECT_NOT_FOUND:
                    out[i] = None
                elif n == INVALID_PARAMS:  # replaced by a larger value meanwhile: once more
                    out[i] = self._get_one(keys[i])
                else:
                    from mooncake_cffi.errors import error_for

                    raise error_for(n, f"key {keys[i]!r}")
        return out

    def _get_one(self, key: str) -> bytes | None:
        size = self.client.size(key)
        if size is None:
            return None
        (buf,) = self._slots([size])
        (n,) = self.client.get_into([key], [buf])
        if n == OBJECT_NOT_FOUND:
            return None
        if n < 0:
            from mooncake_cffi.errors import error_for

            raise error_for(n, f"key {key!r}")
        return bytes(buf[:n])

    # -- staging -----------------------------------------------------------------------------

    def _capacity(self) -> int:
        assert self.view is not None
        return len(self.view)

    def _spans(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """Index ranges whose sizes fit the staging area together."""
        cap = self._capacity()
        spans: list[tuple[int, int]] = []
        lo = total = 0
        for i, size in enumerate(sizes):
            size = max(size, 1)
            if size > cap:
                raise CliError(
                    f"a value of {size} bytes does not fit the {cap}-byte L1 staging buffer; "
                    "give a larger --l1-size"
                )
            if total + size > cap:
                spans.append((lo, i))
                lo, total = i, 0
            total += size
        if lo < len(sizes):
            spans.append((lo, len(sizes)))
        return spans

    def _slots(self, sizes: Sequence[int]) -> list[memoryview]:
        assert self.view is not None
        slots = []
        offset = 0
        for size in sizes:
            size = max(size, 1)
            slots.append(self.view[offset : offset + size])
            offset += size
        return slots

    def _pack(self, values: Sequence[bytes]) -> list[memoryview]:
        slots = self._slots([len(v) for v in values])
        for slot, value in zip(slots, values, strict=True):
            slot[: len(value)] = value
        return [slot[: len(value)] for slot, value in zip(slots, values, strict=True)]
