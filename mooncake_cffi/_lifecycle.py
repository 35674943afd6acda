"""A client's life: options checked, the shim's client created and set up, L1 registered,
and closed once (normally, or fast for a process about to exit), also at interpreter exit.

:class:`ClientHandle` is the base of :class:`mooncake_cffi.Client`; the operations live
there.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from . import _binding
from ._binding import ffi, lib
from ._marshal import replicate_pointer
from .config import StoreConfig
from .errors import ClosedError, check
from .retry import RetryPolicy
from .status import MCS_E_CLOSED
from .wheel import adapt_setup_config

__all__ = ["ClientHandle", "default_replicate_config"]

_live: weakref.WeakSet[ClientHandle] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for client in list(_live):
        try:
            client.close()
        except Exception:
            pass


def shorten_mooncake_timeouts(op_timeout: float) -> None:
    """Make Mooncake's own waits no longer than a client's deadline, at the source.

    Mooncake reads these from the environment when the first client of the process is set
    up: ``MC_RPC_TIMEOUT_MS`` (a master RPC), ``MC_TCP_STATUS_TIMEOUT_SEC`` (a TCP transfer
    waiting on a silent peer: 30 s by default).  Values already set are kept.
    """
    os.environ.setdefault("MC_RPC_TIMEOUT_MS", str(max(100, int(op_timeout * 1000))))
    os.environ.setdefault("MC_TCP_STATUS_TIMEOUT_SEC", str(max(1, math.ceil(op_timeout))))


def default_replicate_config(fields: Mapping[str, Any]) -> Any:
    """A ``mooncake.store.ReplicateConfig`` with the fields the user's config sets."""
    import mooncake.store as store

    rc = store.ReplicateConfig()
    for name, value in fields.items():
        if name == "soft_pin_action":
            value = store.SoftPinAction[value]
        setattr(rc, name, value)
    return rc


def _non_negative_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer")
    return value


class ClientHandle:
    """Creation, lifecycle and L1 of a client; see :class:`mooncake_cffi.Client`."""

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
        op_timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._handle = None
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[Any, Any]] = {}
        self._orphans: dict[int, Any] = {}
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
        if op_timeout is not None and not op_timeout > 0:
            raise ValueError("op_timeout must be None or positive seconds")
        #: Default deadline (seconds) of every blocking call; None: no deadline.
        self.op_timeout = op_timeout
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, not {type(retry).__name__}")
        #: The retry policy of per-key retryable failures (None: no retries).
        self.retry = retry
        if op_timeout is not None:
            shorten_mooncake_timeouts(op_timeout)

        # L1: validated before any network traffic.
        protocol = cfg.protocol
        if register_l1 is None:
            register_l1 = protocol == "rdma"
        self._l1_cdata = None
        self._l1_obj = l1
        self._l1_block_size = l1_block_size
        self._staging: Any = None
        self._prefix_all_hit = False  # lookup_prefix: the last lookup found every key
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

        _binding.ensure_mooncake_loaded()
        lanes = ffi.new("struct mcs_lanes *")
        lanes.struct_size = ffi.sizeof("struct mcs_lanes")
        lanes.num_workers = cfg.num_workers
        per = cfg.per_op_workers or {}
        lanes.lookup = per.get("lookup", 0)
        lanes.retrieve = per.get("retrieve", 0)
        lanes.store = per.get("store", 0)
        setattr(lanes, "del", per.get("delete", 0))  # `del` is a Python keyword
        lanes.queue_capacity = _non_negative_int("queue_capacity", queue_capacity)
        lanes.queue_wait_ms = wait_ms
        lanes.tile_bytes = _non_negative_int("tile_bytes", tile_bytes)
        lanes.tile_keys = _non_negative_int("tile_keys", tile_keys)
        lanes.coalesce_keys = _non_negative_int("coalesce_keys", coalesce_keys)

        # Wheel adaptation (mooncake_cffi.wheel): wheels before 0.3.12 refuse
        # global_segment_size 0 and read "32 MB" as 32; the keys are rewritten for them.
        items = list(adapt_setup_config(cfg.setup_config).items())
        ckeys = [ffi.new("char[]", k.encode()) for k, _ in items]
        cvals = [ffi.new("char[]", v.encode()) for _, v in items]
        out = ffi.new("mcs_client **")
        probe_ms = int(connect_timeout * 1000) if connect_timeout and connect_timeout > 0 else -1
        check(
            lib.mcs_client_create(
                out,
                ffi.new("char *[]", ckeys) if items else ffi.NULL,
                ffi.new("char *[]", cvals) if items else ffi.NULL,
                len(items),
                lanes,
                probe_ms,
            )
        )
        self._handle = out[0]
        _live.add(self)
        try:
            self._default_rc = (
                replicate_config
                if replicate_config is not None
                else default_replicate_config(cfg.replicate_fields())
            )
            check(
                lib.mcs_client_set_default_replicate_config(
                    self._handle, replicate_pointer(self._default_rc)
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
        """Finish accepted work, unregister L1 and tear Mooncake down.  Idempotent.

        Batches that timed-out calls left running are finished first, so no buffer
        they use is written after this returns.
        """
        with self._lock:
            if self._closed or self._handle is None:
                self._closed = True
                return
            self._closed = True
            handle = self._handle
        if self._staging is not None:
            self._staging.close()
        # In a forked child the shim only marks the parent's client closed.
        lib.mcs_client_close(handle)
        _live.discard(self)

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
        _live.discard(self)
        meta = self.config.setup_config.get("metadata_server", "")
        if name and meta.startswith("http://"):
            from ._metadata import forget_client

            forget_client(meta, name)

    def __enter__(self) -> Any:
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
            raise ClosedError(MCS_E_CLOSED, "the client is closed")
        return self._handle

    def _idp(self) -> Any:
        """This thread's reusable ``uint64_t`` out-parameter for batch ids."""
        try:
            return self._tls.idp
        except AttributeError:
            self._tls.idp = ffi.new("uint64_t *")
            return self._tls.idp

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        master = self.config.setup_config.get("master_server_addr", "?")
        return f"<mooncake_cffi.Client {state} master={master}>"
