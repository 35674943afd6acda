"""What the master's admin API answers about keys and segments, as plain frozen data.

:class:`KeyInfo` (a key and its :class:`Replica` list) comes from ``/query_key`` and
``/batch_query_keys``, :class:`Segment` from ``/get_segments_detail``.  The helpers here turn
the master's JSON into them and never raise for a field that is missing or of the wrong type:
it reads as None.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KeyInfo", "Replica", "Segment"]

#: The fields of one ``/get_segments_detail`` item that :class:`Segment` has attributes for.
_SEGMENT_FIELDS = frozenset(
    {
        "segment_name",
        "te_endpoint",
        "protocol",
        "status",
        "allocator_capacity_bytes",
        "size_bytes",
        "allocator_used_bytes",
    }
)


@dataclass(frozen=True)
class Replica:
    """One copy of a key: where it lives (``endpoint``, ``segment``) and how big it is."""

    kind: str  #: "memory", "disk", "local_disk" or "nof"
    endpoint: str | None  #: transport endpoint of the segment holding it (host:port)
    size: int | None
    protocol: str | None = None
    segment: str | None = None  #: the segment's name, when the endpoint matched one
    address: int | None = None  #: buffer address inside the segment (memory replicas)
    path: str | None = None  #: file path (disk replicas)


@dataclass(frozen=True)
class KeyInfo:
    """What the master says about one key."""

    key: bytes
    replicas: tuple[Replica, ...]

    @property
    def size(self) -> int | None:
        """The value's size in bytes (every replica holds the whole value)."""
        for replica in self.replicas:
            if replica.size is not None:
                return replica.size
        return None


@dataclass(frozen=True)
class Segment:
    """A storage segment mounted in the master."""

    name: str
    endpoint: str | None
    protocol: str | None
    status: str | None
    capacity_bytes: int | None
    used_bytes: int | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _replicas(kind: str, values: Any) -> Iterator[Replica]:
    """The replicas of one kind in a ``/query_key`` or ``/batch_query_keys`` answer."""
    if not isinstance(values, list):
        return
    for v in values:
        if not isinstance(v, dict):
            continue
        yield Replica(
            kind=kind,
            endpoint=v.get("transport_endpoint_") or v.get("endpoint"),
            size=_int_or_none(v.get("size_", v.get("size"))),
            protocol=v.get("protocol_") or v.get("protocol"),
            address=_int_or_none(v.get("buffer_address_")),
            path=v.get("file_path_") or v.get("path"),
        )


def _batch_entry(key: bytes, entry: dict[str, Any]) -> KeyInfo:
    """The :class:`KeyInfo` of one ``ok`` entry of a ``/batch_query_keys`` answer."""
    replicas: list[Replica] = []
    for kind, name in (
        ("memory", "values"),
        ("disk", "disk_values"),
        ("local_disk", "local_disk_values"),
        ("nof", "nof_values"),
    ):
        replicas.extend(_replicas(kind, entry.get(name)))
    return KeyInfo(key, tuple(replicas))


def _segment(item: dict[str, Any]) -> Segment:
    """The :class:`Segment` of one item of ``/get_segments_detail``'s ``segments`` list."""
    capacity = item.get("allocator_capacity_bytes", item.get("size_bytes"))
    return Segment(
        name=str(item.get("segment_name", "?")),
        endpoint=item.get("te_endpoint"),
        protocol=item.get("protocol"),
        status=item.get("status"),
        capacity_bytes=_int_or_none(capacity),
        used_bytes=_int_or_none(item.get("allocator_used_bytes")),
        extra={k: v for k, v in item.items() if k not in _SEGMENT_FIELDS},
    )
