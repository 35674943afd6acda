"""Replica descriptors on the drop-in: ``get_replica_desc`` / ``batch_get_replica_desc`` and
Mooncake's ``ReplicaDescriptor`` family, asked of the master as Mooncake's class asks it.

Mooncake's calls ask the master for each key's replicas (``RealClient::batch_get_replica_desc``,
one ``BatchQuery``) and hand back ``ReplicaDescriptor`` objects.  The drop-in makes the same
call through the shim (``mcs_client_replica_desc``), which hands back the descriptors as the
wheel's own serializer prints them (JSON); :func:`from_master` turns them into the same
objects: each memory replica's buffer (size, address, transport endpoint), each disk
replica's file, and each replica's status, all as the master answered.  A key the master
gave nothing for (missing, not complete yet, or its query failed) gets ``[]`` and is left
out of the batch's dict, as in Mooncake's.

Only a wheel without that call (the shim answers MCS_E_UNSUPPORTED) falls back to the
master's admin HTTP API (``/query_key``, ``/batch_query_keys``;
:class:`~mooncake_cffi.admin.AdminClient`), at the setup key ``admin_url`` (or
``MOONCAKE_CFFI_STORE_OPTIONS``), else ``http://<master host>:9003`` (the master's default
``-metrics_port``); every descriptor's ``status`` is then ``COMPLETE`` (the admin API lists
only complete replicas) and a master that cannot be asked answers no descriptors, with one
warning naming the URL.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Sequence
from typing import Any

from ..admin import AdminClient, AdminError
from ..admin.model import KeyInfo, Replica
from ..status import MCS_E_UNSUPPORTED

__all__ = [
    "Descriptor",
    "DiskDescriptor",
    "MemoryDescriptor",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "batch_replica_desc",
    "from_master",
    "memory_endpoints",
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


def _status(value: Any) -> ReplicaStatus:
    try:
        return ReplicaStatus(int(value))
    except (TypeError, ValueError):
        return ReplicaStatus.UNDEFINED


def _from_json(d: dict[str, Any]) -> ReplicaDescriptor:
    """One descriptor as the wheel prints it: ``{"id", "descriptor_variant", "status"}``,
    the variant as the object of its alternative's fields (no tag: told by its fields)."""
    v = d.get("descriptor_variant") or {}
    status = _status(d.get("status"))
    if "buffer_descriptor" in v:  # MemoryDescriptor (a NoF one prints the same: none here)
        b = v["buffer_descriptor"] or {}
        buf = Descriptor(
            int(b.get("size_", 0)),
            int(b.get("buffer_address_", 0)),
            str(b.get("transport_endpoint_", "")),
        )
        return ReplicaDescriptor("memory", memory=MemoryDescriptor(buf), status=status)
    if "client_id" in v:  # LocalDiskDescriptor
        disk = DiskDescriptor("", int(v.get("object_size", 0)))
        return ReplicaDescriptor("local_disk", disk=disk, status=status)
    if "shard_idx" in v or "aligned_size" in v:  # DistributedFSDescriptor
        return ReplicaDescriptor("dfs", status=status)
    if "file_path" in v:  # DiskDescriptor
        disk = DiskDescriptor(str(v.get("file_path", "")), int(v.get("object_size", 0)))
        return ReplicaDescriptor("disk", disk=disk, status=status)
    return ReplicaDescriptor("unknown", status=status)


def _printed(runner: Any, keys: Sequence[str | bytes]) -> list[Any] | None:
    """Each key's descriptors as the wheel prints them, parsed (None for a key the master
    gave nothing for); None when the loaded wheel has no such call."""
    packed = [k if isinstance(k, bytes) else k.encode("utf-8", "surrogatepass") for k in keys]
    if not packed or any(b"\0" in k or not k for k in packed):
        return [None] * len(keys) if packed else []
    rc, text = runner.replica_desc(packed)
    if rc == MCS_E_UNSUPPORTED:
        return None
    if rc != 0:
        return [None] * len(keys)
    try:
        lists: list[Any] = json.loads(text)
    except ValueError:
        log.warning("get_replica_desc: the wheel printed descriptors that are not JSON")
        return [None] * len(keys)
    return lists


def from_master(
    runner: Any, keys: Sequence[str | bytes]
) -> list[list[ReplicaDescriptor] | None] | None:
    """Each key's replicas as the master gives them (None for a key it gave nothing for),
    through ``runner`` (the client's :class:`~mooncake_cffi._capi.runner.Runner`); None when
    the loaded wheel has no such call.  A failed call answers no descriptors, as Mooncake's.
    Keys are ``str`` or their UTF-8 bytes."""
    lists = _printed(runner, keys)
    if lists is None:
        return None
    return [None if x is None else [_from_json(d) for d in x] for x in lists]


#: Statuses of a replica whose memory is read: complete, or one printed as no number.
_READ = frozenset({ReplicaStatus.COMPLETE, ReplicaStatus.UNDEFINED})


def memory_endpoints(runner: Any, keys: Sequence[str | bytes]) -> list[list[str]] | None:
    """The storage nodes (``host:port``) holding each key's readable memory replicas
    (complete, or of no printed status), from the same query as :func:`from_master` but
    with no descriptor objects built: a lookup's check asks it of up to a thousand keys at
    a time.  ``[]`` for a key the master gave nothing for; None as :func:`from_master`."""
    lists = _printed(runner, keys)
    if lists is None:
        return None
    out: list[list[str]] = []
    for x in lists:
        eps = []
        for d in x or ():
            buf = (d.get("descriptor_variant") or {}).get("buffer_descriptor")
            status = d.get("status")
            if buf and (status == ReplicaStatus.COMPLETE or _status(status) in _READ):
                ep = buf.get("transport_endpoint_")
                if ep:
                    eps.append(str(ep))
        out.append(eps)
    return out


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
