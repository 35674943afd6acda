"""Mooncake's session API on the drop-in: ``batch_put_session_start`` ... ``batch_get_session_end``.

Mooncake 0.3.13 added seven calls (upstream PR #2881) that split a batch write into a
reservation, ranged writes in any order and a commit (or a revoke), and a batch read into
one replica query and ranged reads.  The sessions live inside Mooncake's own client
(``RealClient``): each call here is one shim call (``mcs_client_session``) that hands the
arguments to the RealClient method of that name, so reservations, leases and every answer
are Mooncake's.  What happens in Python is only what Mooncake's binding does before its
call: a store not set up answers ``[]`` (``batch_get_session_end``: -1), and lists that do
not pair up are answered -600 per key without a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._capi.binding import ffi
from .._capi.marshal import pack_keys
from .._capi.replica_options import replica_options
from .._capi.session import run_session
from ..status import SESSION_GET_END as GET_END
from ..status import SESSION_GET_RANGES as GET_RANGES
from ..status import SESSION_GET_START as GET_START
from ..status import SESSION_PUT_END as PUT_END
from ..status import SESSION_PUT_RANGES as PUT_RANGES
from ..status import SESSION_PUT_REVOKE as PUT_REVOKE
from ..status import SESSION_PUT_START as PUT_START
from .repair import code_of

__all__ = [
    "GET_END",
    "GET_RANGES",
    "GET_START",
    "PUT_END",
    "PUT_RANGES",
    "PUT_REVOKE",
    "PUT_START",
    "keys_call",
    "put_start",
    "ranges",
]

INVALID_PARAMS = -600


def _key_list(keys: Any) -> list[str]:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError(f"keys must be a list of str, not {type(keys).__name__}")
    out = list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"keys must be a list of str, not a list holding {type(k).__name__}")
    return out


def _sizes(values: Any, what: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list of int, not {type(values).__name__}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
            raise TypeError(f"{what} must hold ints in [0, 2**64), not {v!r}")
        out.append(v)
    return out


def _run(native: Any, op: int, keys: list[str], fill: Any = None) -> list[int]:
    """One mcs_client_session call; per-key results (GET_END: one)."""
    rc, results = run_session(native.handle, op, pack_keys(keys) if keys else b"", len(keys), fill)
    return [code_of(rc)] * len(results) if rc else results


def put_start(native: Any, keys: Any, sizes: Any, config: Any) -> list[int]:
    """``batch_put_session_start``: reserve each key's size (Mooncake's answer per key)."""
    ks, sz = _key_list(keys), _sizes(sizes, "sizes")
    if not ks:
        return []
    if len(sz) != len(ks):
        return [INVALID_PARAMS] * len(ks)

    def fill(s: Any) -> Any:
        arr = ffi.new("uint64_t[]", sz)
        s.sizes = arr
        if config is None:
            s.replica = ffi.NULL
            return arr
        opts, opts_keep = replica_options(config)
        s.replica = opts
        return arr, opts_keep

    return _run(native, PUT_START, ks, fill)


def ranges(
    native: Any, op: int, keys: Any, all_ptrs: Any, all_sizes: Any, all_offsets: Any
) -> list[int]:
    """``batch_put_from_multi_buffer_ranges`` / ``batch_get_into_multi_buffer_ranges``: key
    i's ranges are ``all_sizes[i][j]`` bytes at ``all_ptrs[i][j]``, at offset
    ``all_offsets[i][j]`` of its object; bytes moved per key, or a code."""
    ks = _key_list(keys)
    nested = []
    for lists, what in ((all_ptrs, "all_buffer_ptrs"), (all_sizes, "all_sizes"),
                        (all_offsets, "all_offsets")):  # fmt: skip
        if isinstance(lists, (str, bytes)) or not isinstance(lists, Sequence):
            raise TypeError(f"{what} must be a list of lists of int")
        nested.append([_sizes(inner, what) for inner in lists])
    ptrs, sizes, offsets = nested
    n = len(ks)
    if not (len(ptrs) == len(sizes) == len(offsets) == n):
        return [INVALID_PARAMS] * n
    # A key whose three lists differ in length is skipped by Mooncake (-600).
    take = [i for i in range(n) if len(ptrs[i]) == len(sizes[i]) == len(offsets[i])]
    out = [INVALID_PARAMS] * n
    if not take:
        return out
    sub = [ks[i] for i in take]

    def fill(s: Any) -> Any:
        counts = ffi.new("uint64_t[]", [len(ptrs[i]) for i in take])
        flat_p = [p for i in take for p in ptrs[i]]
        flat_s = [z for i in take for z in sizes[i]]
        flat_o = [o for i in take for o in offsets[i]]
        bufs = ffi.new("void *[]", [ffi.cast("void *", p) for p in flat_p] or 1)
        arr_s = ffi.new("uint64_t[]", flat_s or 1)
        arr_o = ffi.new("uint64_t[]", flat_o or 1)
        s.ranges_per_key, s.bufs, s.range_sizes, s.offsets = counts, bufs, arr_s, arr_o
        return counts, bufs, arr_s, arr_o

    for i, r in zip(take, _run(native, op, sub, fill)):
        out[i] = r
    return out


def keys_call(native: Any, op: int, keys: Any) -> list[int]:
    """``batch_put_session_end`` / ``_revoke``, ``batch_get_session_start`` /
    ``batch_get_session_end`` (its one int as a list of one)."""
    ks = _key_list(keys)
    if not ks and op != GET_END:
        return []
    return _run(native, op, ks)
