"""mooncake-cffi: a Python client for Mooncake Store over a small C ABI shim.

Quick use::

    from mooncake_cffi import Client

    with Client({"local_hostname": "127.0.0.1",
                 "metadata_server": "http://127.0.0.1:8080/metadata",
                 "master_server_addr": "127.0.0.1:50051",
                 "protocol": "tcp", "global_segment_size": "0"}) as client:
        client.put("greeting", b"hello")
        assert client.get("greeting") == b"hello"

The configuration is the JSON/dict LMCache's ``mooncake_store`` L2 adapter takes
(``num_workers``, ``per_op_workers`` and Mooncake's own setup keys).
"""

import os as _os
from typing import Any

if not _os.path.exists(_os.path.join(_os.path.dirname(__file__), "_version.py")):
    # This is the source tree (a checkout's root on sys.path, e.g. `python -c` run there),
    # which has no built shim: every submodule comes from the installed package instead.
    from ._source_tree import installed_package_dir

    __path__ = [installed_package_dir(__file__)]
from ._capi.binding import ABI_VERSION, shim_abi_version, shim_version
from ._version import __version__
from .client import EXISTED, LANES, OPS, Client, Completion, set_log_level
from .config import StoreConfig, UnknownConfigKeyWarning, parse_adapter_specs
from .errors import (
    ClosedError,
    ConcurrentWriteError,
    ForkedError,
    HasLeaseError,
    IntegrityError,
    InvalidArgumentError,
    KeyNotFoundError,
    L1Error,
    MooncakeError,
    MooncakeTimeoutError,
    NoSpaceError,
    QueueFullError,
    TransportError,
)
from .outcome import KeyOutcome, PendingWrite, WriteState
from .replica import ObjectDataType, ReplicateConfig, SoftPinAction
from .retry import RetryPolicy
from .status import name as error_name
from .wheel import UnsupportedWheelError, mooncake_version

__all__ = [
    "__version__",
    "ABI_VERSION",
    "shim_abi_version",
    "shim_version",
    "AsyncClient",
    "LocalCluster",
    "Client",
    "Completion",
    "EXISTED",
    "LANES",
    "OPS",
    "ObjectDataType",
    "ReplicateConfig",
    "RetryPolicy",
    "SoftPinAction",
    "StoreConfig",
    "UnknownConfigKeyWarning",
    "parse_adapter_specs",
    "set_log_level",
    "error_name",
    "MooncakeError",
    "ClosedError",
    "ConcurrentWriteError",
    "ForkedError",
    "HasLeaseError",
    "IntegrityError",
    "InvalidArgumentError",
    "KeyNotFoundError",
    "L1Error",
    "MooncakeTimeoutError",
    "NoSpaceError",
    "QueueFullError",
    "TransportError",
    "KeyOutcome",
    "PendingWrite",
    "WriteState",
    "UnsupportedWheelError",
    "mooncake_version",
]


def __getattr__(name: str) -> Any:
    # AsyncClient pulls in asyncio (~75 ms), LocalCluster subprocess and http: import them
    # only when asked for.
    if name == "AsyncClient":
        from .aio import AsyncClient

        return AsyncClient
    if name == "LocalCluster":
        from .cluster import LocalCluster

        return LocalCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
