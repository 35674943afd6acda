"""The shim's raw C ABI from Python, for tests of the ABI and for microbenchmarks.

``ffi`` and ``lib`` are cffi's view of ``libmcs.so`` as ``mcs.h`` declares it (see
``man 3 mcs``); :meth:`mooncake_cffi.Client.native_handle` is a client's ``mcs_client *``;
:class:`Batch` builds a ``struct mcs_batch`` and keeps alive everything it points to;
:func:`prepared_call` is a batch built once and run again and again (what a microbenchmark of
the shim alone times); :func:`replica_options` is a replica config as ``struct
mcs_replica_options``; ``HEADER_PATH``, ``cdef_from_header`` and ``PRECOMPILED`` say where the
declarations came from, ``API_MODE`` whether calls are compiled C calls (the build's
``_mcs_api`` module) or go through libffi (its ABI-mode fallback), and ``FAST_CALLS`` whether
the clients' one-key calls without a buffer take the build's own C function
(``_capi/fastcall.c``) instead of cffi.  Calls made through ``lib`` get the shim's own
guarantees (misuse returns an error code, never crashes) and nothing more: no deadlines,
retries, plans or typed errors.
Everything else in the package reaches the shim through :class:`mooncake_cffi.Client`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._capi.binding import (
    ABI_VERSION,
    API_MODE,
    HEADER_PATH,
    PRECOMPILED,
    ensure_mooncake_loaded,
    ffi,
    last_error,
    lib,
)
from ._capi.cdef import cdef_from_header
from ._capi.marshal import Packed as Batch
from ._capi.replica_options import replica_options
from ._capi.runner import FAST_CALLS
from .status import OP_CODES, OP_GET, OPS

if TYPE_CHECKING:
    from .client import Client

__all__ = [
    "ABI_VERSION",
    "API_MODE",
    "Batch",
    "FAST_CALLS",
    "HEADER_PATH",
    "PRECOMPILED",
    "cdef_from_header",
    "ensure_mooncake_loaded",
    "ffi",
    "last_error",
    "lib",
    "prepared_call",
    "replica_options",
]


def prepared_call(
    client: Client, op: str, keys: Sequence[str | bytes], buffers: Sequence[Any] | None = None
) -> Callable[[], int]:
    """A call of one batch built now (``op`` one of :data:`mooncake_cffi.OPS`, keys and
    buffers as :meth:`Client.submit` takes them), run by the returned function each time it
    is called: ``mcs_client_run`` on the client's handle, returning the shim's status (0: it ran;
    the per-key results are in ``call.batch.results``).  The buffers are borrowed: keep them
    alive and do not resize them while the call is used.
    """
    if op not in OP_CODES:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    code = OP_CODES[op]
    batch = Batch(
        code, list(keys), None if buffers is None else list(buffers), writable=code == OP_GET
    )
    handle, raw = client.native_handle, batch.batch

    def call() -> int:
        return int(lib.mcs_client_run(handle, ffi.NULL, raw))

    call.batch = batch  # type: ignore[attr-defined]
    return call
