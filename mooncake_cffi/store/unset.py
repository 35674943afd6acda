"""What the drop-in ``MooncakeDistributedStore`` answers before ``setup`` and after ``close``,
and the methods of Mooncake's class it does not have.

Mooncake's own class answers some calls on an unset store (``get`` gives ``b""``,
``put_from`` -600, ``health_check`` 1) and crashes the process on the others (``is_exist``,
``put``, ``batch_get_into``...); :class:`Unset` answers all of them: -600 (INVALID_PARAMS,
Mooncake's "client is not initialized"), a list of -600s, ``b""`` or None.

:data:`UNSUPPORTED` maps every other public method of Mooncake 0.3.13.post1's class (its
``dir()`` minus what the drop-in implements; ``tests/test_store_surface.py`` checks that it
stays complete against the installed class) to the nearest call that is supported.  Those
methods are *absent*, as in an older Mooncake without them: ``hasattr`` answers False, ``dir()``
does not list them, and the AttributeError (:func:`absent`) names the nearest supported call,
so a stack's capability probe (``getattr(store, name, None)``) tells the truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..status import OP_PUT, OP_UPSERT

__all__ = ["UNSET", "UNSUPPORTED", "Unset", "absent"]

INVALID_PARAMS = -600


class Unset:
    """The calls of :class:`~.calls.StoreCalls`, answered as by a store not set up."""

    staged = False
    copies = False

    def close(self) -> None:
        return None

    def one(self, op: int, key: Any, flags: int = 0, buf: Any = None, size: int = 0) -> int:
        return INVALID_PARAMS

    def get(self, key: Any) -> bytes:
        return b""

    def get_into(self, key: Any, ptr: int, size: int) -> int:
        return INVALID_PARAMS

    def put_from(self, op: int, key: Any, ptr: int, size: int, config: Any) -> int:
        return INVALID_PARAMS

    def put(self, op: int, key: Any, value: Any, config: Any) -> int:
        return INVALID_PARAMS

    def keys(self, op: int, keys: list[Any], flags: int = 0) -> list[int]:
        return [INVALID_PARAMS] * len(keys)

    def exists(self, keys: list[Any]) -> list[int]:
        return [INVALID_PARAMS] * len(keys)

    def exists_one(self, key: Any) -> int:
        return INVALID_PARAMS

    def addresses(
        self, op: int, keys: list[Any], addrs: Sequence[int], sizes: Sequence[int], config: Any
    ) -> list[int]:
        return [INVALID_PARAMS] * len(keys)

    def address_parts(
        self, op: int, keys: list[Any], all_addrs: Any, all_sizes: Any, config: Any
    ) -> list[int]:
        # Mooncake's batch_put_from_multi_buffers answers an unset store with no results.
        return [] if op in (OP_PUT, OP_UPSERT) else [INVALID_PARAMS] * len(keys)

    def put_values(self, op: int, keys: list[Any], values: Sequence[Any], config: Any) -> int:
        return INVALID_PARAMS

    def put_parts(self, op: int, key: Any, parts: Sequence[Any], config: Any) -> int:
        return INVALID_PARAMS

    def put_parts_many(
        self, op: int, keys: list[Any], parts: Sequence[Sequence[Any]], config: Any
    ) -> list[int]:
        return [INVALID_PARAMS] * len(keys)

    def get_values(self, keys: list[Any]) -> list[bytes]:
        return [b""]  # Mooncake's answer, whatever the keys

    def get_handles(self, keys: list[Any]) -> list[Any]:
        return [None] * len(keys)

    def register(self, ptr: int, size: int) -> int:
        return INVALID_PARAMS

    def unregister(self, ptr: int) -> int:
        return INVALID_PARAMS

    def get_into_ranges(
        self, addrs: Any, all_keys: Sequence[Sequence[Any]], dst: Any, src: Any, sizes: Any
    ) -> list[list[list[int]]]:
        from .repair import ranges_failed

        return ranges_failed(len(addrs), all_keys, dst, INVALID_PARAMS)


UNSET = Unset()

_SETUP_MEMORY = "setup() with global_segment_size (a client contributes its memory at setup)"
_TENSOR_WRITE = "put_tensor / batch_put_tensor (one key per shard)"
_TENSOR_READ = "get_tensor / batch_get_tensor (get_tensor_with_tp reads key_tp_<rank> shards)"

#: Mooncake's public methods the drop-in does not implement -> the nearest supported call.
UNSUPPORTED: dict[str, str] = {
    "mount_segment": _SETUP_MEMORY,
    "unmount_segment": _SETUP_MEMORY,
    "allocate_and_mount_segment": _SETUP_MEMORY,
    "unmount_and_free_segment": _SETUP_MEMORY,
    "unmount_local_disk_segment": _SETUP_MEMORY,
    "get_offload_rpc_read_count": "store.client.op_stats() (per-operation counters)",
    "batch_replica_clear": "batch_remove()",
    "create_copy_task": "put / batch_put_from with config.replica_num or preferred_segments",
    "create_move_task": "put / batch_put_from with config.preferred_segments",
    "query_task": "mooncake_cffi.admin.AdminClient(master_admin_url).query_key(key)",
    "put_tensor_with_tp": _TENSOR_WRITE,
    "batch_put_tensor_with_tp": _TENSOR_WRITE,
    "pub_tensor_with_tp": "pub_tensor (one key per shard)",
    "batch_pub_tensor_with_tp": "batch_pub_tensor (one key per shard)",
    "put_tensor_with_tp_from": "put_tensor_from (one key per shard)",
    "batch_put_tensor_with_tp_from": "batch_put_tensor_from (one key per shard)",
    "get_tensor_with_parallelism": _TENSOR_READ,
    "batch_get_tensor_with_parallelism": _TENSOR_READ,
    "get_tensor_with_parallelism_into": "get_tensor_into",
    "batch_get_tensor_with_parallelism_into": "batch_get_tensor_into",
    "put_tensor_with_parallelism": _TENSOR_WRITE,
    "batch_put_tensor_with_parallelism": _TENSOR_WRITE,
    "put_tensor_with_parallelism_from": "put_tensor_from",
    "batch_put_tensor_with_parallelism_from": "batch_put_tensor_from",
    "upsert_tensor_with_parallelism": "upsert_tensor",
    "batch_upsert_tensor_with_parallelism": "batch_upsert_tensor",
    "upsert_tensor_with_parallelism_from": "upsert_tensor_from",
    "batch_upsert_tensor_with_parallelism_from": "batch_upsert_tensor_from",
    "get_tensor_into_cuda": "get_tensor_into, then tensor.to('cuda')",
    "batch_get_tensor_into_cuda": "batch_get_tensor_into, then tensor.to('cuda')",
    "save_tensor_to_safetensor": "get_tensor, then safetensors.torch.save_file",
    "load_tensor_from_safetensor": "safetensors.torch.load_file, then put_tensor",
}


def absent(owner: str, name: str) -> AttributeError:
    """The AttributeError of a missing attribute ``name`` of ``owner`` (an instance or the
    class); for a method of Mooncake's class that the drop-in does not have, it says so and
    names the nearest supported call."""
    nearest = UNSUPPORTED.get(name)
    if nearest is None:
        return AttributeError(f"{owner} has no attribute {name!r}")
    return AttributeError(
        f"{owner} has no attribute {name!r}: Mooncake's MooncakeDistributedStore.{name}() is "
        f"not supported by mooncake_cffi.store; the nearest supported call: {nearest}"
    )
