"""Helpers of the cluster tests: a round trip through Mooncake's own Python client, and
whether a process is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MIB = 1 << 20


def put_and_get(config: dict[str, Any], key: str, value: bytes) -> bytes:
    """Store ``value`` under ``key`` with Mooncake's Python client and read it back."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup({**config, "local_buffer_size": str(16 * MIB)})
    assert rc == 0, f"MooncakeDistributedStore.setup returned {rc}"
    try:
        assert store.put(key, value) == 0
        return store.get(key)
    finally:
        store.close()


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return state[state.rfind(")") + 2] in "ZX"
