"""Mooncake's process-wide shared-memory allocator (store.so's ShmHelper) across the C
boundary: ``mcs_shm_alloc`` / ``mcs_shm_free`` (mcs(3))."""

from __future__ import annotations

from .binding import check, ensure_mooncake_loaded, ffi, lib


def shm_alloc(size: int) -> int:
    """The address of ``size`` bytes of a new memfd-backed shared segment; raises the
    shim's :class:`~mooncake_cffi.errors.MooncakeError` if Mooncake cannot map one."""
    ensure_mooncake_loaded()
    out = ffi.new("void **")
    check(lib.mcs_shm_alloc(out, size))
    return int(ffi.cast("uintptr_t", out[0]))


def shm_free(ptr: int) -> bool:
    """Free the segment starting at ``ptr``; False if no segment starts there."""
    ensure_mooncake_loaded()
    rc = lib.mcs_shm_free(ffi.cast("void *", ptr))
    if rc == lib.MCS_E_INVALID_ARG:
        return False
    check(rc)
    return True
