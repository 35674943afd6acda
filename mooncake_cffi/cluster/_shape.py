"""Checking the shape asked of a local cluster: storage nodes and their sizes, masters, HA,
metadata server, client TTL.  Every problem is a ValueError that names it."""

from __future__ import annotations

from collections.abc import Sequence

from ..sizes import parse_size
from ._common import MIN_SEGMENT_BYTES

#: Where segment and client metadata live: the wheel's HTTP server, the master's built-in
#: one (listens on every interface unless confined), etcd, or none (peer-to-peer handshake).
METADATA_MODES = ("http", "master", "etcd", "p2p")


def check(
    segment_size: str | Sequence[str],
    storage_nodes: int | None,
    ha: bool,
    masters: int | None,
    metadata: str,
) -> tuple[list[str], int]:
    """(one segment size per storage node, number of masters), or ValueError."""
    sizes = [segment_size] if isinstance(segment_size, (str, int)) else list(segment_size)
    if not sizes:
        raise ValueError("segment_size must name at least one size")
    if storage_nodes is None:
        storage_nodes = len(sizes)
    if isinstance(storage_nodes, bool) or not isinstance(storage_nodes, int):
        raise ValueError(f"storage_nodes must be an integer, got {storage_nodes!r}")
    if storage_nodes < 1:
        raise ValueError(f"storage_nodes must be at least 1, got {storage_nodes}")
    if len(sizes) == 1:
        sizes = sizes * storage_nodes
    elif len(sizes) != storage_nodes:
        raise ValueError(
            f"{len(sizes)} segment sizes given for {storage_nodes} storage nodes: "
            "give one size, or one per node"
        )
    for size in sizes:
        if parse_size(size) < MIN_SEGMENT_BYTES:
            raise ValueError(f"segment_size {size!r} is below Mooncake's minimum of 16 MB")
    if masters is None:
        masters = 3 if ha else 1
    if isinstance(masters, bool) or not isinstance(masters, int) or masters < 1:
        raise ValueError(f"masters must be a positive integer, got {masters!r}")
    if masters > 1 and not ha:
        raise ValueError(f"{masters} masters need HA mode (ha=True, `--ha`)")
    if metadata not in METADATA_MODES:
        raise ValueError(
            f"unknown metadata server {metadata!r}: choose one of {', '.join(METADATA_MODES)}"
        )
    if metadata == "master" and ha:
        raise ValueError("HA masters have no shared built-in metadata server: use http/etcd")
    return [str(s) for s in sizes], masters


def check_ttl(client_ttl: int | None) -> None:
    if client_ttl is not None and (isinstance(client_ttl, bool) or client_ttl < 1):
        raise ValueError(f"client_ttl must be a positive number of seconds, got {client_ttl}")
