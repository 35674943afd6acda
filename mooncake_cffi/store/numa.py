"""``bind_to_numa_node``: Mooncake's module function, through the same libnuma calls.

Mooncake's ``mooncake.store.bind_to_numa_node(node)`` runs the calling thread on ``node``
(``numa_run_on_node``) and prefers it for later allocations without forcing it
(``numa_set_bind_policy(0)``, ``numa_set_preferred``); it never raises, it warns: NUMA not
available, a node out of range, a failed call.  This one does the same through libnuma
(``libnuma.so.1``, which Mooncake's wheel links), warning through :mod:`logging`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["bind_to_numa_node"]

log = logging.getLogger("mooncake_cffi.store")

_libnuma: ctypes.CDLL | None = None
_looked = False


def _numa() -> ctypes.CDLL | None:
    global _libnuma, _looked
    if not _looked:
        _looked = True
        for name in ("libnuma.so.1", ctypes.util.find_library("numa")):
            if not name:
                continue
            try:
                _libnuma = ctypes.CDLL(name)
                break
            except OSError:
                continue
    return _libnuma


def bind_to_numa_node(node: int) -> None:
    """Bind the current thread and memory allocation preference to the NUMA node ``node``
    (Mooncake's call: warnings, never an exception)."""
    if isinstance(node, bool) or not isinstance(node, int):
        raise TypeError(f"bind_to_numa_node(): node must be an int, not {type(node).__name__}")
    numa = _numa()
    if numa is None or numa.numa_available() < 0:
        log.warning("NUMA is not available on this system; binding skipped")
        return
    max_node = numa.numa_max_node()
    if node < 0 or node > max_node:
        log.warning("Invalid NUMA node: %d. Valid range: 0-%d", node, max_node)
    if numa.numa_run_on_node(ctypes.c_int(node)) != 0:
        log.warning("numa_run_on_node failed for node %d", node)
    numa.numa_set_bind_policy(ctypes.c_int(0))
    numa.numa_set_preferred(ctypes.c_int(node))
