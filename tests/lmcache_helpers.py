"""Helpers shared by the LMCache tier's tests: adapter specs and event-fd waits.

Importable without lmcache (the CLI test runs LMCache's console script only); ``signalled``
imports LMCache's ``consume_fd`` when first called.
"""

from __future__ import annotations

import json
import select
from typing import Any

#: How long a test waits for an adapter's event fd.
WAIT_S = 10.0


#: The LMCache-only keys of LMCache's documented ``mooncake_store`` JSON.
DOCUMENTED = {
    "num_workers": 4,
    "per_op_workers": {"lookup": 1, "retrieve": 1, "store": 2},
    "preregister_l1_memory": True,
}


def spec(kind: str, params: dict[str, Any], **top: Any) -> str:
    """The ``--l2-adapter`` JSON: ``plugin`` (MooncakeL2Adapter) or ``native_plugin``
    (MooncakeConnector), with ``params`` as its adapter_params and ``top`` as further
    top-level fields; or ``mooncake_store``, LMCache's own type as its documentation writes
    it (:data:`DOCUMENTED` and ``params`` at the top level)."""
    if kind == "mooncake_store":
        return json.dumps({"type": "mooncake_store", **DOCUMENTED, **params, **top})
    cls = "MooncakeL2Adapter" if kind == "plugin" else "MooncakeConnector"
    return json.dumps(
        {
            "type": kind,
            "module_path": "mooncake_cffi.lmcache",
            "class_name": cls,
            "adapter_params": params,
            **top,
        }
    )


def readable(fd: int, timeout: float = WAIT_S) -> bool:
    """Whether ``fd`` becomes readable within ``timeout`` seconds (nothing is read)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))


def signalled(fd: int, timeout: float = WAIT_S) -> bool:
    """Whether an LMCache event fd fires within ``timeout`` seconds; consumes the event."""
    from lmcache.v1.platform import consume_fd

    if not readable(fd, timeout):
        return False
    try:
        consume_fd(fd)
    except BlockingIOError:
        pass
    return True
