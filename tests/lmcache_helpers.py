"""Helpers shared by the LMCache tier's tests: adapter specs, event-fd waits, and what
LMCache's own parser and memory objects make.

Importable without lmcache (the CLI test runs LMCache's console script only): the helpers
that need it (``signalled``, ``parse``, ``key``, ``memory_obj``) import it when called.
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


def parse(*specs: str) -> Any:
    """LMCache's L2 adapters config for ``--l2-adapter`` ``specs``, parsed as its server does."""
    import argparse

    from lmcache.v1.distributed.l2_adapters.config import (
        add_l2_adapters_args,
        parse_args_to_l2_adapters_config,
    )

    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    args: list[str] = []
    for s in specs:
        args += ["--l2-adapter", s]
    return parse_args_to_l2_adapters_config(parser.parse_args(args))


def key(i: int) -> Any:
    """LMCache's ObjectKey number ``i`` (model ``org/model``, rank 0)."""
    from lmcache.v1.distributed.api import ObjectKey

    return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name="org/model", kv_rank=0)


def memory_obj(arena: Any, offset: int, nbytes: int) -> Any:
    """A memory object over ``nbytes`` of the uint8 tensor ``arena`` (as LMCache's L1
    allocator hands out)."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

    meta = MemoryObjMetadata(
        shape=torch.Size([nbytes]),
        dtype=torch.uint8,
        address=offset,
        phy_size=nbytes,
        fmt=MemoryFormat.KV_2LTD,
        ref_count=1,
    )
    return TensorMemoryObj(arena[offset : offset + nbytes], meta, parent_allocator=None)
