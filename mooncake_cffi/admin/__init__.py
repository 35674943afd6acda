"""A client of ``mooncake_master``'s admin HTTP API (its ``-metrics_port``, default 9003).

:class:`AdminClient` is the one place that speaks to that port: ``mcl2``'s ``ls``, ``info``,
``segments``, ``metrics`` and ``doctor``, :class:`~mooncake_cffi.cluster.LocalCluster` and the
tests use it.  Every request has a timeout and ignores proxy settings.

* :mod:`.client`: :class:`AdminClient`, :class:`AdminError`, :func:`admin_url_for_master`
  (HTTP, and what each endpoint of the master answers);
* :mod:`.model`: the answers about keys and segments (:class:`KeyInfo`, :class:`Replica`,
  :class:`Segment`);
* :mod:`.metrics`: ``/metrics`` parsed (:func:`parse_prometheus`, :class:`Metrics`).

Everything public is importable from ``mooncake_cffi.admin`` itself.
"""

from __future__ import annotations

# DEFAULT_TIMEOUT, LISTING_TIMEOUT and Samples were public before the split, though not in
# __all__: they stay importable from here (``X as X`` marks a deliberate re-export).
from .client import DEFAULT_ADMIN_PORT, AdminClient, AdminError, admin_url_for_master
from .client import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .client import LISTING_TIMEOUT as LISTING_TIMEOUT
from .metrics import Metrics, parse_prometheus
from .metrics import Samples as Samples
from .model import KeyInfo, Replica, Segment

__all__ = [
    "DEFAULT_ADMIN_PORT",
    "AdminClient",
    "AdminError",
    "KeyInfo",
    "Metrics",
    "Replica",
    "Segment",
    "admin_url_for_master",
    "parse_prometheus",
]
