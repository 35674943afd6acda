"""Replica descriptors on the drop-in: ``get_replica_desc`` / ``batch_get_replica_desc`` and
Mooncake's ``ReplicaDescriptor`` family, answered from the master's admin API.

Mooncake's calls ask the master for each key's replicas (``Query`` / ``BatchQuery``) and hand
back ``ReplicaDescriptor`` objects.  The drop-in reads the same facts from the master's admin
HTTP API (``/query_key``, ``/batch_query_keys``; :class:`~mooncake_cffi.admin.AdminClient`):
each memory replica's buffer (size, address, transport endpoint) and each disk replica's file.
The master lists only complete replicas there, as its query does, so every descriptor's
``status`` is ``COMPLETE``.  The admin API takes no read lease, where Mooncake's query does.

Where the admin API is: the setup key ``admin_url`` (or ``MOONCAKE_CFFI_STORE_OPTIONS``), else
``http://<master host>:9003`` (the master's default ``-metrics_port``).  A master that cannot
be asked answers as a failed query does in Mooncake: no descriptors (``[]``, or the key left out
of the dict), with one warning naming the URL.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

from ..admin import AdminClient, AdminError
from ..admin.model import KeyInfo, Replica

__all__ = [
    "Descriptor",
    "DiskDescriptor",
    "MemoryDescriptor",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "batch_replica_desc",
    "replica_desc",
]

log = logging.getLogger("mooncake_cffi.store")


class ReplicaStatus(enum.IntEnum):
    """Mooncake's ``ReplicaStatus`` (the same names and values)."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class Descriptor:
    """A memory replica's buffer, as Mooncake's ``Descriptor``: ``size``, ``buffer_address``,
    ``transport_endpoint`` (the segment's ``host:port``)."""

    __slots__ = ("size", "buffer_address", "transport_endpoint")

    def __init__(
        self, size: int = 0, buffer_address: int = 0, transport_endpoint: str = ""
    ) -> None:
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self) -> str:
        return (
            f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
            f"transport_endpoint={self.transport_endpoint}>"
        )


class MemoryDescriptor:
    """A memory replica: its ``buffer_descriptor`` (:class:`Descriptor`)."""

    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor: Descriptor) -> None:
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """A disk replica: ``file_path`` and ``object_size``."""

    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path: str, object_size: int) -> None:
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of a key, answering as Mooncake's ``ReplicaDescriptor``."""

    __slots__ = ("_kind", "_memory", "_disk", "status")

    def __init__(
        self,
        kind: str,
        memory: MemoryDescriptor | None = None,
        disk: DiskDescriptor | None = None,
        status: ReplicaStatus = ReplicaStatus.COMPLETE,
    ) -> None:
        self._kind, self._memory, self._disk, self.status = kind, memory, disk, status

    def is_memory_replica(self) -> bool:
        """True for a replica in a memory segment."""
        return self._kind == "memory"

    def is_disk_replica(self) -> bool:
        """True for a replica in shared (SSD / DFS) storage."""
        return self._kind == "disk"

    def is_local_disk_replica(self) -> bool:
        """True for a replica on a client's local disk."""
        return self._kind == "local_disk"

    def get_memory_descriptor(self) -> MemoryDescriptor:
        """The memory replica's descriptor (RuntimeError for any other kind, as Mooncake's)."""
        if self._memory is None:
            raise RuntimeError("Expected MemoryDescriptor")
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        """The disk replica's descriptor (RuntimeError for any other kind, as Mooncake's)."""
        if self._disk is None:
            raise RuntimeError("Expected DiskDescriptor")
        return self._disk


def _descriptor(r: Replica) -> ReplicaDescriptor:
    if r.kind == "memory":
        buf = Descriptor(r.size or 0, r.address or 0, r.endpoint or "")
        return ReplicaDescriptor("memory", memory=MemoryDescriptor(buf))
    if r.kind in ("disk", "local_disk"):
        return ReplicaDescriptor(r.kind, disk=DiskDescriptor(r.path or "", r.size or 0))
    return ReplicaDescriptor(r.kind)


def _descriptors(info: KeyInfo | None) -> list[ReplicaDescriptor]:
    return [] if info is None else [_descriptor(r) for r in info.replicas]


_warned: set[str] = set()


def _warn(admin: AdminClient, exc: Exception) -> None:
    if admin.url not in _warned:
        _warned.add(admin.url)
        log.warning(
            "get_replica_desc: the master's admin API at %s cannot be asked (%s); give its "
            "URL as the setup key 'admin_url' (the master's -metrics_port)",
            admin.url,
            exc,
        )


def replica_desc(admin: AdminClient, key: str) -> list[ReplicaDescriptor]:
    """``get_replica_desc``: the key's replicas ([] missing, not ready, or unanswered)."""
    try:
        return _descriptors(admin.query_key(key))
    except ValueError:  # a key the admin API cannot carry
        return []
    except (AdminError, OSError) as exc:
        if getattr(exc, "status", None) is None:
            _warn(admin, exc)
        return []


def batch_replica_desc(
    admin: AdminClient, keys: Sequence[str]
) -> dict[str, list[ReplicaDescriptor]]:
    """``batch_get_replica_desc``: key -> its replicas, for the keys the master answered."""
    wanted = [k for k in keys if AdminClient.can_query(k)]
    try:
        answers = admin.query(wanted)
    except (AdminError, OSError):  # one key not ready, say (or no answer): ask for each
        found = {k: replica_desc(admin, k) for k in wanted}
        return {k: v for k, v in found.items() if v}
    out: dict[str, list[ReplicaDescriptor]] = {}
    for key in wanted:
        info = answers.get(key.encode())
        if info is not None:
            out[key] = _descriptors(info)
    return out
