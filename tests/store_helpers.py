"""Helpers of the drop-in's tests: Mooncake's own MooncakeDistributedStore next to ours."""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mooncake_cffi.cluster import LocalCluster

MIB = 1 << 20


def tag(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def setup_args(local: LocalCluster, local_buffer_size: int = 16 * MIB) -> tuple[Any, ...]:
    """Mooncake's positional setup of a client of ``local`` that contributes no memory."""
    return ("127.0.0.1", local.metadata_server, 0, local_buffer_size, "tcp", "", local.master_addr)


@contextmanager
def stores(local: LocalCluster, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """``{"theirs": Mooncake's store, "ours": the drop-in}``, both set up on ``local``."""
    import mooncake.store as ms

    import mooncake_cffi.store as ours

    made = {"theirs": ms.MooncakeDistributedStore(), "ours": ours.MooncakeDistributedStore()}
    try:
        for name, store in made.items():
            assert store.setup(*setup_args(local, **kwargs)) == 0, name
        yield made
    finally:
        for store in made.values():
            store.close()


def same(pair: dict[str, Any], call: Callable[[Any, str], Any]) -> Any:
    """``call(store, name)`` on both stores (``name`` makes its keys its own): the answers
    must be equal; returns ours."""
    answers = {name: call(store, name) for name, store in pair.items()}
    assert answers["ours"] == answers["theirs"], answers
    return answers["ours"]


class Memory:
    """A ctypes buffer and its address, kept alive with the object."""

    def __init__(self, size: int, fill: bytes = b"") -> None:
        self.buf = ctypes.create_string_buffer(fill, size)
        self.size = size
        self.ptr = ctypes.addressof(self.buf)

    def __getitem__(self, s: slice) -> bytes:
        return self.buf.raw[s]

    def clear(self) -> None:
        ctypes.memset(self.ptr, 0, self.size)
