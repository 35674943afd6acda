"""The public synchronous :class:`Client`: a thin face over the objects it holds.

* :class:`~_capi.native.NativeClient` (``_capi/native.py``) owns the shim's client handle
  and its life;
* :class:`~_core.blocking.BlockingCalls` (``_core/blocking.py``) runs blocking calls: one
  shim call per batch, deadlines, multi-step plans (``_core/plans.py``), retries;
* :class:`~_core.values.Values` (``_core/values.py``) moves bytes values in and out, straight
  or through the L1 :class:`~_core.staging.Staging` area, and tells the losers of a put race;
* :class:`~_core.keys.Keys` (``_core/keys.py``) runs the calls on keys alone (exists, size,
  remove, the leading-prefix lookup);
* :class:`~_core.batches.Batches` (``_core/batches.py``, public as ``client.batches``)
  submits batches to the lanes and drains their completions (what
  :class:`mooncake_cffi.AsyncClient` awaits).

Every public method below calls one of them by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._capi import counters
from ._capi.binding import set_log_level
from ._capi.marshal import as_list
from ._capi.native import NativeClient, mooncake_timeouts_shortened, positive_seconds
from ._core.batches import Batches, Completion
from ._core.blocking import BlockingCalls
from ._core.keys import Keys
from ._core.parts import ClientParts
from ._core.staging import Staging
from ._core.types import DEFAULT, Key, Timeout
from ._core.values import Values
from .config import StoreConfig
from .errors import L1Error
from .metadata import forget_client
from .namespace import Namespace
from .retry import RetryPolicy
from .status import (
    FLAG_SKIP_EXISTING,
    LANES,
    MCS_E_STATE,
    OP_GET,
    OP_PUT,
    OP_UPSERT,
    OPS,
    PUT_EXISTED,
)

if TYPE_CHECKING:
    from ._core.types import Buffer
    from .replica import ReplicateConfig

__all__ = ["Client", "Completion", "EXISTED", "LANES", "OPS", "set_log_level"]

#: Per-key status of a ``skip_existing=True`` put of a key that held a value (it stays).
EXISTED = PUT_EXISTED


class Client:
    """A Mooncake Store client with per-operation lanes.

    Args:
        config: a :class:`StoreConfig`, a dict in LMCache's ``mooncake_store`` adapter
            format, or that dict as JSON text; Mooncake's keys go to its setup untouched.
        l1: a writable buffer (numpy array, bytearray, mmap) to register as L1 memory:
            required with ``protocol: rdma``; with tcp only if ``register_l1=True``.
        register_l1: force (True) or skip (False) L1 registration (default: with rdma).
        l1_block_size: register L1 in blocks of at most this many bytes (0:
            ``$MC_MAX_MR_SIZE`` or 1 TiB); a transfer buffer must lie within one block.
        queue_capacity: batches queued or running per lane before a submit must wait
            (default 1024).
        queue_timeout: seconds a submit to a full lane waits before raising
            :class:`QueueFullError` (None: as long as it takes; 0: fail at once).
        tile_bytes: split put/upsert batches into tiles of at most this many bytes, run in
            parallel by the lane's workers (0: no split); still one completion per batch.
        tile_keys: the same, for any batch, in tiles of at most this many keys.
        coalesce_keys: a lane worker merges small get/exists batches (up to 16 keys) waiting
            in its queue into one Mooncake call of at most this many keys (64; 1: never).
        replicate_config: the replica options of writes that give none (a
            :class:`ReplicateConfig`; default: from the config's replica keys).
        connect_timeout: seconds for the master and metadata server to accept a TCP
            connection before :class:`TransportError` (None or 0: no probe).
        op_timeout: default deadline (seconds) of every blocking call (None, the default:
            none; a deadline costs a thread hand-off per call); each method's ``timeout=``
            overrides it.  A timed-out call raises :class:`MooncakeTimeoutError`; its batch
            goes on in the shim, which keeps its buffers until it ends (:attr:`in_flight`).
            It also shortens this client's master RPC wait (``MC_RPC_TIMEOUT_MS``, set
            for its setup only) unless the environment sets it; never
            ``MC_TCP_STATUS_TIMEOUT_SEC`` (a write given up there may land in
            another key: docs/guide/failures.md).
        retry: a :class:`RetryPolicy` for per-key failures that may succeed when tried
            again (None: no retries).
        dummy: ``(mem_pool_size, local_buffer_size, server_address)``: instead of setting
            up a client of its own, be a client of the standalone Mooncake client service
            at ``server_address`` (Mooncake's ``setup_dummy``; ``mcs_client_create_dummy``
            in mcs(3)); ``config``'s setup keys are then not used.

    Blocking methods are thread-safe and release the GIL.  Use as a context
    manager, or call :meth:`close`.  A client cannot be used in a forked child.
    """

    def __init__(
        self,
        config: StoreConfig | Mapping[str, Any] | str,
        l1: Buffer | None = None,
        *,
        register_l1: bool | None = None,
        l1_block_size: int = 0,
        queue_capacity: int = 0,
        queue_timeout: float | None = None,
        tile_bytes: int = 0,
        tile_keys: int = 0,
        coalesce_keys: int = 0,
        replicate_config: ReplicateConfig | None = None,
        connect_timeout: float | None = 2.0,
        op_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        dummy: tuple[int, int, str] | None = None,
    ) -> None:
        cfg = StoreConfig.coerce(config)
        if dummy is None:
            cfg.check_connectable()
        self.config = cfg
        if op_timeout is not None and not positive_seconds(op_timeout, 2**31 / 1000):
            raise ValueError(f"op_timeout must be None or positive seconds, not {op_timeout!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, not {type(retry).__name__}")
        with mooncake_timeouts_shortened(op_timeout):
            self._native = NativeClient(
                cfg,
                l1=l1,
                register_l1=register_l1,
                l1_block_size=l1_block_size,
                queue_capacity=queue_capacity,
                queue_timeout=queue_timeout,
                tile_bytes=tile_bytes,
                tile_keys=tile_keys,
                coalesce_keys=coalesce_keys,
                replicate_config=replicate_config,
                connect_timeout=connect_timeout,
                dummy=dummy,
            )
        #: The client's background batches: submit, drain, wait (:class:`Batches`).
        self.batches = Batches(self._native)
        self._calls = BlockingCalls(self._native, self.batches, op_timeout, retry)
        self._values = Values(self._calls, self._native, self)
        self._keys = Keys(self._calls)
        #: The client's layers, for the faces built on it (the drop-in, AsyncClient); a
        #: program using the client needs none of them (:mod:`mooncake_cffi._core.parts`).
        self.parts = ClientParts(self._native, self.batches, self._calls, self._values)

    # ----------------------------------------------------------- lifecycle

    @property
    def op_timeout(self) -> float | None:
        """Default deadline (seconds) of every blocking call; None: no deadline."""
        return self._calls.op_timeout

    @property
    def retry(self) -> RetryPolicy | None:
        """The retry policy of per-key retryable failures (None: no retries)."""
        return self._calls.retry

    def close(self) -> None:
        """Finish accepted work, unregister L1 and tear Mooncake down.  Idempotent.

        Batches that timed-out calls left running are finished first, so no buffer they
        use is written after this returns.  A client of HA masters (``etcd://``) without a
        segment keeps Mooncake's client for the next one of its configuration; with one it
        returns within ~1 s, leaving the rest of the teardown to a thread (up to 30 s).  Also run
        when the client's last reference goes, and at exit."""
        self._native.close()  # ends every batch, timed-out ones included
        if self._values.area is not None:
            self._values.area.close()

    def close_for_exit(self) -> None:
        """Close quickly in a process about to ``os._exit()`` (e.g. a CLI): accepted work
        finishes and L1 is unregistered as in :meth:`close`, Mooncake's teardown (0.3-1 s)
        is skipped (and so is the wait for batches that outlived their deadline, which the
        exit ends); entries on an ``http://`` metadata server are removed, the master drops
        the client when its TTL passes.  Do not use Mooncake again, and leave by
        ``os._exit``: a normal exit runs Mooncake's atexit teardown, which may abort."""
        name = self._native.close_for_exit()
        meta = self.config.setup_config.get("metadata_server", "")
        if name and meta.startswith("http://"):
            forget_client(meta, name)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._native.closed

    @property
    def hostname(self) -> str:
        """The name this client registered with the cluster (``host:port``)."""
        return self._native.hostname

    @property
    def l1_registered(self) -> bool:
        """True when an L1 region is registered with Mooncake."""
        return self._native.l1_registered

    @property
    def l1_blocks(self) -> int:
        """How many blocks the registered L1 region was split into (0 if none)."""
        return self._native.l1_blocks

    @property
    def native_handle(self) -> Any:
        """The shim's ``mcs_client *`` of this client, for :mod:`mooncake_cffi.capi` (tests of
        the C ABI, microbenchmarks).  Borrowed: valid until :meth:`close`; do not free it."""
        return self._native.checked()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        master = self.config.setup_config.get("master_server_addr", "?")
        return f"<mooncake_cffi.Client {state} master={master}>"

    @property
    def staging(self) -> Staging:
        """The L1 staging area the bytes calls copy through when L1 is registered (RDMA:
        Mooncake moves data only to and from that region).  Bounded, reused, thread-safe; a
        value larger than a slot is refused, naming it.  Created on first use;
        :class:`L1Error` when no L1 region is registered."""
        area = self._values.staging()
        if area is None:
            raise L1Error(MCS_E_STATE, "no L1 region is registered: nothing to stage through")
        return area

    # ---------------------------------------------------------- single key

    def put(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Store ``value`` (any bytes-like object) under ``key``.

        Mooncake keeps the first value written: if ``key`` exists this succeeds and the old
        value stays (:meth:`upsert` replaces it; :meth:`put_if_absent` tells which happened).
        """
        self._values.store_one(OP_PUT, key, value, 0, replicate_config, timeout)

    def put_if_absent(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> bool:
        """Store ``value`` unless ``key`` exists; True if written, False if it existed.

        Of writers racing on one key exactly one is told True (see :meth:`batch_put`).
        """
        r = self._values.store_one(
            OP_PUT, key, value, FLAG_SKIP_EXISTING, replicate_config, timeout
        )
        return r != EXISTED

    def upsert(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Store ``value`` under ``key``, replacing any existing value."""
        self._values.store_one(OP_UPSERT, key, value, 0, replicate_config, timeout)

    def get(self, key: Key, *, timeout: Timeout = DEFAULT) -> bytes | None:
        """The value of ``key``, or None if it does not exist.

        Values up to 256 KiB are read in one round trip through a per-thread scratch buffer;
        larger ones through Mooncake's buffer, or sized first and read into the result.
        """
        return self._values.get(key, timeout)

    def exists(self, key: Key, *, timeout: Timeout = DEFAULT) -> bool:
        """True if ``key`` exists (this also renews its read lease)."""
        return self._keys.exists(key, timeout)

    def remove(self, key: Key, force: bool = False, *, timeout: Timeout = DEFAULT) -> bool:
        """Remove ``key``; True if removed, False if it was already absent.

        Raises :class:`HasLeaseError` if the key was read in the last few seconds
        (Mooncake's read lease); ``force=True`` removes it anyway.
        """
        return self._keys.remove(key, force, timeout)

    def size(self, key: Key, *, timeout: Timeout = DEFAULT) -> int | None:
        """Size in bytes of the value of ``key``, or None if it does not exist."""
        return self._keys.size(key, timeout)

    # --------------------------------------------------------------- batch

    def batch_put(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        skip_existing: bool = False,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Store values under keys as one batch; per-key status, 0 = stored.

        With ``skip_existing=True`` keys are looked up first and the present ones get
        :data:`EXISTED` (1) instead of being sent; keys written are read back, so of racing
        writers exactly one sees 0 (two writers of identical bytes both do).  Negative
        statuses are Mooncake error codes (see :func:`mooncake_cffi.error_name`).
        """
        flags = FLAG_SKIP_EXISTING if skip_existing else 0
        return self._values.store(
            OP_PUT, as_list(keys), as_list(values, "values"), flags, replicate_config, timeout
        )

    def batch_upsert(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Like :meth:`batch_put` but replaces existing values; per-key status."""
        return self._values.store(
            OP_UPSERT, as_list(keys), as_list(values, "values"), 0, replicate_config, timeout
        )

    def batch_get(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[bytes | None]:
        """Values of the keys (None for a missing key), read as one batch.

        One round trip in the common case: Mooncake reads the values into its local buffer
        (``local_buffer_size``) and they are copied out once.  Keys that did not fit there
        are sized and read separately; a value replaced by a larger one meanwhile is still
        read whole.  With L1 registered, values go through :attr:`staging`.
        """
        return self._values.batch_get(as_list(keys), timeout)

    def batch_size(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[int | None]:
        """Size in bytes of each key's value (None for a missing key), as one batch."""
        return self._keys.size_many(as_list(keys), timeout)

    def batch_exists(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[bool]:
        """Whether each key exists, looked up as one batch."""
        return self._keys.exists_many(keys if type(keys) is list else as_list(keys), timeout)

    def batch_remove(
        self, keys: Sequence[Key], force: bool = False, *, timeout: Timeout = DEFAULT
    ) -> list[int]:
        """Remove keys as one batch; per-key status: 0 removed, -704 absent, -706 leased, ..."""
        return self._keys.remove_many(as_list(keys), force, timeout)

    def lookup_prefix(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> int:
        """How many leading ``keys`` are stored: the index of the first missing one
        (``len(keys)`` when all are; 0 for none).  KV caches ask "how many leading chunks of
        this prompt are stored?".  The first ``max(16, n // 8)`` keys are asked, the rest only
        if all of those are present, so an early miss asks (and renews the read lease of)
        only that window; after a lookup that found every key, the next asks all keys in one
        call, until one finds a miss again.  A key may appear more than once.
        """
        return self._keys.lookup_prefix(as_list(keys), timeout)

    def namespace(self, prefix: Key) -> Namespace:
        """A view of this client whose key methods work inside ``prefix``: the prefix goes
        in front of every key on the way in (see :class:`Namespace`)."""
        return Namespace(self, prefix)

    def remove_all(self, force: bool = False) -> int:
        """Remove every key in the cluster (all of them: not only this client's); how many
        were removed.  Keys under a read lease stay unless ``force``."""
        return self._calls.remove_all(force)

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Remove the keys a regular expression (ECMAScript syntax, as Mooncake's C++ reads
        it) matches anywhere in them (anchor it with ``^...$``); how many were removed."""
        return self._calls.remove_by_regex(pattern, force)

    def health_check(self) -> int:
        """Mooncake's health check: 0 healthy, 1 not set up (or closed), 2 unhealthy."""
        return self._calls.health_check()

    # ----------------------------------------------------------- zero-copy

    def put_from(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Buffer],
        sizes: Sequence[int] | None = None,
        *,
        upsert: bool = False,
        skip_existing: bool = False,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
        first_writer_check: bool = True,
    ) -> list[int]:
        """Store from buffer-protocol objects without copying; per-key status.

        ``sizes`` (default: each buffer's length) may send a prefix of a buffer.  A list of
        buffers in place of a buffer stores their bytes one after another as one value (with
        ``sizes`` then a list of sizes per key).  With L1
        registered, every buffer must lie inside the L1 region.  If the call times out,
        Mooncake may still read the buffers: leave them unchanged until :attr:`in_flight`
        no longer counts the batch.  ``first_writer_check=False`` skips the read-back of
        ``skip_existing`` (see :meth:`batch_put`).
        """
        if upsert and skip_existing:
            raise ValueError("upsert and skip_existing exclude each other")
        return self._values.put_from(
            as_list(keys),
            as_list(buffers, "buffers"),
            sizes,
            op=OP_UPSERT if upsert else OP_PUT,
            skip_existing=skip_existing,
            replicate_config=replicate_config,
            timeout=timeout,
            first_writer_check=first_writer_check,
        )

    def get_into(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Buffer],
        sizes: Sequence[int] | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Read values into writable buffers without copying.

        Returns per key the number of bytes read, or a negative code: -704 (OBJECT_NOT_FOUND)
        for a missing key, -600 (INVALID_PARAMS) when the buffer is smaller than the value.  A
        list of buffers in place of a buffer receives the value across them, in order.
        If the call times out, Mooncake may still write into the buffers: do not reuse (or
        read) them until :attr:`in_flight` no longer counts the batch.
        """
        bufs = as_list(buffers, "buffers")
        return self._calls.run(OP_GET, as_list(keys), bufs, sizes, writable=True, timeout=timeout)

    # --------------------------------------------------------- background
    # The calls of ``self.batches`` (:class:`~.batches.Batches`), under the client's name.

    def submit(
        self,
        op: str,
        keys: Sequence[Key],
        buffers: Sequence[Buffer] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        force: bool = False,
        skip_existing: bool = False,
        land: bool = False,
        replicate_config: ReplicateConfig | None = None,
        user_data: Any = None,
    ) -> int:
        """Queue a batch on its lane; its id, at once (see :meth:`Batches.submit`).
        ``land=True`` (get): your buffers are never written once :meth:`withdraw` of the
        batch returns."""
        return self.batches.submit(
            op,
            keys,
            buffers,
            sizes,
            force=force,
            skip_existing=skip_existing,
            land=land,
            replicate_config=replicate_config,
            user_data=user_data,
        )

    def drain(self, max_items: int = 1024) -> list[Completion]:
        """Completions of finished batches (never blocks); resets :meth:`fileno`."""
        return self.batches.drain(max_items)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a completion is waiting (True) or ``timeout`` seconds pass (False)."""
        return self.batches.wait(timeout)

    def withdraw(self, batch_id: int) -> int:
        """Take back what of a submitted batch is still queued, when you stop waiting for
        it: that part is never sent and its keys answer MCS_E_TIMEOUT in the batch's one
        completion, which comes once its parts already running end.  The number of keys
        withdrawn (0: none of it queued).  A batch submitted with ``land=True`` writes
        none of its buffers once this returns."""
        return self.batches.withdraw(batch_id)

    def fileno(self) -> int:
        """The completion eventfd (non-blocking): readable while completions wait."""
        return self.batches.fileno()

    @property
    def pending(self) -> int:
        """Submitted batches whose completion has not been drained yet."""
        return self.batches.pending

    @property
    def in_flight(self) -> int:
        """Batches the shim still works on: submitted and not drained, plus timed-out calls."""
        return self.batches.in_flight

    # --------------------------------------------------------------- stats

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-lane counters and batch latency percentiles (microseconds), by lane name
        (``lookup``, ``retrieve``, ``store``, ``delete``, ``shared``).  A lane served by the
        shared pool reports ``workers == 0`` and counts the operations routed to it; the
        ``shared`` lane counts what its threads ran.  ``merged`` counts Mooncake calls that
        served several queued batches; ``abandoned``, of the ``running`` tiles, those whose
        caller timed out (each holds its worker until Mooncake returns); ``withdrawn``, the
        tiles of timed-out calls taken out of the queue unrun."""
        return counters.lane_stats(self._native.checked())

    def op_stats(self) -> dict[str, dict[str, Any]]:
        """Per-operation counters: calls, keys, failed_calls, failed_keys, bytes,
        timeouts, no_space, sum_us and a latency histogram (``buckets``: batches
        under 2**i microseconds), counting fast paths and every lane alike.  A call
        counts as failed only when its caller saw a failure."""
        return counters.op_stats(self._native.checked())
