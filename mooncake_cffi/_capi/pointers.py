"""Buffers given as integer addresses: the ``buffer_ptr`` arguments of Mooncake's own client.

:mod:`mooncake_cffi.store`'s pointer calls (``put_from``, ``batch_get_into``, the multi-buffer
calls) take addresses; these helpers turn them into the shim's ``void *`` buffers with one
C-speed conversion per batch (a ``uintptr_t[]`` read as ``void *[]``) and point a
``struct mcs_batch`` at them.  No Python object keeps the memory alive: its owner does.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..status import MCS_E_INVALID_ARG, OP_GET, OP_PUT, OP_UPSERT
from .binding import ffi
from .replica_options import attach_replica

__all__ = [
    "address",
    "point_at_address_parts",
    "point_at_addresses",
    "ranges_struct",
    "staging_area",
]

BUFFER_OPS = (OP_GET, OP_PUT, OP_UPSERT)


def address(addr: int) -> Any:
    """``void *`` cdata for an integer address (the ``buffer_ptr`` arguments of Mooncake's own
    client); a TypeError for anything but a non-negative int, as Mooncake's binding gives."""
    if type(addr) is not int:
        try:
            addr = operator.index(addr) if not isinstance(addr, bool) else -1
        except TypeError:
            addr = -1
    if addr < 0:
        raise TypeError("a buffer address must be a non-negative int")
    return ffi.cast("void *", addr)


def _address_array(addrs: Sequence[int], what: str = "buffer_ptrs") -> Any:
    """A ``uintptr_t[]`` of the addresses (C-speed conversion), or a TypeError naming them."""
    try:
        return ffi.new("uintptr_t[]", addrs)
    except (TypeError, OverflowError):
        raise TypeError(f"{what} must be non-negative ints (addresses)") from None


def point_at_addresses(
    b: Any,
    op: int,
    n: int,
    addrs: Sequence[int],
    sizes: Sequence[int],
    replicate_config: Any,
    arrays: tuple[Any, Any] | None = None,
) -> list[Any]:
    """Set a batch's buffers from integer addresses and their sizes (Mooncake's
    ``buffer_ptrs`` / ``sizes``) and its replica options; returns what the call borrows.
    ``arrays`` are reusable (uintptr_t *, uint64_t *) arrays of at least n entries."""
    if op not in BUFFER_OPS:
        raise ValueError("this operation takes no buffers")
    if len(addrs) != n or len(sizes) != n:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG,
            f"{n} keys but {len(addrs)} buffer addresses and {len(sizes)} sizes: they must pair up",
        )
    if arrays is None:
        barr = _address_array(addrs)
        try:
            csizes = ffi.new("uint64_t[]", sizes)
        except (TypeError, OverflowError):
            raise TypeError("sizes must be non-negative ints") from None
        keep = [barr, csizes]
    else:
        barr, csizes = arrays
        try:
            barr[0:n] = addrs
            csizes[0:n] = sizes
        except (TypeError, OverflowError):
            raise TypeError("buffer addresses and sizes must be non-negative ints") from None
        keep = []
    b.bufs = ffi.cast("void **", barr)
    b.sizes = csizes
    attach_replica(b, op, replicate_config, keep)
    return keep


def point_at_address_parts(
    b: Any,
    op: int,
    n: int,
    parts: Sequence[Sequence[int]],
    part_sizes: Sequence[Sequence[int]],
    replicate_config: Any,
) -> list[Any]:
    """Set a batch's multi-part buffers from lists of addresses per key (Mooncake's
    ``all_buffer_ptrs`` / ``all_sizes``); returns what the call borrows."""
    if op not in BUFFER_OPS:
        raise ValueError("multi-part values are for get, put and upsert")
    if len(parts) != n or len(part_sizes) != n:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG,
            f"{n} keys but {len(parts)} lists of addresses and {len(part_sizes)} lists of sizes",
        )
    counts = [len(p) for p in parts]
    if counts != [len(s) for s in part_sizes]:
        raise InvalidArgumentError(MCS_E_INVALID_ARG, "each key needs one size per address")
    flat = [a for key_parts in parts for a in key_parts]
    flat_sizes = [s for key_sizes in part_sizes for s in key_sizes]
    barr = _address_array(flat, "all_buffer_ptrs")
    try:
        csizes = ffi.new("uint64_t[]", flat_sizes)
        ccounts = ffi.new("uint32_t[]", counts)
    except (TypeError, OverflowError):
        raise TypeError("all_sizes must be lists of non-negative ints") from None
    b.bufs, b.sizes, b.part_counts = ffi.cast("void **", barr), csizes, ccounts
    keep = [barr, csizes, ccounts]
    attach_replica(b, op, replicate_config, keep)
    return keep


def staging_area(values: Sequence[Any]) -> tuple[bytearray, int, list[int], list[int]] | None:
    """One buffer holding the bytes-like ``values`` back to back: ``(buffer, its address,
    each value's address, each value's size)``, or None when a value is empty.  The address
    is valid while the buffer lives and is not resized."""
    views = [memoryview(v).cast("B") for v in values]
    if any(not v.nbytes for v in views):
        return None
    area = bytearray(sum(v.nbytes for v in views))
    base = int(ffi.cast("uintptr_t", ffi.from_buffer(area)))
    addrs, sizes, pos = [], [], 0
    for v in views:
        area[pos : pos + v.nbytes] = v
        addrs.append(base + pos)
        sizes.append(v.nbytes)
        pos += v.nbytes
    return area, base, addrs, sizes


def ranges_struct(
    addrs: Sequence[int],
    keys_per_buf: list[int],
    keys: list[bytes],
    ranges_per_key: list[int],
    dst: list[int],
    src: list[int],
    sizes: list[int],
) -> tuple[Any, list[Any]]:
    """A ``struct mcs_ranges *`` over these arrays (see mcs.h) and what it points into."""
    r = ffi.new("struct mcs_ranges *")
    r.struct_size = ffi.sizeof("struct mcs_ranges")
    packed_keys = b"".join(k + b"\0" for k in keys)
    try:
        keep = [
            ffi.new("uintptr_t[]", list(addrs)),
            ffi.new("uint64_t[]", keys_per_buf),
            ffi.new("char[]", packed_keys),
            ffi.new("uint64_t[]", ranges_per_key),
            ffi.new("uint64_t[]", dst),
            ffi.new("uint64_t[]", src),
            ffi.new("uint64_t[]", sizes),
            ffi.new("int64_t[]", max(1, len(sizes))),
        ]
    except (TypeError, OverflowError):
        raise TypeError("addresses, offsets and sizes must be non-negative ints") from None
    r.n_bufs = len(addrs)
    r.bufs = ffi.cast("void **", keep[0])
    r.keys_per_buf, r.key_data, r.ranges_per_key = keep[1], keep[2], keep[3]
    r.key_bytes = len(packed_keys)
    r.dst_offsets, r.src_offsets, r.sizes, r.results = keep[4:]
    return r, keep
