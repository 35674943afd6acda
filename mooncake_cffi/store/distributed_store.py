"""A drop-in for Mooncake's own client class: change one import.

    from mooncake_cffi.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

:class:`MooncakeDistributedStore` behaves as the class of that name in Mooncake
0.3.13.post1's ``mooncake.store`` does, method for method: the same names, parameters and
defaults, the same answers (0 or Mooncake's negative ``ErrorCode``, lists from the batch
calls, ``b""`` for a value that cannot be read, :class:`BufferHandle` objects from
``get_buffer``), over a :class:`mooncake_cffi.Client` (``store.client``: stats, metrics,
deadlines, ``AsyncClient(store.client)``).  Calls run in one shim call each
(:mod:`.calls`), refused batches are answered per key as Mooncake answers them
(:mod:`.repair`), setup parses both of Mooncake's forms (:mod:`.setup_args`), the
tensor calls use Mooncake's tensor format (:mod:`.tensors`), and what Mooncake answers
before setup and after close, and the methods not supported, are in :mod:`.unset`.
"Migrating from Mooncake's client" in the documentation (``docs/guide/migrating.md``)
says what differs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .._capi.shm import shm_alloc
from ..admin import AdminClient, admin_url_for_master
from ..client import Client
from ..errors import MooncakeError
from ..replica import ObjectDataType, ReplicateConfig, SoftPinAction
from ..sizes import parse_size
from ..status import FLAG_FORCE, OP_GET, OP_PUT, OP_REMOVE, OP_SIZE, OP_UPSERT
from . import replicas, sessions, setup_args
from . import tensors as tensor_calls
from .buffer_handles import BufferHandle
from .calls import StoreCalls, code_of
from .fail_open import DEADLINE, PER_MIB, FailOpen
from .replicas import ReplicaDescriptor
from .unset import UNSET, Unset, absent

__all__ = [
    "BufferHandle",
    "MooncakeDistributedStore",
    "ObjectDataType",
    "ReplicateConfig",
    "SoftPinAction",
]

#: The ``config`` default of the writes: Mooncake's default ReplicateConfig (a write given
#: it takes the client's default, which is Mooncake's).
DEFAULT_CONFIG = ReplicateConfig()
_D = DEFAULT_CONFIG

logger = logging.getLogger("mooncake_cffi.store")


def _keys(keys: Any) -> list[Any]:
    """A sequence of keys as a list (a lone str is refused, as Mooncake's binding does)."""
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a list of str, not a single str")
    return list(keys)


class _StoreType(type):
    """The class's type: a missing class attribute that Mooncake's class has raises the
    AttributeError naming the nearest supported call (as the instances' do)."""

    def __getattr__(cls, name: str) -> Any:
        raise absent(f"type object {cls.__name__!r}", name)


class MooncakeDistributedStore(metaclass=_StoreType):
    """Mooncake's ``MooncakeDistributedStore`` over :class:`mooncake_cffi.Client`.

    Create it, call :meth:`setup`, use it, :meth:`close` it.  ``client`` is the underlying
    Client (None until setup and after close).  Thread-safe.  The methods of Mooncake's class
    that it does not support are absent (``hasattr`` False; the AttributeError names the
    nearest supported call: :data:`.unset.UNSUPPORTED`).
    """

    __slots__ = ("client", "_x", "_admin", "_dummy", "__weakref__")

    def __getattr__(self, name: str) -> Any:
        # Called only for names that are missing.
        raise absent(f"{type(self).__name__!r} object", name)

    def __init__(self) -> None:
        self.client: Client | None = None
        self._x: StoreCalls | FailOpen | Unset = UNSET
        self._admin: AdminClient | None = None
        self._dummy = False  # set up by setup_dummy (a client of a client service)

    # ------------------------------------------------------------ lifecycle

    def setup(self, *args: Any, **kwargs: Any) -> int:
        # The docstring and signature are Mooncake's (pybind11's overload doc, the
        # positional form): see setup_args.SETUP_DOC / SETUP_SIGNATURE, set below the class.
        form, config, engine = setup_args.from_arguments(args, kwargs)
        if engine is not None:
            raise NotImplementedError(
                "setup(engine=...): sharing a TransferEngine is not supported by "
                "mooncake_cffi.store: the engine lives inside mooncake.engine's pybind11 object, "
                "which the drop-in (over a C ABI) cannot reach safely; call setup without engine "
                "(the client makes its own TransferEngine, with its own transfer ports)"
            )
        rc = setup_args.precheck(form, config)
        if rc:
            return rc  # refused before connecting: a store already set up stays as it was
        merged = {**setup_args.env_options(), **config}
        admin_url = merged.pop("admin_url", None)
        fail_open = setup_args.fail_open_option(merged.pop("fail_open", True))
        cfg, options = setup_args.build(merged)
        # Failing open, calls on keys alone stay on the calling thread (bounded by
        # Mooncake's RPC wait, which the client's deadline shortens); data calls take it.
        keys_on_rpc_wait = fail_open and options.get("op_timeout") is None
        if keys_on_rpc_wait:
            options["op_timeout"] = DEADLINE
        self.close()  # the new setup is valid: the old client goes before the new connects
        try:
            client = Client(cfg, register_l1=False, **options)
        except MooncakeError as exc:
            # Mooncake's class answers a code only; the stack's user also needs to know why.
            logger.error("MooncakeDistributedStore.setup failed: %s", exc)
            return setup_args.setup_failure(exc.code)
        self.client = client
        local_buffer = cfg.setup_config.get("local_buffer_size")
        copies = local_buffer is None or parse_size(local_buffer) != 0
        calls = StoreCalls(
            client,
            staged=cfg.protocol != "tcp",
            copies=copies,
            keys_on_rpc_wait=keys_on_rpc_wait,
            per_mib=PER_MIB if keys_on_rpc_wait else None,
            land=fail_open,
        )
        self._x = FailOpen(calls) if fail_open else calls
        master = str(cfg.setup_config.get("master_server_addr", ""))
        if admin_url is None and master and "://" not in master:
            admin_url = admin_url_for_master(master)
        self._admin = AdminClient(str(admin_url)) if admin_url else None
        return 0

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Mooncake's ``setup_dummy``: become a client of the standalone Mooncake client service
        (``mooncake_client``) at ``server_address`` (its RPC ``host:port``): Mooncake's own
        DummyClient, which forwards every call to that process and shares memory with it.
        0, or -1 when the service cannot be reached.  Buffers handed by address must be
        whole segments from :class:`MooncakeHostMemAllocator` (or :meth:`alloc_from_mem_pool`)
        registered with :meth:`register_buffer`, as with Mooncake's."""
        for name, value in (("mem_pool_size", mem_pool_size),
                            ("local_buffer_size", local_buffer_size)):  # fmt: skip
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TypeError(f"setup_dummy(): {name} must be a non-negative int, not {value!r}")
        if not isinstance(server_address, str):
            raise TypeError(f"setup_dummy(): server_address must be str, not {server_address!r}")
        self.close()
        stub = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                "protocol": "tcp", "global_segment_size": "0"}  # fmt: skip
        try:
            client = Client(
                stub, register_l1=False, dummy=(mem_pool_size, local_buffer_size, server_address)
            )
        except (MooncakeError, ValueError):
            return -1  # Mooncake's answer when it cannot connect to the service
        self.client = client
        # Mooncake moves a dummy client's bytes only from and to the shared segments
        # registered with the service: the bytes calls stage through one of those.
        self._x = StoreCalls(client, staged=True, copies=True, shared=True)
        self._dummy = True
        return 0

    def alloc_from_mem_pool(self, size: int, /) -> int:
        """Mooncake's ``alloc_from_mem_pool``: with a dummy client (:meth:`setup_dummy`), the
        address of a new shared segment of ``size`` bytes (as
        :meth:`MooncakeHostMemAllocator.alloc`; 0 if none); otherwise 0, as Mooncake's
        RealClient answers."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise TypeError(f"alloc_from_mem_pool(): size must be a non-negative int, not {size!r}")
        if self.client is None or not self._dummy:
            return 0
        try:
            return shm_alloc(size)
        except MooncakeError:
            return 0

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int, /) -> int:
        """Mooncake's init_all: a setup with its fixed ``localhost:12345`` and the etcd at
        ``127.0.0.1:2379`` (-600 once set up, as Mooncake's)."""
        if self.client is not None:
            return -600
        return self.setup(
            "localhost:12345", "127.0.0.1:2379", mount_segment_size, 1 << 30, protocol,
            device_name, "127.0.0.1:50051",
        )  # fmt: skip

    def close(self) -> int:
        """Tear the client down (0; again: 0).  BufferHandles still alive stay valid: the
        client closes once the last is dropped."""
        calls, self.client, self._x, self._admin = self._x, None, UNSET, None
        self._dummy = False
        calls.close()  # once the BufferHandles of the store are dropped, if any are alive
        return 0

    def get_hostname(self) -> str:
        """The ``host:port`` this client registered as ("" before setup)."""
        try:
            return self.client.hostname if self.client is not None else ""
        except MooncakeError:
            return ""

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 master unreachable (Mooncake's ping loop)."""
        try:
            return self.client.health_check() if self.client is not None else 1
        except MooncakeError:
            return 1

    # ------------------------------------------------------------ keys

    def is_exist(self, key: str, /) -> int:
        """1 if ``key`` exists, 0 if not, or a negative code."""
        return self._x.exists_one(key)

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        """1 / 0 / a negative code per key."""
        return self._x.exists(keys if type(keys) is list else _keys(keys))

    def get_size(self, key: str, /) -> int:
        """The size of ``key``'s value in bytes, or a negative code (-704 missing)."""
        return self._x.one(OP_SIZE, key)

    def remove(self, key: str, force: bool = False) -> int:
        """0 removed, -704 missing, -706 under a read lease (``force`` removes anyway)."""
        return self._x.one(OP_REMOVE, key, FLAG_FORCE if force else 0)

    def batch_remove(self, keys: list[str], force: bool = False) -> list[int]:
        """Per-key codes of removing ``keys``."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.keys(OP_REMOVE, ks, FLAG_FORCE if force else 0)

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """How many keys the ECMAScript ``regex_pattern`` matched and were removed, or a code."""
        return self._count(lambda c: c.remove_by_regex(regex_pattern, force))

    def remove_all(self, force: bool = False) -> int:
        """How many keys of the whole cluster were removed, or a code."""
        return self._count(lambda c: c.remove_all(force))

    def _count(self, call: Any) -> int:
        if self.client is None:
            return -600
        try:
            count: int = call(self.client)
        except MooncakeError as exc:
            return code_of(exc.code)
        return count

    # ------------------------------------------------------------ bytes values

    def get(self, key: str, /) -> bytes:
        """The value of ``key``, or ``b""`` when it cannot be read."""
        return self._x.get(key)

    def get_batch(self, keys: list[str], /) -> list[bytes]:
        """The values of ``keys`` (``b""`` for any that cannot be read)."""
        return self._x.get_values(keys if type(keys) is list else _keys(keys))

    def get_buffer(self, key: str, /) -> BufferHandle | None:
        """``key``'s value in Mooncake's local buffer as a :class:`BufferHandle`, or None."""
        handle: BufferHandle | None = self._x.get_handles([key])[0]
        return handle

    def batch_get_buffer(self, keys: list[str], /) -> list[BufferHandle | None]:
        """A :class:`BufferHandle` per key (None where unread), sharing one hold."""
        return self._x.get_handles(keys if type(keys) is list else _keys(keys))

    def put(self, key: str, value: Any, config: ReplicateConfig = _D) -> int:
        """Store a bytes-like ``value`` (an existing key keeps its value); 0 or a code."""
        return self._x.put(OP_PUT, key, value, None if config is _D else config)

    def upsert(self, key: str, value: Any, config: ReplicateConfig = _D) -> int:
        """Store ``value``, replacing any existing one; 0 or a code."""
        return self._x.put(OP_UPSERT, key, value, None if config is _D else config)

    def put_batch(self, keys: list[str], values: list[Any], config: ReplicateConfig = _D) -> int:
        """Store values under keys; 0, or the code of the first key that failed."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.put_values(OP_PUT, ks, values, None if config is _D else config)

    def upsert_batch(self, keys: list[str], values: list[Any], config: ReplicateConfig = _D) -> int:
        """As :meth:`put_batch`, replacing existing values."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.put_values(OP_UPSERT, ks, values, None if config is _D else config)

    def put_parts(self, key: str, *args: Any, config: ReplicateConfig = _D) -> int:
        """Store the bytes-like ``args`` one after another as one value."""
        return self._x.put_parts(OP_PUT, key, args, None if config is _D else config)

    def upsert_parts(self, key: str, *args: Any, config: ReplicateConfig = _D) -> int:
        """As :meth:`put_parts`, replacing an existing value."""
        return self._x.put_parts(OP_UPSERT, key, args, None if config is _D else config)

    # ------------------------------------------------------------ memory at addresses

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read ``key``'s value into ``size`` bytes at ``buffer_ptr``: bytes read, or a code
        (-704 missing, -600 a buffer too small)."""
        return self._x.get_into(key, buffer_ptr, size)

    def batch_get_into(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]
    ) -> list[int]:
        """Per key: bytes read into its buffer, or a code."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.addresses(OP_GET, ks, buffer_ptrs, sizes, None)

    def put_from(self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig = _D) -> int:
        """Store ``size`` bytes at ``buffer_ptr`` under ``key``; 0 or a code."""
        return self._x.put_from(OP_PUT, key, buffer_ptr, size, None if config is _D else config)

    def upsert_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig = _D
    ) -> int:
        """As :meth:`put_from`, replacing an existing value."""
        return self._x.put_from(OP_UPSERT, key, buffer_ptr, size, None if config is _D else config)

    def batch_put_from(
        self,
        keys: list[str],
        buffer_ptrs: list[int],
        sizes: list[int],
        config: ReplicateConfig = _D,
    ) -> list[int]:
        """Per-key codes of storing each buffer under its key."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.addresses(OP_PUT, ks, buffer_ptrs, sizes, None if config is _D else config)

    def batch_upsert_from(
        self,
        keys: list[str],
        buffer_ptrs: list[int],
        sizes: list[int],
        config: ReplicateConfig = _D,
    ) -> list[int]:
        """As :meth:`batch_put_from`, replacing existing values."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.addresses(
            OP_UPSERT, ks, buffer_ptrs, sizes, None if config is _D else config
        )

    def batch_put_from_multi_buffers(
        self,
        keys: list[str],
        all_buffer_ptrs: list[list[int]],
        all_sizes: list[list[int]],
        config: ReplicateConfig = _D,
    ) -> list[int]:
        """Store key i's value from the buffers ``all_buffer_ptrs[i]``, one after another."""
        ks = keys if type(keys) is list else _keys(keys)
        cfg = None if config is _D else config
        return self._x.address_parts(OP_PUT, ks, all_buffer_ptrs, all_sizes, cfg)

    def batch_get_into_multi_buffers(
        self,
        keys: list[str],
        all_buffer_ptrs: list[list[int]],
        all_sizes: list[list[int]],
        prefer_alloc_in_same_node: bool = False,
    ) -> list[int]:
        """Read key i's value across the buffers ``all_buffer_ptrs[i]``; bytes read or a
        code (their sizes need not add up to the value's, unlike Mooncake's own)."""
        ks = keys if type(keys) is list else _keys(keys)
        return self._x.address_parts(OP_GET, ks, all_buffer_ptrs, all_sizes, None)

    def put_from_with_metadata(
        self,
        key: str,
        buffer_ptr: int,
        metadata_buffer_ptr: int,
        size: int,
        metadata_size: int,
        config: ReplicateConfig = _D,
    ) -> int:
        """Store ``metadata_size`` bytes at ``metadata_buffer_ptr`` then ``size`` bytes at
        ``buffer_ptr`` as one value; 0 or a code."""
        if not size:
            return 0
        ptrs, sizes = [[metadata_buffer_ptr, buffer_ptr]], [[metadata_size, size]]
        if not metadata_size:
            ptrs, sizes = [[buffer_ptr]], [[size]]
        cfg = None if config is _D else config
        out = self._x.address_parts(OP_PUT, [key], ptrs, sizes, cfg)
        return out[0] if out else -600

    def get_into_ranges(
        self,
        buffer_ptrs: list[int],
        all_keys: list[list[str]],
        all_dst_offsets: list[list[list[int]]],
        all_src_offsets: list[list[list[int]]],
        all_sizes: list[list[list[int]]],
    ) -> list[list[list[int]]]:
        """Byte ranges of values into registered buffers: for buffer b, key j of it, range
        k, ``all_sizes[b][j][k]`` bytes from offset ``all_src_offsets[b][j][k]`` of the
        value to ``all_dst_offsets[b][j][k]`` of the buffer; bytes read or a code each."""
        return self._x.get_into_ranges(
            buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes
        )

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register ``size`` bytes at ``buffer_ptr`` with Mooncake (several may be); 0 or -600."""
        return self._x.register(buffer_ptr, size)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Unregister the buffer registered at ``buffer_ptr``; 0 or -600."""
        return self._x.unregister(buffer_ptr)

    # ------------------------------------------------------------ sessions (Mooncake 0.3.13)

    def _native(self) -> Any:
        """The client's native side, or None before setup and after close."""
        x = self._x
        return None if isinstance(x, Unset) else x.native

    def batch_put_session_start(
        self, keys: list[str], sizes: list[int], config: ReplicateConfig = _D
    ) -> list[int]:
        """Start a put session: reserve each key's ``sizes[i]`` bytes without transfer; 0 or
        Mooncake's code per key (-705 a key that exists, -200 no space)."""
        native = self._native()
        if native is None:
            return []
        return sessions.put_start(native, keys, sizes, None if config is _D else config)

    def batch_put_from_multi_buffer_ranges(
        self,
        keys: list[str],
        all_buffer_ptrs: list[list[int]],
        all_sizes: list[list[int]],
        all_dst_offsets: list[list[int]],
    ) -> list[int]:
        """Write key i's ranges (``all_sizes[i][j]`` bytes at ``all_buffer_ptrs[i][j]`` to
        offset ``all_dst_offsets[i][j]`` of its reserved object), in any order; bytes
        written per key, or a code (-600: no session, a range past the size)."""
        native = self._native()
        if native is None:
            return []
        return sessions.ranges(
            native, sessions.PUT_RANGES, keys, all_buffer_ptrs, all_sizes, all_dst_offsets
        )

    def batch_put_session_end(self, keys: list[str]) -> list[int]:
        """Complete a put session: the objects become readable; 0 or a code per key."""
        native = self._native()
        return [] if native is None else sessions.keys_call(native, sessions.PUT_END, keys)

    def batch_put_session_revoke(self, keys: list[str]) -> list[int]:
        """Revoke an incomplete put session: nothing of it stays; 0 or a code per key."""
        native = self._native()
        return [] if native is None else sessions.keys_call(native, sessions.PUT_REVOKE, keys)

    def batch_get_session_start(self, keys: list[str]) -> list[int]:
        """Start a get session: query each key's replicas once (a read lease); 0 or a code."""
        native = self._native()
        return [] if native is None else sessions.keys_call(native, sessions.GET_START, keys)

    def batch_get_into_multi_buffer_ranges(
        self,
        keys: list[str],
        all_buffer_ptrs: list[list[int]],
        all_sizes: list[list[int]],
        all_src_offsets: list[list[int]],
    ) -> list[int]:
        """Read key i's ranges (``all_sizes[i][j]`` bytes from offset
        ``all_src_offsets[i][j]`` of its object to ``all_buffer_ptrs[i][j]``) of a get
        session; bytes read per key, or a code."""
        native = self._native()
        if native is None:
            return []
        return sessions.ranges(
            native, sessions.GET_RANGES, keys, all_buffer_ptrs, all_sizes, all_src_offsets
        )

    def batch_get_session_end(self, keys: list[str]) -> int:
        """End a get session, dropping its queried replicas: 0 (-1 before setup)."""
        native = self._native()
        if native is None:
            return -1
        return sessions.keys_call(native, sessions.GET_END, keys)[0]

    # ------------------------------------------------------------ replica descriptors

    def get_replica_desc(self, key: str) -> list[ReplicaDescriptor]:
        """The replicas of ``key`` as :class:`ReplicaDescriptor` objects ([] when missing,
        not ready, or before setup), asked of the master as Mooncake's class asks it
        (:mod:`.replicas`)."""
        client = self.client
        if client is None or not isinstance(key, str):
            return []
        found = replicas.from_master(client.batches.runner, [key])
        if found is not None:
            return found[0] or []
        return [] if self._admin is None else replicas.replica_desc(self._admin, key)

    def batch_get_replica_desc(self, keys: list[str]) -> dict[str, list[ReplicaDescriptor]]:
        """Key -> its replicas, for the keys the master answered for (others left out)."""
        ks = _keys(keys)
        client = self.client
        if client is None or not ks:
            return {}
        if not all(isinstance(k, str) for k in ks):
            raise TypeError("keys must be a list of str")
        unique = list(dict.fromkeys(ks))
        found = replicas.from_master(client.batches.runner, unique)
        if found is not None:
            return {k: v for k, v in zip(unique, found) if v is not None}
        return {} if self._admin is None else replicas.batch_replica_desc(self._admin, unique)

    # ------------------------------------------------------------ tensors (torch)

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Store a torch tensor in Mooncake's tensor format; 0 or a code."""
        return tensor_calls.put_tensors(self._x, OP_PUT, [key], [tensor], None)[0]

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        """As :meth:`put_tensor`, replacing an existing value."""
        return tensor_calls.put_tensors(self._x, OP_UPSERT, [key], [tensor], None)[0]

    def pub_tensor(self, key: str, tensor: Any, config: ReplicateConfig = _D) -> int:
        """:meth:`put_tensor` with replica options (preferred segments, if any, one per replica)."""
        return self._pub(OP_PUT, [key], [tensor], config)[0]

    def upsert_pub_tensor(self, key: str, tensor: Any, config: ReplicateConfig = _D) -> int:
        """:meth:`upsert_tensor` with replica options."""
        return self._pub(OP_UPSERT, [key], [tensor], config)[0]

    def batch_put_tensor(self, keys: list[str], tensors_list: list[Any]) -> list[int]:
        """Per-key codes of storing tensors."""
        return tensor_calls.put_tensors(self._x, OP_PUT, _keys(keys), tensors_list, None)

    def batch_upsert_tensor(self, keys: list[str], tensors_list: list[Any]) -> list[int]:
        """As :meth:`batch_put_tensor`, replacing existing values."""
        return tensor_calls.put_tensors(self._x, OP_UPSERT, _keys(keys), tensors_list, None)

    def batch_pub_tensor(
        self, keys: list[str], tensors_list: list[Any], config: ReplicateConfig = _D
    ) -> list[int]:
        """:meth:`batch_put_tensor` with replica options."""
        return self._pub(OP_PUT, _keys(keys), tensors_list, config)

    def batch_upsert_pub_tensor(
        self, keys: list[str], tensors_list: list[Any], config: ReplicateConfig = _D
    ) -> list[int]:
        """:meth:`batch_upsert_tensor` with replica options."""
        return self._pub(OP_UPSERT, _keys(keys), tensors_list, config)

    def _pub(self, op: int, keys: list[Any], tensors: Sequence[Any], config: Any) -> list[int]:
        if tensor_calls.replica_config_refused(config):
            return [-600] * len(keys)
        return tensor_calls.put_tensors(
            self._x, op, keys, tensors, None if config is _D else config
        )

    def get_tensor(self, key: str) -> Any:
        """The tensor stored under ``key``, or None."""
        return tensor_calls.get_tensors(self._x, [key])[0]

    def batch_get_tensor(self, keys: list[str]) -> list[Any]:
        """The tensors stored under ``keys`` (None where none)."""
        return tensor_calls.get_tensors(self._x, _keys(keys))

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        """Read ``key``'s value into the buffer and return a tensor over it, or None."""
        n = self._x.get_into(key, buffer_ptr, size) if buffer_ptr else -600
        return tensor_calls.tensor_at(buffer_ptr, n) if n >= 0 else None

    def batch_get_tensor_into(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]
    ) -> list[Any]:
        """:meth:`get_tensor_into` per key (a list of -600 for buffers that do not pair up)."""
        return tensor_calls.get_tensors_into(self._x, _keys(keys), buffer_ptrs, sizes)

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Store a buffer that already holds a tensor in Mooncake's format (checked)."""
        return tensor_calls.put_tensor_from(self._x, OP_PUT, key, buffer_ptr, size)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """As :meth:`put_tensor_from`, replacing an existing value."""
        return tensor_calls.put_tensor_from(self._x, OP_UPSERT, key, buffer_ptr, size)

    def batch_put_tensor_from(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]
    ) -> list[int]:
        """:meth:`put_tensor_from` per key (any bad buffer fails them all, as Mooncake's)."""
        return tensor_calls.put_tensors_from(self._x, OP_PUT, _keys(keys), buffer_ptrs, sizes)

    def batch_upsert_tensor_from(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]
    ) -> list[int]:
        """As :meth:`batch_put_tensor_from`, replacing existing values."""
        return tensor_calls.put_tensors_from(self._x, OP_UPSERT, _keys(keys), buffer_ptrs, sizes)

    def get_tensor_with_tp(
        self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> Any:
        """The tensor, or with ``tp_size`` > 1 the shard stored as ``{key}_tp_{tp_rank}``."""
        return self.get_tensor(key if tp_size <= 1 else f"{key}_tp_{tp_rank}")

    def batch_get_tensor_with_tp(
        self, base_keys: list[str], tp_rank: int = 0, tp_size: int = 1
    ) -> list[Any]:
        """:meth:`get_tensor_with_tp` per key."""
        keys = _keys(base_keys)
        return self.batch_get_tensor(keys if tp_size <= 1 else [f"{k}_tp_{tp_rank}" for k in keys])

    def get_tensor_with_tp_into(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> Any:
        """:meth:`get_tensor_into` of the shard ``{key}_tp_{tp_rank}`` (the key itself when
        ``tp_size`` <= 1)."""
        return self.get_tensor_into(
            key if tp_size <= 1 else f"{key}_tp_{tp_rank}", buffer_ptr, size
        )

    def batch_get_tensor_with_tp_into(
        self,
        base_keys: list[str],
        buffer_ptrs: list[int],
        sizes: list[int],
        tp_rank: int = 0,
        tp_size: int = 1,
    ) -> list[Any]:
        """:meth:`batch_get_tensor_into` of the shards ``{key}_tp_{tp_rank}``."""
        keys = _keys(base_keys)
        keys = keys if tp_size <= 1 else [f"{k}_tp_{tp_rank}" for k in keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)


MooncakeDistributedStore.setup.__doc__ = setup_args.SETUP_DOC
MooncakeDistributedStore.setup.__signature__ = setup_args.SETUP_SIGNATURE  # type: ignore[attr-defined]
