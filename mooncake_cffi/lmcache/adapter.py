"""``MooncakeL2Adapter``: the class behind LMCache's ``"type": "plugin"``, over the connector.

LMCache builds a ``"plugin"`` adapter as ``MooncakeL2Adapter(adapter_params,
l1_memory_desc=desc)``; it must subclass LMCache's ``L2AdapterInterface``.  This is the only
external path that receives LMCache's L1 memory region, so it is the one RDMA needs.  It
subclasses LMCache's own ``NativeConnectorL2Adapter`` (store / lookup-and-lock / load /
delete, task ids, bitmaps, usage accounting, and from LMCache 0.5.7 its memory tags,
``STORAGE``/``REMOTE``) over a :class:`MooncakeConnector`, so both plugin types behave the
same apart from L1 registration.

This module imports LMCache at import time; ``mooncake_cffi.lmcache`` imports it only
when ``MooncakeL2Adapter`` is asked for.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from .compat import check_lmcache_version, native_adapter_arguments

check_lmcache_version()  # LMCache resolves the class when it creates the adapter

from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)

from .connector import MooncakeConnector  # noqa: E402

__all__ = ["MooncakeL2Adapter", "l1_buffer"]


def l1_buffer(desc: Any) -> Any:
    """A writable ctypes buffer over an ``L1MemoryDesc``'s region (ValueError if invalid).

    The buffer does not own the memory: LMCache's L1 arena outlives the adapter.
    """
    ptr = getattr(desc, "ptr", None)
    size = getattr(desc, "size", None)
    if not isinstance(ptr, int) or not isinstance(size, int) or ptr <= 0 or size <= 0:
        raise ValueError(
            f"the L1 memory descriptor is invalid (ptr={ptr!r}, size={size!r}): it needs a "
            "non-zero address and a positive size; cannot create the Mooncake L2 adapter"
        )
    return (ctypes.c_ubyte * size).from_address(ptr)


def _max_capacity_gb(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(
            f"adapter_params['max_capacity_gb'] must be a non-negative number, got {value!r}"
        )
    return float(value)


class MooncakeL2Adapter(NativeConnectorL2Adapter):  # type: ignore[misc]  # untyped base
    """LMCache L2 adapter over Mooncake Store (``"type": "plugin"``).

    Args:
        config: ``adapter_params``: LMCache's ``mooncake_store`` JSON plus the options
            :class:`MooncakeConnector` takes, and ``max_capacity_gb`` (L2 capacity in GiB
            for LMCache's usage accounting and eviction; 0, the default, turns it off).
        l1_memory_desc: LMCache's ``L1MemoryDesc``.  With ``protocol: rdma`` its region
            is registered with Mooncake, and a missing or invalid one is a ValueError
            raised before any network traffic.  With tcp it is registered only when
            ``register_l1`` is true.
    """

    def __init__(self, config: Mapping[str, Any], l1_memory_desc: Any = None) -> None:
        if not isinstance(config, Mapping):
            raise ValueError(f"adapter_params must be a dict, got {type(config).__name__}")
        params = dict(config)
        capacity = _max_capacity_gb(params.pop("max_capacity_gb", 0))
        protocol = str(params.get("protocol", "tcp")).lower()
        register = params.get("register_l1")
        l1 = None
        if protocol == "rdma" or register is True:
            if l1_memory_desc is None:
                why = "RDMA protocol is enabled" if protocol == "rdma" else "register_l1 is set"
                raise ValueError(
                    f"{why}, but no L1 memory descriptor was provided; cannot create the "
                    "Mooncake L2 adapter"
                )
            l1 = l1_buffer(l1_memory_desc)
        connector = MooncakeConnector(l1=l1, **params)
        try:
            arguments = native_adapter_arguments(
                max_capacity_gb=capacity,
                type_name="mooncake_cffi",
                extra_status={
                    "master_server_addr": connector.client.config.setup_config.get(
                        "master_server_addr", ""
                    ),
                    "protocol": protocol,
                    "l1_registered": connector.client.l1_registered,
                    "key_prefix": connector.key_prefix,
                },
            )
            super().__init__(connector, **arguments)
        except BaseException:
            connector.close()
            raise
        self.connector = connector
