"""The public synchronous :class:`Client` over the shim.

A ``Client`` owns one Mooncake client set up from a :class:`StoreConfig` and its
lanes (lookup / retrieve / store / delete, with a shared-pool fallback).  Blocking
calls release the GIL, so threads get real parallelism; the asynchronous
building blocks (``submit`` / ``drain`` / ``fileno``) are what
:class:`mooncake_cffi.AsyncClient` uses.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _binding
from ._binding import ffi, lib
from .config import StoreConfig
from .errors import (
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_NOT_FOUND,
    ClosedError,
    InvalidArgumentError,
    check,
    error_for,
)

__all__ = ["Client", "Completion", "EXISTED", "LANES", "set_log_level"]

#: Per-key status of a put with ``skip_existing=True`` for a key that already
#: held a value (Mooncake keeps the first value written).
EXISTED = 1

#: Lane names, in the shim's order.
LANES = ("lookup", "retrieve", "store", "delete", "shared")

# Operation and flag values come from mcs.h (through cffi).
_OP_EXISTS, _OP_GET, _OP_PUT = lib.MCS_OP_EXISTS, lib.MCS_OP_GET, lib.MCS_OP_PUT
_OP_UPSERT, _OP_REMOVE, _OP_SIZE = lib.MCS_OP_UPSERT, lib.MCS_OP_REMOVE, lib.MCS_OP_SIZE
_OP_NAMES = {
    _OP_EXISTS: "exists",
    _OP_GET: "get",
    _OP_PUT: "put",
    _OP_UPSERT: "upsert",
    _OP_REMOVE: "remove",
    _OP_SIZE: "size",
}
_OP_CODES = {name: code for code, name in _OP_NAMES.items()}
_FLAG_FORCE = lib.MCS_FLAG_FORCE
_FLAG_SKIP_EXISTING = lib.MCS_FLAG_SKIP_EXISTING
_NULL = ffi.NULL
_E_INVALID_ARG = lib.MCS_E_INVALID_ARG
_E_CLOSED = lib.MCS_E_CLOSED
_E_TIMEOUT = lib.MCS_E_TIMEOUT
#: Shim codes start here; anything above is 0 or one of Mooncake's ErrorCodes.
_SHIM_CODES = -10000
_SCRATCH_BYTES = 256 * 1024


def set_log_level(level: int) -> None:
    """Set Mooncake's log threshold, process-wide: 0 INFO, 1 WARNING, 2 ERROR, 3 silent.

    Mooncake is silent (3) by default.
    """
    _binding.ensure_mooncake_loaded()
    check(lib.mcs_set_log_level(int(level)))


# ----------------------------------------------------------------- helpers


def _encode_key(key: Any, index: int) -> bytes:
    if isinstance(key, str):
        kb = key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        kb = bytes(key)
    else:
        raise TypeError(f"key #{index} must be str or bytes, not {type(key).__name__}")
    if not kb:
        raise InvalidArgumentError(_E_INVALID_ARG, f"key #{index} is empty")
    if b"\0" in kb:
        raise InvalidArgumentError(_E_INVALID_ARG, f"key #{index} contains a NUL byte")
    return kb


def _key_array(keys: Sequence[Any]) -> tuple[Any, list[Any]]:
    """A ``const char *[]`` for the keys, and the cdata keeping them alive."""
    owned = [ffi.new("char[]", _encode_key(k, i)) for i, k in enumerate(keys)]
    return ffi.new("char *[]", owned), owned


def _from_buffer(buf: Any, index: int, writable: bool) -> Any:
    """cdata over a buffer-protocol object, or a TypeError naming the buffer."""
    try:
        return ffi.from_buffer(buf, require_writable=writable)
    except (TypeError, BufferError):
        what = "a writable buffer" if writable else "a bytes-like object"
        raise TypeError(f"buffer #{index} must be {what}, not {type(buf).__name__}") from None


def _batch_get_plan(
    keys: list[Any], raise_key_errors: Callable[..., None]
) -> Generator[tuple[int, list[Any], list[bytearray] | None], list[int], list[bytes | None]]:
    """How a batch get proceeds, for a synchronous and an asynchronous driver.

    Yields requests ``(op, keys, buffers)``, receives each one's per-key results
    and returns the values (None where missing): size the keys, read them into
    buffers of that size, and size again and re-read (up to 3 rounds) a key whose
    value was replaced by a larger one meanwhile.
    """
    sizes = yield _OP_SIZE, keys, None
    raise_key_errors(keys, sizes, (OBJECT_NOT_FOUND,))
    out: list[bytes | None] = [None] * len(keys)
    idx = [i for i, s in enumerate(sizes) if s >= 0]
    for _attempt in range(3):
        if not idx:
            break
        bufs = [bytearray(max(1, sizes[i])) for i in idx]
        got = yield _OP_GET, [keys[i] for i in idx], bufs
        retry = []
        for i, b, r in zip(idx, bufs, got):
            if r >= 0:
                out[i] = bytes(memoryview(b)[:r])
            elif r == INVALID_PARAMS:
                retry.append(i)  # replaced by a larger value meanwhile
            elif r != OBJECT_NOT_FOUND:
                raise error_for(r, f"key {keys[i]!r}: {_binding.strerror(r)}", got)
        if not retry:
            break
        new_sizes = yield _OP_SIZE, [keys[i] for i in retry], None
        for i, s in zip(retry, new_sizes):
            sizes[i] = s
        idx = [i for i in retry if sizes[i] >= 0]
    return out


def _as_list(keys: Any, what: str = "keys") -> list[Any]:
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of keys, not a single {type(keys).__name__}")
    return list(keys)


class _ReplicateConfigs:
    """Turns ``mooncake.store.ReplicateConfig`` objects into C++ pointers.

    pybind11's cross-module conduit hands out the address of the C++ object,
    type-checked against the shim's ``typeid(mooncake::ReplicateConfig)``.
    """

    _ABI_ID = b"_gcc_libstdcpp_cxxabi1018"
    _CAPSULE_NAME = b"N8mooncake15ReplicateConfigE"

    def __init__(self) -> None:
        api = ctypes.pythonapi
        self._new = api.PyCapsule_New
        self._new.restype = ctypes.py_object
        self._new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self._get = api.PyCapsule_GetPointer
        self._get.restype = ctypes.c_void_p
        self._get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        typeid = int(ffi.cast("uintptr_t", lib.mcs_replicate_config_typeid()))
        self._typeid_capsule = self._new(typeid, b"St9type_info", None)

    def pointer(self, obj: Any) -> Any:
        conduit = getattr(obj, "_pybind11_conduit_v1_", None)
        capsule = None
        if conduit is not None:
            capsule = conduit(self._ABI_ID, self._typeid_capsule, b"raw_pointer_ephemeral")
        if capsule is None:
            raise TypeError(
                "replicate_config must be a mooncake.store.ReplicateConfig, "
                f"not {type(obj).__name__}"
            )
        return ffi.cast("void *", self._get(capsule, self._CAPSULE_NAME))


_rc_lock = threading.Lock()
_rc_converter: _ReplicateConfigs | None = None


def _replicate_pointer(obj: Any) -> Any:
    global _rc_converter
    with _rc_lock:
        if _rc_converter is None:
            _rc_converter = _ReplicateConfigs()
    return _rc_converter.pointer(obj)


@dataclass(frozen=True)
class Completion:
    """A finished batch, as returned by :meth:`Client.drain`.

    ``results`` holds one value per key (see the method that submitted it);
    ``status`` is 0 or the first per-key error (a missing key is reported only in
    its result); ``message`` explains a non-zero status.
    """

    id: int
    op: str
    status: int
    results: list[int]
    n_failed: int
    message: str

    @property
    def ok(self) -> bool:
        return self.status == 0


class _Pending:
    """What must stay alive while the shim works on an asynchronous batch."""

    __slots__ = ("keepalive", "results", "n", "user")

    def __init__(self, keepalive: tuple[Any, ...], results: Any, n: int, user: Any) -> None:
        self.keepalive = keepalive
        self.results = results
        self.n = n
        self.user = user


_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for client in list(_live_clients):
        try:
            client.close()
        except Exception:
            pass


# ------------------------------------------------------------------ Client


class Client:
    """A Mooncake Store client with per-operation lanes.

    Args:
        config: a :class:`StoreConfig`, a dict in LMCache's ``mooncake_store``
            adapter format, or that dict as JSON text.  Mooncake's keys are
            passed to its setup untouched.
        l1: an optional writable buffer (numpy array, bytearray, mmap, ...) to
            register with Mooncake as L1 memory.  Required with
            ``protocol: rdma``; with tcp it is not registered unless
            ``register_l1=True``.
        register_l1: force (True) or skip (False) L1 registration; default:
            register exactly when the protocol is rdma.
        l1_block_size: register L1 in blocks of at most this many bytes
            (0: ``$MC_MAX_MR_SIZE`` or 1 TiB).  A transfer buffer must lie within
            one block.
        queue_capacity: batches queued or running per lane before a submit
            must wait (default 1024).
        queue_timeout: seconds a submit to a full lane waits before raising
            :class:`QueueFullError`; ``None`` waits as long as it takes, 0 fails
            at once.
        tile_bytes, tile_keys: split put/upsert batches into tiles of at most
            ``tile_bytes`` bytes, and any batch into tiles of at most ``tile_keys``
            keys, that the lane's workers run in parallel (0: no split).  One
            completion per batch still.  Over TCP, byte tiles of stores mainly
            leave bandwidth to concurrent reads (bench/RESULTS.md); they add no
            throughput on a 2-core machine.
        coalesce_keys: a lane worker merges small get/exists batches (up to
            16 keys each) that wait in its queue into one Mooncake call of at
            most this many keys (default 64; 1 turns merging off).  Each batch
            keeps its own results and completion; an idle lane never waits to
            merge.
        replicate_config: a ``mooncake.store.ReplicateConfig`` used by puts
            (default: Mooncake's defaults).
        connect_timeout: seconds to wait for the master / metadata server to
            accept a TCP connection before failing with :class:`TransportError`.

    Blocking methods are thread-safe and release the GIL.  Use as a context
    manager, or call :meth:`close`.  A client cannot be used in a forked child.
    """

    def __init__(
        self,
        config: StoreConfig | Mapping[str, Any] | str,
        l1: Any = None,
        *,
        register_l1: bool | None = None,
        l1_block_size: int = 0,
        queue_capacity: int = 0,
        queue_timeout: float | None = None,
        tile_bytes: int = 0,
        tile_keys: int = 0,
        coalesce_keys: int = 0,
        replicate_config: Any = None,
        connect_timeout: float = 2.0,
    ) -> None:
        self._handle = None
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._closed = False
        self._tls = threading.local()
        if isinstance(config, StoreConfig):
            cfg = config
        elif isinstance(config, str):
            cfg = StoreConfig.from_json(config)
        elif isinstance(config, Mapping):
            cfg = StoreConfig.from_dict(dict(config))
        else:
            raise TypeError(
                f"config must be a StoreConfig, a dict or JSON text, not {type(config).__name__}"
            )
        cfg.check_connectable()
        self.config = cfg

        # L1: validated before any network traffic.
        protocol = cfg.protocol
        if register_l1 is None:
            register_l1 = protocol == "rdma"
        self._l1_cdata = None
        if register_l1:
            if l1 is None:
                raise ValueError(
                    "RDMA protocol is enabled, but no L1 memory descriptor was provided; "
                    "pass l1=<a writable buffer, allocated eagerly> to Client()"
                    if protocol == "rdma"
                    else "register_l1=True needs an l1 buffer"
                )
            try:
                l1_cdata = ffi.from_buffer(l1, require_writable=True)
            except (TypeError, BufferError) as exc:
                raise ValueError(
                    f"invalid L1 memory descriptor: {type(l1).__name__} is not a writable "
                    f"buffer ({exc})"
                ) from None
            if len(l1_cdata) == 0:
                raise ValueError("invalid L1 memory descriptor: the buffer is empty (size 0)")
            self._l1_cdata = l1_cdata
        if l1_block_size < 0:
            raise ValueError("l1_block_size must be >= 0")
        if queue_timeout is None:
            wait_ms = -1
        elif queue_timeout < 0:
            raise ValueError("queue_timeout must be None or >= 0 seconds")
        else:
            wait_ms = int(queue_timeout * 1000)
        for name, value in (
            ("queue_capacity", queue_capacity),
            ("tile_bytes", tile_bytes),
            ("tile_keys", tile_keys),
            ("coalesce_keys", coalesce_keys),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer")

        _binding.ensure_mooncake_loaded()
        lanes = ffi.new("struct mcs_lanes *")
        lanes.num_workers = cfg.num_workers
        per = cfg.per_op_workers or {}
        lanes.lookup = per.get("lookup", 0)
        lanes.retrieve = per.get("retrieve", 0)
        lanes.store = per.get("store", 0)
        setattr(lanes, "del", per.get("delete", 0))  # `del` is a Python keyword
        lanes.queue_capacity = queue_capacity
        lanes.queue_wait_ms = wait_ms
        lanes.tile_bytes = tile_bytes
        lanes.tile_keys = tile_keys
        lanes.coalesce_keys = coalesce_keys

        items = list(cfg.setup_config.items())
        ckeys = [ffi.new("char[]", k.encode()) for k, _ in items]
        cvals = [ffi.new("char[]", v.encode()) for _, v in items]
        out = ffi.new("mcs_client **")
        probe_ms = int(connect_timeout * 1000) if connect_timeout and connect_timeout > 0 else -1
        check(
            lib.mcs_client_create(
                out,
                ffi.new("char *[]", ckeys) if items else _NULL,
                ffi.new("char *[]", cvals) if items else _NULL,
                len(items),
                lanes,
                probe_ms,
            )
        )
        self._handle = out[0]
        _live_clients.add(self)
        try:
            from mooncake.store import ReplicateConfig

            self._default_rc = (
                replicate_config if replicate_config is not None else (ReplicateConfig())
            )
            check(
                lib.mcs_client_set_default_replicate_config(
                    self._handle, _replicate_pointer(self._default_rc)
                )
            )
            if self._l1_cdata is not None:
                check(
                    lib.mcs_client_register_l1(
                        self._handle, self._l1_cdata, len(self._l1_cdata), l1_block_size
                    )
                )
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Finish accepted work, unregister L1 and tear Mooncake down.  Idempotent."""
        with self._lock:
            if self._closed or self._handle is None:
                self._closed = True
                return
            self._closed = True
            handle = self._handle
        # In a forked child the shim only marks the parent's client closed.
        lib.mcs_client_close(handle)
        _live_clients.discard(self)

    @property
    def hostname(self) -> str:
        """The name this client registered with the cluster (``host:port``)."""
        buf = ffi.new("char[]", 512)
        check(lib.mcs_client_hostname(self._h(), buf, 512))
        return ffi.string(buf).decode()

    def close_for_exit(self) -> None:
        """Close quickly in a process that is about to exit (e.g. a CLI).

        Accepted work finishes and L1 is unregistered as in :meth:`close`, but
        Mooncake's own teardown (0.3-1 s) is skipped: the client's entries are
        removed from an ``http://`` metadata server here, and the master drops
        the client when its TTL passes.  Only call this right before
        ``os._exit()``; Mooncake must not be used again in this process.
        """
        with self._lock:
            if self._closed or self._handle is None:
                self._closed = True
                return
            handle = self._handle
        try:
            name = self.hostname
        except Exception:
            name = ""
        with self._lock:
            self._closed = True
        lib.mcs_client_close_for_exit(handle)
        _live_clients.discard(self)
        meta = self.config.setup_config.get("metadata_server", "")
        if name and meta.startswith("http://"):
            from ._metadata import forget_client

            forget_client(meta, name)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            try:
                lib.mcs_client_free(handle)
            except Exception:
                pass
            self._handle = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    @property
    def l1_registered(self) -> bool:
        """True when an L1 region is registered with Mooncake."""
        if self._handle is None:
            return False
        blocks = ffi.new("uint32_t *")
        if lib.mcs_client_l1_blocks(self._handle, blocks) != 0:
            return False
        return blocks[0] > 0

    @property
    def l1_blocks(self) -> int:
        """How many blocks the registered L1 region was split into (0 if none)."""
        blocks = ffi.new("uint32_t *")
        check(lib.mcs_client_l1_blocks(self._h(), blocks))
        return int(blocks[0])

    def _h(self) -> Any:
        if self._handle is None:
            raise ClosedError(_E_CLOSED, "the client is closed")
        return self._handle

    # ------------------------------------------------------------ plumbing

    def _prepare(
        self,
        op: int,
        keys: Sequence[Any],
        buffers: Sequence[Any] | None,
        sizes: Sequence[int] | None,
        writable: bool,
        replicate_config: Any,
    ) -> tuple[Any, ...]:
        n = len(keys)
        if n == 0:
            raise InvalidArgumentError(_E_INVALID_ARG, "empty batch: give at least one key")
        karr, kown = _key_array(keys)
        if buffers is None:
            return karr, kown, _NULL, _NULL, None, None, _NULL
        if len(buffers) != n:
            raise InvalidArgumentError(
                _E_INVALID_ARG, f"{n} keys but {len(buffers)} buffers: they must pair up"
            )
        cbufs = [_from_buffer(b, i, writable) for i, b in enumerate(buffers)]
        if sizes is None:
            csizes = ffi.new("uint64_t[]", [len(b) for b in cbufs])
        else:
            if len(sizes) != n:
                raise InvalidArgumentError(_E_INVALID_ARG, f"{n} keys but {len(sizes)} sizes")
            for i, (s, b) in enumerate(zip(sizes, cbufs)):
                if s > len(b):
                    raise InvalidArgumentError(
                        _E_INVALID_ARG, f"size #{i} ({s}) exceeds its buffer ({len(b)} bytes)"
                    )
            csizes = ffi.new("uint64_t[]", list(sizes))
        barr = ffi.new("void *[]", cbufs)
        rc_ptr = _NULL
        if replicate_config is not None and op in (_OP_PUT, _OP_UPSERT):
            rc_ptr = _replicate_pointer(replicate_config)
        return karr, kown, barr, csizes, cbufs, replicate_config, rc_ptr

    def _run(
        self,
        op: int,
        keys: Sequence[Any],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        flags: int = 0,
        writable: bool = False,
        replicate_config: Any = None,
    ) -> tuple[int, list[int]]:
        karr, _kown, barr, csizes, _bufs, _rc, rc_ptr = self._prepare(
            op, keys, buffers, sizes, writable, replicate_config
        )
        n = len(keys)
        res = ffi.new("int64_t[]", n)
        rc = lib.mcs_run(self._h(), op, karr, n, barr, csizes, res, flags, rc_ptr)
        results = ffi.unpack(res, n)
        if rc <= _SHIM_CODES:
            # refused or failed as a whole (shim codes): results are not meaningful
            raise error_for(rc, _binding.last_error())
        # 0, or a Mooncake code for a per-key failure: the results say which keys
        return rc, results

    def _raise_key_errors(
        self,
        keys: Sequence[Any],
        results: Sequence[int],
        allow: Iterable[int],
        sizes: Sequence[int] | None = None,
    ) -> None:
        allowed = set(allow)
        for i, (k, r) in enumerate(zip(keys, results)):
            if r < 0 and r not in allowed:
                msg = f"key {k!r}: {_binding.strerror(r)}"
                if r == NO_AVAILABLE_HANDLE and sizes is not None:
                    gss = self.config.setup_config.get("global_segment_size", "16 MiB (default)")
                    msg = (
                        f"key {k!r}: no space for {sizes[i]} bytes in the cluster's memory "
                        f"segments (this client contributes global_segment_size={gss}); the "
                        "value is larger than the free space of any segment: remove keys or "
                        "add storage"
                    )
                raise error_for(r, msg, results)

    @staticmethod
    def _nbytes(value: Any) -> int:
        try:
            return memoryview(value).nbytes
        except TypeError:
            return -1

    # ---------------------------------------------------------- single key

    def put(self, key: str | bytes, value: Any, *, replicate_config: Any = None) -> None:
        """Store ``value`` (any bytes-like object) under ``key``.

        Mooncake keeps the first value written: if ``key`` already exists this
        succeeds and the old value stays.  Use :meth:`upsert` to replace it, or
        :meth:`put_if_absent` to learn which happened.
        """
        _, results = self._run(_OP_PUT, [key], [value], replicate_config=replicate_config)
        self._raise_key_errors([key], results, (), [self._nbytes(value)])

    def put_if_absent(self, key: str | bytes, value: Any, *, replicate_config: Any = None) -> bool:
        """Store ``value`` unless ``key`` exists; True if written, False if it existed."""
        _, results = self._run(
            _OP_PUT, [key], [value], flags=_FLAG_SKIP_EXISTING, replicate_config=replicate_config
        )
        self._raise_key_errors([key], results, (), [self._nbytes(value)])
        return results[0] != EXISTED

    def upsert(self, key: str | bytes, value: Any, *, replicate_config: Any = None) -> None:
        """Store ``value`` under ``key``, replacing any existing value."""
        _, results = self._run(_OP_UPSERT, [key], [value], replicate_config=replicate_config)
        self._raise_key_errors([key], results, (), [self._nbytes(value)])

    def _single(self, op: int, key: Any, flags: int = 0, buf: Any = _NULL, size: Any = _NULL):
        """One key, no batch bookkeeping: the small-operation fast path."""
        res = ffi.new("int64_t[1]")
        rc = lib.mcs_run(
            self._h(),
            op,
            [ffi.new("char[]", _encode_key(key, 0))],
            1,
            buf,
            size,
            res,
            flags,
            _NULL,
        )
        if rc <= _SHIM_CODES:
            raise error_for(rc, _binding.last_error())
        return res[0]

    def _single_buffer(self, op: int, key: Any, buf: Any, writable: bool, flags: int = 0) -> int:
        """One key and one buffer-protocol object: the zero-copy fast path."""
        cbuf = _from_buffer(buf, 0, writable)
        return self._single(op, key, flags, [cbuf], [len(cbuf)])

    def _scratch(self) -> tuple[Any, Any, Any]:
        """This thread's reusable read buffer (pointer array, size array, cdata)."""
        local = self._tls
        try:
            return local.scratch
        except AttributeError:
            data = ffi.new("char[]", _SCRATCH_BYTES)
            local.scratch = (
                ffi.new("void *[1]", [data]),
                ffi.new("uint64_t[1]", [_SCRATCH_BYTES]),
                data,
            )
            return local.scratch

    def get(self, key: str | bytes) -> bytes | None:
        """The value of ``key``, or None if it does not exist.

        Values up to 256 KiB are read in one round trip through a per-thread
        scratch buffer; larger ones are sized first, then read.
        """
        if self._l1_cdata is None:
            bufs, sizes, data = self._scratch()
            r = self._single(_OP_GET, key, 0, bufs, sizes)
            if r >= 0:
                return ffi.buffer(data, r)[:]
            if r == OBJECT_NOT_FOUND:
                return None
            if r != INVALID_PARAMS:  # anything but "buffer too small"
                raise error_for(r, f"key {key!r}: {_binding.strerror(r)}")
        return self.batch_get([key])[0]

    def exists(self, key: str | bytes) -> bool:
        """True if ``key`` exists (this also renews its read lease)."""
        r = self._single(_OP_EXISTS, key)
        if r < 0:
            raise error_for(r, f"key {key!r}: {_binding.strerror(r)}")
        return r == 1

    def remove(self, key: str | bytes, force: bool = False) -> bool:
        """Remove ``key``; True if removed, False if it was already absent.

        Raises :class:`HasLeaseError` if the key was read in the last few seconds
        (Mooncake's read lease); ``force=True`` removes it anyway.
        """
        results = self.batch_remove([key], force=force)
        if results[0] == OBJECT_NOT_FOUND:
            return False
        self._raise_key_errors([key], results, ())
        return True

    def size(self, key: str | bytes) -> int | None:
        """Size in bytes of the value of ``key``, or None if it does not exist."""
        _, results = self._run(_OP_SIZE, [key])
        self._raise_key_errors([key], results, (OBJECT_NOT_FOUND,))
        return None if results[0] == OBJECT_NOT_FOUND else results[0]

    # --------------------------------------------------------------- batch

    def batch_put(
        self,
        keys: Sequence[str | bytes],
        values: Sequence[Any],
        *,
        skip_existing: bool = False,
        replicate_config: Any = None,
    ) -> list[int]:
        """Store values under keys as one batch; per-key status, 0 = stored.

        With ``skip_existing=True`` keys are looked up first and the present
        ones get :data:`EXISTED` (1) instead of being sent.  Negative statuses
        are Mooncake error codes (see :func:`mooncake_cffi.error_name`).
        """
        keys = _as_list(keys)
        _, results = self._run(
            _OP_PUT,
            keys,
            _as_list(values, "values"),
            flags=_FLAG_SKIP_EXISTING if skip_existing else 0,
            replicate_config=replicate_config,
        )
        return results

    def batch_upsert(
        self, keys: Sequence[str | bytes], values: Sequence[Any], *, replicate_config: Any = None
    ) -> list[int]:
        """Like :meth:`batch_put` but replaces existing values; per-key status."""
        keys = _as_list(keys)
        _, results = self._run(
            _OP_UPSERT, keys, _as_list(values, "values"), replicate_config=replicate_config
        )
        return results

    def batch_get(self, keys: Sequence[str | bytes]) -> list[bytes | None]:
        """Values of the keys (None for a missing key), read as one batch."""
        plan = _batch_get_plan(_as_list(keys), self._raise_key_errors)
        op, ks, bufs = next(plan)
        while True:
            _, results = self._run(op, ks, bufs, writable=bufs is not None)
            try:
                op, ks, bufs = plan.send(results)
            except StopIteration as done:
                return done.value

    def batch_exists(self, keys: Sequence[str | bytes]) -> list[bool]:
        """Whether each key exists, looked up as one batch."""
        keys = _as_list(keys)
        _, results = self._run(_OP_EXISTS, keys)
        self._raise_key_errors(keys, results, ())
        return [r == 1 for r in results]

    def batch_remove(self, keys: Sequence[str | bytes], force: bool = False) -> list[int]:
        """Remove keys as one batch; per-key status: 0 removed, -704 absent, -706 leased, ..."""
        keys = _as_list(keys)
        _, results = self._run(_OP_REMOVE, keys, flags=_FLAG_FORCE if force else 0)
        return results

    # ----------------------------------------------------------- zero-copy

    def put_from(
        self,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
        *,
        upsert: bool = False,
        skip_existing: bool = False,
        replicate_config: Any = None,
    ) -> list[int]:
        """Store from buffer-protocol objects without copying; per-key status.

        ``sizes`` (default: each buffer's length) may send a prefix of a buffer.
        With L1 registered, every buffer must lie inside the L1 region.
        """
        keys = _as_list(keys)
        if upsert and skip_existing:
            raise ValueError("upsert and skip_existing exclude each other")
        if len(keys) == 1 and sizes is None and replicate_config is None:
            buffers = _as_list(buffers, "buffers")
            if len(buffers) == 1:
                op = _OP_UPSERT if upsert else _OP_PUT
                flags = _FLAG_SKIP_EXISTING if skip_existing else 0
                return [self._single_buffer(op, keys[0], buffers[0], False, flags)]
        _, results = self._run(
            _OP_UPSERT if upsert else _OP_PUT,
            keys,
            _as_list(buffers, "buffers"),
            sizes,
            flags=_FLAG_SKIP_EXISTING if skip_existing else 0,
            replicate_config=replicate_config,
        )
        return results

    def get_into(
        self,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
    ) -> list[int]:
        """Read values into writable buffers without copying.

        Returns per key the number of bytes read, or a negative code: -704
        (OBJECT_NOT_FOUND) for a missing key, -600 (INVALID_PARAMS) when the
        buffer is smaller than the value.
        """
        keys = _as_list(keys)
        buffers = _as_list(buffers, "buffers")
        if len(keys) == 1 and len(buffers) == 1 and sizes is None:
            return [self._single_buffer(_OP_GET, keys[0], buffers[0], True)]
        _, results = self._run(_OP_GET, keys, buffers, sizes, writable=True)
        return results

    # ---------------------------------------------------------- async core

    def submit(
        self,
        op: str,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        force: bool = False,
        skip_existing: bool = False,
        replicate_config: Any = None,
        user_data: Any = None,
    ) -> int:
        """Queue a batch on its lane and return its id without waiting.

        ``op`` is one of ``"exists"``, ``"get"``, ``"put"``, ``"upsert"``,
        ``"remove"``, ``"size"``.  ``get`` needs writable ``buffers``; ``put`` and
        ``upsert`` need readable ones; they (and the keys) are kept alive here
        until the completion is drained.  Exactly one :class:`Completion` per
        batch becomes available through :meth:`drain`; :meth:`fileno` turns
        readable when one is waiting.
        """
        try:
            code = _OP_CODES[op]
        except (KeyError, TypeError):
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(_OP_CODES)}") from None
        keys = _as_list(keys)
        needs_buffers = code in (_OP_GET, _OP_PUT, _OP_UPSERT)
        if needs_buffers and buffers is None:
            raise ValueError(f"op {op!r} needs buffers")
        if not needs_buffers and buffers is not None:
            raise ValueError(f"op {op!r} takes no buffers")
        karr, kown, barr, csizes, cbufs, rc_obj, rc_ptr = self._prepare(
            code,
            keys,
            _as_list(buffers, "buffers") if buffers is not None else None,
            sizes,
            code == _OP_GET,
            replicate_config,
        )
        flags = (_FLAG_FORCE if force else 0) | (_FLAG_SKIP_EXISTING if skip_existing else 0)
        n = len(keys)
        res = ffi.new("int64_t[]", n)
        idp = ffi.new("uint64_t *")
        keep = (karr, kown, barr, csizes, cbufs, buffers, rc_obj)
        with self._lock:  # registered before the completion can be drained
            rc = lib.mcs_submit(self._h(), idp, code, karr, n, barr, csizes, res, flags, rc_ptr)
            if rc < 0:
                raise error_for(rc, _binding.last_error())
            self._pending[int(idp[0])] = _Pending(keep, res, n, user_data)
        return int(idp[0])

    def drain(self, max_items: int = 1024) -> list[Completion]:
        """Completions of finished batches (never blocks); resets :meth:`fileno`."""
        if self._handle is None:
            return []
        out = ffi.new("struct mcs_completion[]", max_items)
        done: list[Completion] = []
        with self._lock:
            k = check(lib.mcs_drain(self._handle, out, max_items))
            for i in range(k):
                c = out[i]
                pend = self._pending.pop(int(c.id), None)
                results = ffi.unpack(pend.results, pend.n) if pend else []
                done.append(
                    Completion(
                        id=int(c.id),
                        op=_OP_NAMES[c.op],
                        status=int(c.status),
                        results=results,
                        n_failed=int(c.n_failed),
                        message=ffi.string(c.message).decode("utf-8", "replace"),
                    )
                )
        return done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a completion is waiting (True) or ``timeout`` seconds pass (False)."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rc = lib.mcs_wait(self._h(), ms)
        if rc == _E_TIMEOUT:
            return False
        check(rc)
        return True

    def fileno(self) -> int:
        """The completion eventfd (non-blocking): readable while completions wait."""
        fd = ffi.new("int *")
        check(lib.mcs_client_fd(self._h(), fd))
        return int(fd[0])

    @property
    def pending(self) -> int:
        """Submitted batches whose completion has not been drained yet."""
        return len(self._pending)

    # --------------------------------------------------------------- stats

    def stats(self) -> dict[str, dict[str, float]]:
        """Per-lane counters and batch latency percentiles (microseconds).

        Keys are lane names (``lookup``, ``retrieve``, ``store``, ``delete``,
        ``shared``); a lane served by the shared pool reports ``workers == 0``.
        ``merged`` counts Mooncake calls that served several queued batches.
        """
        out: dict[str, dict[str, float]] = {}
        st = ffi.new("struct mcs_lane_stats *")
        for i, name in enumerate(LANES):
            check(lib.mcs_client_lane_stats(self._h(), i, st))
            out[name] = {
                f: getattr(st, f)
                for f in (
                    "workers",
                    "queued",
                    "running",
                    "pending",
                    "submitted",
                    "completed",
                    "failed",
                    "keys",
                    "rejected",
                    "mean_us",
                    "p50_us",
                    "p90_us",
                    "p99_us",
                    "max_us",
                    "merged",
                )
            }
        return out

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        master = self.config.setup_config.get("master_server_addr", "?")
        return f"<mooncake_cffi.Client {state} master={master}>"
