"""A throw-away Mooncake cluster on 127.0.0.1, run from the installed Mooncake wheel.

:class:`LocalCluster` (in :mod:`.local`) starts masters (one, or several in HA mode on a
private etcd), a metadata server of your choice and any number of storage nodes, and stops
exactly what it started.  :mod:`.loopback` keeps their listening sockets on 127.0.0.1.
"""

from __future__ import annotations

from ..sizes import parse_size
from ._common import ClusterError, find_binary
from .local import METADATA_MODES, LocalCluster

__all__ = ["METADATA_MODES", "ClusterError", "LocalCluster", "find_binary", "parse_size"]
