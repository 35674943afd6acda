"""The C boundary of Mooncake's session API: ``mcs_client_session`` and its op codes.

:func:`run_session` fills a ``struct mcs_session`` (its keys packed as for
``mcs_client_run_keys``; ``fill`` sets the op's arrays and returns what they point into) and
makes the call; :mod:`mooncake_cffi.store.sessions` is its user.  The op codes are
:data:`mooncake_cffi.status.SESSION_OPS`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..status import SESSION_GET_END
from .binding import ffi, lib

__all__ = ["run_session"]


def run_session(
    handle: Any, op: int, packed_keys: bytes, n: int, fill: Callable[[Any], Any] | None = None
) -> tuple[int, list[int]]:
    """``(rc, results)`` of one ``mcs_client_session`` call: the shim's status and the
    per-key answers (one for GET_END; zeros when it did not run)."""
    s = ffi.new("struct mcs_session *")
    s.struct_size = ffi.sizeof("struct mcs_session")
    s.op = op
    s.n = n
    data = ffi.from_buffer(packed_keys) if n else ffi.NULL
    s.key_data = data
    s.key_bytes = len(packed_keys) + 1 if n else 0
    count = 1 if op == SESSION_GET_END else n
    results = ffi.new("int64_t[]", max(count, 1))
    s.results = results
    keep = fill(s) if fill is not None else None
    rc = lib.mcs_client_session(handle, s)
    del keep, data
    return int(rc), [int(r) for r in ffi.unpack(results, count)]
