"""Helpers of the C ABI tests: the status codes they expect, and batches built by hand the
way the ABI takes them (what the batches point to is kept alive in ``KEEP``).

The ``raw`` fixture (a raw handle on the session cluster) is in conftest.py.
"""

from __future__ import annotations

from pathlib import Path

from mooncake_cffi.capi import ffi, lib

REPO = Path(__file__).resolve().parents[1]
NULL = ffi.NULL

E_INVALID_ARG = lib.MCS_E_INVALID_ARG
E_INVALID_HANDLE = lib.MCS_E_INVALID_HANDLE
E_CLOSED = lib.MCS_E_CLOSED
E_FORKED = lib.MCS_E_FORKED
E_DUPLICATE_KEY = lib.MCS_E_DUPLICATE_KEY


KEEP: list = []  # cdata the batches point to, alive for the whole test module


def make_batch(
    op: int,
    *names: str,
    n: int | None = None,
    bufs=NULL,
    sizes=NULL,
    res=None,
    flags: int = 0,
    values=NULL,
    struct_size: int | None = None,
    offsets: list[int] | None = None,
):
    """A struct mcs_batch for `names` packed the way the ABI takes keys."""
    data = b"".join(x.encode() for x in names)
    offs = offsets
    if offs is None:
        offs = [0]
        for x in names:
            offs.append(offs[-1] + len(x.encode()))
    cdata = ffi.new("char[]", data or b"\0")
    coffs = ffi.new("uint64_t[]", offs)
    b = ffi.new("struct mcs_batch *")
    b.struct_size = ffi.sizeof("struct mcs_batch") if struct_size is None else struct_size
    b.op = op
    b.flags = flags
    b.n = len(names) if n is None else n
    b.key_data = cdata
    b.key_bytes = len(data)
    b.key_offsets = coffs
    b.bufs = bufs
    b.sizes = sizes
    results = results_array(max(1, len(names))) if res is None else res
    b.results = results
    b.values = values
    KEEP.extend([cdata, coffs, results])  # the owning cdata: b.results does not own it
    return b


def replica_defaults():
    """A struct mcs_replica_options with Mooncake's defaults."""
    opts = ffi.new("struct mcs_replica_options *")
    assert lib.mcs_replica_options_init(opts) == 0
    assert opts.struct_size == ffi.sizeof("struct mcs_replica_options") and opts.replica_num == 1
    return opts


def with_replica(batch, opts):
    batch.replica = opts
    KEEP.append(opts)
    return batch


def results_array(n: int):
    return ffi.new("int64_t[]", max(n, 1))


def run_batch(handle, batch, idp=NULL):
    return lib.mcs_client_run(handle, idp, batch)
