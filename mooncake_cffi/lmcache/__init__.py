"""Mooncake Store as LMCache's L2 tier, from a plain pip install.

Two ways to plug in, both with the JSON of LMCache's ``mooncake_store`` adapter as
``adapter_params`` (see :mod:`.params` for the extra keys):

- ``{"type": "native_plugin", "module_path": "mooncake_cffi.lmcache",
  "class_name": "MooncakeConnector", "adapter_params": {...}}``: LMCache wraps our
  :class:`MooncakeConnector` (which needs no LMCache import) in its own
  ``NativeConnectorL2Adapter``.  ``max_capacity_gb`` goes at the top level.
- ``{"type": "plugin", "module_path": "mooncake_cffi.lmcache",
  "class_name": "MooncakeL2Adapter", "adapter_params": {...}}``: our
  :class:`MooncakeL2Adapter`, which also receives LMCache's L1 region (needed for
  ``protocol: rdma``).  ``max_capacity_gb`` goes inside ``adapter_params``.

``MooncakeL2Adapter`` subclasses LMCache's classes, so it is imported only when asked for,
and then needs lmcache installed (``pip install '.[cpu,lmcache]'`` from the clone); the
release is checked (:func:`check_lmcache_version`, tested: :data:`TESTED_LMCACHE_VERSIONS`).
"""

from __future__ import annotations

from typing import Any

from .compat import (
    TESTED_LMCACHE_VERSIONS,
    LMCacheVersionError,
    UntestedLMCacheWarning,
    check_lmcache_version,
)
from .connector import MooncakeConnector
from .params import parse_adapter_params

__all__ = [
    "TESTED_LMCACHE_VERSIONS",
    "LMCacheVersionError",
    "MooncakeConnector",
    "MooncakeL2Adapter",
    "UntestedLMCacheWarning",
    "check_lmcache_version",
    "parse_adapter_params",
]


def __getattr__(name: str) -> Any:
    # Only the plugin adapter imports LMCache (torch and more): load it on first use.
    if name == "MooncakeL2Adapter":
        from .compat import require_lmcache

        require_lmcache("mooncake_cffi.lmcache.MooncakeL2Adapter")
        from .adapter import MooncakeL2Adapter

        return MooncakeL2Adapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
