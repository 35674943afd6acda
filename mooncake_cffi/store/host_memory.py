"""``MooncakeHostMemAllocator`` and the standalone client (``setup_dummy``): memory a client
of a standalone Mooncake client service shares with that service.

The allocator is Mooncake's own (store.so's process-wide ShmHelper, reached through the
shim's ``mcs_shm_alloc`` / ``mcs_shm_free``), so a segment it returns is one Mooncake's
DummyClient can register with the service, whichever class (Mooncake's or the drop-in's)
set the dummy client up.
"""

from __future__ import annotations

from .._capi.shm import shm_alloc, shm_free


class MooncakeHostMemAllocator:
    """Mooncake's ``MooncakeHostMemAllocator``: shared memory for a dummy client's buffers.

    ``alloc(size)`` maps a new memfd-backed segment of ``size`` bytes and returns its address
    (a whole segment is what ``register_buffer`` of a dummy client takes); ``free(ptr)``
    unmaps it: 0, or -1 when no segment starts at ``ptr``.  No store is needed.
    """

    def alloc(self, size: int) -> int:
        """A new segment of ``size`` bytes: its address (RuntimeError if none can be mapped,
        as Mooncake's raises)."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise TypeError(f"alloc(): size must be a non-negative int, not {size!r}")
        try:
            return shm_alloc(size)
        except Exception as exc:  # the shim's error: Mooncake's raises RuntimeError
            raise RuntimeError(f"MooncakeHostMemAllocator.alloc({size}): {exc}") from exc

    def free(self, ptr: int) -> int:
        """Unmap the segment starting at ``ptr``: 0, or -1 if none starts there."""
        if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:
            return -1
        return 0 if shm_free(ptr) else -1
