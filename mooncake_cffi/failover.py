"""Reads that survive a storage node: how often a read went to another replica.

Mooncake 0.3.13.post1's read takes one replica of a key, the first memory replica the master
lists, and fails with ``TRANSFER_FAIL`` when that node is dead or frozen, until the masters'
client TTL drops it, although another replica is alive.  The shim takes that choice over (it
answers store.so's ``mooncake::SelectBestReplica``): a read whose transfer failed is tried
again, up to 3 times, and the endpoint that failed it is avoided by every read for 30 s, so
the key is read from a live replica within the call's deadline.  This covers every read
face: ``get``, ``batch_get``, ``get_into``, the drop-in's reads and the LMCache tier's loads.
It takes part only with the wheel whose replica layout the shim checked (0.3.13.post1), and
only when the shim was loaded before store.so (importing ``mooncake.store`` before
``mooncake_cffi`` leaves Mooncake's own choice in place: ``seen`` stays False).
"""

from __future__ import annotations

from ._capi import counters

__all__ = ["read_failover_stats"]


def read_failover_stats() -> dict[str, int | bool]:
    """The process's counters: ``active`` (the wheel's layout checked out), ``seen`` (its
    reads have asked the shim), ``suspects`` (endpoints avoided now), ``choices`` (replica
    choices made with a suspect known), ``fallbacks`` (of them, answered with another
    replica than Mooncake's pick: reads served by a second replica), ``marked`` (times an
    endpoint was marked failing), ``retries`` (reads tried again after a failed transfer)
    and ``recovered`` (of them, read from another replica)."""
    return counters.replica_choice_stats()
