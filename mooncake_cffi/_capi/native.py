"""A client's native side: the shim's ``mcs_client`` handle, from checked options to close.

:class:`NativeClient` is the one object that owns a handle and its life: the options it was
created with (checked before any network traffic), the L1 region registered with it, the lock
that orders submits against drains, the batches whose memory the shim still borrows (submitted
ones and those of timed-out blocking calls), the per-thread memory blocking calls reuse, and
closing (normally, or fast for a process about to exit, and at interpreter exit).  The
execution modules (:mod:`_core.blocking`, :mod:`._batches`) take it; :class:`mooncake_cffi.Client`
holds it.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from ..config import StoreConfig
from ..errors import ClosedError
from ..outcome import WriteLedger
from ..sizes import parse_size
from ..status import MCS_E_CLOSED
from ..wheel import adapt_setup_config
from . import binding, counters
from .binding import check, ffi, lib
from .marshal import Packed, ReusedBatch
from .replica_options import replica_options

__all__ = ["NativeClient", "ThreadState"]

#: Bytes of each thread's scratch buffer: a get of a value up to this size is one round trip.
SCRATCH_BYTES = 256 * 1024

_live: weakref.WeakSet[NativeClient] = weakref.WeakSet()


#: Whether a client that contributed a segment was closed: its teardown may still run in the
#: background (an HA client's), and the process's exit then waits for it.
_segment_closed = False
#: Slices of the exit's wait for background teardowns, so that Ctrl-C ends it at once.
_EXIT_WAIT_SLICE_MS = 100
#: At most this long (the shim's own exit handler waits for whatever is left).
_EXIT_WAIT_LIMIT_S = 31.0


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for native in list(_live):
        try:
            native.close()
        except Exception:
            pass
    wait_for_teardowns_at_exit()


def wait_for_teardowns_at_exit() -> None:
    """Wait, at interpreter exit, for the background teardowns of closed clients that
    contributed a segment (Mooncake unmounts it at their end; up to 30 s after an HA close),
    in slices, so that Ctrl-C ends the wait at once: the process then says what it cut short
    and leaves with status 130 (the master drops the segment when the client's TTL passes)."""
    if not _segment_closed or lib.mcs_teardowns_pending() <= 0:
        return
    deadline = time.monotonic() + _EXIT_WAIT_LIMIT_S
    try:
        while time.monotonic() < deadline:
            if lib.mcs_teardowns_wait(_EXIT_WAIT_SLICE_MS) == 0:
                return
    except KeyboardInterrupt:
        left = max(0, int(lib.mcs_teardowns_pending()))
        try:
            sys.stderr.write(
                f"mooncake_cffi: interrupted at exit while waiting for {left} client "
                "teardown(s) to unmount their segments: cut short; the master drops those "
                "segments when the clients' TTL passes\n"
            )
            sys.stderr.flush()
            sys.stdout.flush()
        except Exception:
            pass
        os._exit(130)


class _RpcWaitEnv:
    """Who has ``MC_RPC_TIMEOUT_MS`` set for their setup, so that every setup sees the value
    it asked for: setups asking the same value (the drop-in's defaults all do) run at once;
    one asking another, or none (``None``: Mooncake's default), waits until they are done.
    The check and the change are made under one lock, never beside another setup's."""

    NAME = "MC_RPC_TIMEOUT_MS"

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._users = 0
        self._value: str | None = None  # what the setups in the block asked for
        self._external = False  # the user's own value: kept for every setup, never changed

    @contextlib.contextmanager
    def holding(self, value: str | None) -> Iterator[None]:
        with self._cond:
            while self._users and not self._external and self._value != value:
                self._cond.wait()
            if self._users == 0:
                self._external = self.NAME in os.environ
                self._value = value
                if value is not None and not self._external:
                    os.environ[self.NAME] = value
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                if self._users == 0:
                    if self._value is not None and not self._external:
                        os.environ.pop(self.NAME, None)
                    self._cond.notify_all()


_rpc_wait_env = _RpcWaitEnv()


def mooncake_timeouts_shortened(
    op_timeout: float | None,
) -> contextlib.AbstractContextManager[None]:
    """Within the block, Mooncake's RPC waits are no longer than a client's deadline.

    Mooncake reads ``MC_RPC_TIMEOUT_MS`` (a master RPC) from the environment when a client
    is set up, into that client's master connection, which then arms a timer per master
    RPC (one ``timerfd_settime``, bench/RESULTS.md).  The block (a client's setup) sets it
    when the environment does not, and takes it away again after: other clients of the
    process and processes started later (an engine's workers) keep Mooncake's default; a
    value already set is kept and left.  A setup with ``op_timeout`` None runs while none
    of ours has the value set, so it never inherits another's; setups asking the same value
    run at once (:class:`_RpcWaitEnv`).

    ``MC_TCP_STATUS_TIMEOUT_SEC`` is left alone, on purpose: it also bounds how long a TCP
    write waits for the storage node's acknowledgement once its last byte has left the
    process, and a write given up there is revoked (its memory on the storage node freed
    and handed to the next writer) while the kernel still delivers its queued bytes, which
    then land in another key's value.  Mooncake's default (30 s) is kept unless the
    environment sets it (see docs/guide/failures.md).
    """
    value = None if op_timeout is None else str(max(100, int(op_timeout * 1000)))
    return _rpc_wait_env.holding(value)


def _count(name: str, value: object, limit: int) -> int:
    """A non-negative integer option no larger than ``limit``, or a ValueError naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValueError(f"{name} must be an integer from 0 to {limit}, not {value!r}")
    return value


def _seconds_ms(name: str, value: object, *, none_ms: int, limit_s: float) -> int:
    """Seconds given as an option, in whole milliseconds (``none_ms`` for None); a ValueError
    naming the option for a value that is not a finite number from 0 to ``limit_s``."""
    if value is None:
        return none_ms
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be None or seconds, not {value!r}")
    if not math.isfinite(value) or not 0 <= value <= limit_s:
        raise ValueError(f"{name} must be None or seconds from 0 to {limit_s:g}, not {value!r}")
    return int(value * 1000)


def positive_seconds(value: object, limit: float) -> bool:
    """Whether ``value`` is a number of seconds above 0 and at most ``limit`` (not a bool,
    a string or NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= limit


#: The longest wait a millisecond count in the shim's int32 fields can hold (24.8 days).
MAX_WAIT_SECONDS = (2**31 - 1) / 1000


class ThreadState:
    """The memory one thread's blocking calls reuse: a batch (struct and arrays), a read
    buffer for small gets, and an id out-parameter.  ``busy`` flags mark them in use, so a
    call made in mid-call on the same thread (a finalizer, a signal handler) takes private
    memory instead of overwriting the outer call's."""

    __slots__ = ("batch", "timed", "_scratch", "scratch_busy", "idp")

    def __init__(self) -> None:
        self.batch = ReusedBatch()
        #: The batch of calls with a deadline (``Runner.run_until``), apart from ``batch``:
        #: a timed-out one is left to the shim and replaced, which must never happen to a
        #: batch an outer call on this thread has taken and not yet marked busy.
        self.timed = ReusedBatch()
        self._scratch: Any = None
        self.scratch_busy = False
        self.idp = ffi.new("uint64_t *")

    @property
    def scratch(self) -> Any:
        """The read buffer (cdata of :data:`SCRATCH_BYTES`), allocated on first use."""
        if self._scratch is None:
            self._scratch = ffi.new("char[]", SCRATCH_BYTES)
        return self._scratch


class NativeClient:
    """One shim client (``mcs_client``): created and set up from ``config``, closed once.

    The keyword options are :class:`mooncake_cffi.Client`'s (see there); each is checked,
    with a ``ValueError`` naming it, before anything reaches the network.  Thread-safe.
    """

    def __init__(
        self,
        config: StoreConfig,
        *,
        l1: Any = None,
        register_l1: bool | None = None,
        l1_block_size: int = 0,
        queue_capacity: int = 0,
        queue_timeout: float | None = None,
        tile_bytes: int = 0,
        tile_keys: int = 0,
        coalesce_keys: int = 0,
        replicate_config: Any = None,
        connect_timeout: float | None = 2.0,
        dummy: tuple[int, int, str] | None = None,
    ) -> None:
        self.handle: Any = None
        #: The handle's address as an int (0 without one): for the C fast path
        #: (``_fastcall``), which takes no cdata.  Valid while this object lives: the handle
        #: is freed only by :meth:`__del__`.
        self.address = 0
        self.config = config
        #: Orders submits against drains, and guards the registries below.
        self.lock = threading.Lock()
        #: Submitted batches not drained yet: id -> (what the shim borrows, user data).
        self.pending: dict[int, tuple[Packed, Any]] = {}
        #: Batches of blocking calls that timed out: id -> what the shim still borrows.
        self.orphans: dict[int, Packed] = {}
        #: Completions of timed-out blocking calls drained before the call registered its
        #: orphan (the shim may end such a batch before the call returns): id -> status.
        self.ended_early: dict[int, int] = {}
        #: Timed-out writes, for their outcomes (:mod:`.outcome`).
        self.writes = WriteLedger()
        self._closed = False
        #: Per-thread memory (:class:`ThreadState` as ``tls.state``; see :meth:`thread`).
        self.tls = threading.local()

        if register_l1 is None:
            register_l1 = config.protocol == "rdma"
        self.l1 = l1
        self.l1_block_size = _count("l1_block_size", l1_block_size, 2**63)
        self.l1_cdata: Any = _l1_cdata(l1, config.protocol) if register_l1 else None
        lanes = ffi.new("struct mcs_lanes *")
        lanes.struct_size = ffi.sizeof("struct mcs_lanes")
        lanes.num_workers = config.num_workers
        per = config.per_op_workers or {}
        lanes.lookup = per.get("lookup", 0)
        lanes.retrieve = per.get("retrieve", 0)
        lanes.store = per.get("store", 0)
        setattr(lanes, "del", per.get("delete", 0))  # `del` is a Python keyword
        lanes.queue_capacity = _count("queue_capacity", queue_capacity, 1 << 24)
        lanes.queue_wait_ms = _seconds_ms(
            "queue_timeout", queue_timeout, none_ms=-1, limit_s=MAX_WAIT_SECONDS
        )
        lanes.tile_bytes = _count("tile_bytes", tile_bytes, 2**63)
        lanes.tile_keys = _count("tile_keys", tile_keys, 1 << 24)
        lanes.coalesce_keys = _count("coalesce_keys", coalesce_keys, 65536)
        probe_ms = _seconds_ms("connect_timeout", connect_timeout, none_ms=-1, limit_s=3600)
        if connect_timeout is not None and probe_ms <= 0:
            probe_ms = -1  # 0 turns the probe off, as before

        binding.ensure_mooncake_loaded()
        # Wheel adaptation (mooncake_cffi.wheel): wheels before 0.3.12 refuse
        # global_segment_size 0 and read "32 MB" as 32; the keys are rewritten for them.
        items = list(adapt_setup_config(config.setup_config).items())
        ckeys = [ffi.new("char[]", k.encode()) for k, _ in items]
        cvals = [ffi.new("char[]", v.encode()) for _, v in items]
        out = ffi.new("mcs_client **")
        if dummy is not None:  # a client of a standalone client service (DummyClient)
            mem_pool, local_buffer, server = dummy
            check(
                lib.mcs_client_create_dummy(
                    out, mem_pool, local_buffer, server.encode(), lanes, probe_ms
                )
            )
        else:
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
        self.handle = out[0]
        self.address = int(ffi.cast("uintptr_t", self.handle))
        _live.add(self)
        try:
            fields = config.replicate_fields()
            #: The replica options of writes that give none.
            self.default_replicate_config = (
                replicate_config if replicate_config is not None else config.replicate_config()
            )
            if replicate_config is not None or fields:  # else the shim's: Mooncake's defaults
                opts, keep = replica_options(self.default_replicate_config)
                check(lib.mcs_client_set_replica_options(self.handle, opts))
                del keep
            if self.l1_cdata is not None:
                check(
                    lib.mcs_client_register_l1(
                        self.handle, self.l1_cdata, len(self.l1_cdata), self.l1_block_size
                    )
                )
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------- access

    def checked(self) -> Any:
        """The handle, or :class:`ClosedError` once the client is closed."""
        handle = self.handle
        if handle is None:
            raise ClosedError(MCS_E_CLOSED, "the client is closed")
        return handle

    def thread(self) -> ThreadState:
        """This thread's reusable memory (see :class:`ThreadState`)."""
        try:
            state: ThreadState = self.tls.state
        except AttributeError:
            state = self.tls.state = ThreadState()
        return state

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def hostname(self) -> str:
        buf = ffi.new("char[]", 512)
        check(lib.mcs_client_hostname(self.checked(), buf, 512))
        return str(ffi.string(buf).decode())

    @property
    def l1_blocks(self) -> int:
        blocks = ffi.new("uint32_t *")
        check(lib.mcs_client_l1_blocks(self.checked(), blocks))
        return int(blocks[0])

    @property
    def l1_registered(self) -> bool:
        if self.handle is None:
            return False
        blocks = ffi.new("uint32_t *")
        return bool(lib.mcs_client_l1_blocks(self.handle, blocks) == 0 and blocks[0] > 0)

    def integrity_stats(self) -> dict[str, int | bool]:
        """The verification counters (see :func:`mooncake_cffi.integrity.integrity_stats`)."""
        return counters.integrity_stats(self.checked())

    def fileno(self) -> int:
        fd = ffi.new("int *")
        check(lib.mcs_client_fd(self.checked(), fd))
        return int(fd[0])

    # -------------------------------------------------------------- close

    def close(self) -> None:
        """Finish accepted work, unregister L1 and tear Mooncake down.  Idempotent."""
        with self.lock:
            if self._closed or self.handle is None:
                self._closed = True
                return
            self._closed = True
            handle = self.handle
        # In a forked child the shim only marks the parent's client closed.
        lib.mcs_client_close(handle)
        _live.discard(self)
        if self._contributes_segment():
            global _segment_closed
            _segment_closed = True

    def _contributes_segment(self) -> bool:
        size = self.config.setup_config.get("global_segment_size")
        try:
            return size is None or parse_size(size) != 0  # Mooncake's default: 16 MiB
        except ValueError:
            return True

    def close_for_exit(self) -> str:
        """Close without Mooncake's own teardown, for a process about to ``os._exit``; the
        name the client was registered under ("" if unknown), for removing its metadata.
        With batches still running past their deadline, the shim is left as it is: the
        exit ends them (and their memory) with the process."""
        with self.lock:
            if self._closed or self.handle is None:
                self._closed = True
                return ""
            handle = self.handle
        try:
            name = self.hostname
        except Exception:
            name = ""
        with self.lock:
            self._closed = True
            # Batches past their deadline are still in Mooncake, which may wait on a silent
            # peer for 30 s: the process's exit ends them, so it does not wait for them.
            abandon = bool(self.orphans)
        if not abandon:
            lib.mcs_client_close_for_exit(handle)
        _live.discard(self)
        return name

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is not None:
            self.handle, self.address = None, 0
            try:
                lib.mcs_client_free(handle)
            except Exception:
                pass


def _l1_cdata(l1: Any, protocol: str) -> Any:
    """cdata over the L1 buffer to register, or the ValueError LMCache gives for a bad one."""
    if l1 is None:
        raise ValueError(
            "RDMA protocol is enabled, but no L1 memory descriptor was provided; "
            "pass l1=<a writable buffer, allocated eagerly> to Client()"
            if protocol == "rdma"
            else "register_l1=True needs an l1 buffer"
        )
    try:
        cdata = ffi.from_buffer(l1, require_writable=True)
    except (TypeError, BufferError) as exc:
        raise ValueError(
            f"invalid L1 memory descriptor: {type(l1).__name__} is not a writable buffer ({exc})"
        ) from None
    if len(cdata) == 0:
        raise ValueError("invalid L1 memory descriptor: the buffer is empty (size 0)")
    return cdata
