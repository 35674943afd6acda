"""The public synchronous :class:`Client`.

A ``Client`` owns one Mooncake client set up from a :class:`StoreConfig` and its lanes
(lookup / retrieve / store / delete, with a shared-pool fallback).  Blocking calls release
the GIL, so threads get real parallelism; the asynchronous building blocks (``submit`` /
``drain`` / ``fileno``) are what :class:`mooncake_cffi.AsyncClient` uses.  Marshalling
lives in :mod:`._marshal`, multi-step plans in :mod:`._plans`, counters in :mod:`._stats`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from . import _binding, _stats
from ._async_core import AsyncCore, Completion
from ._binding import ffi, lib
from ._calls import DEFAULT
from ._marshal import (
    as_list,
    exists_list,
    nbytes,
)
from ._plans import batch_get_plan
from .errors import L1Error, check, error_for
from .namespace import Namespace
from .staging import Staging
from .status import (
    INVALID_PARAMS,
    MCS_E_STATE,
    OBJECT_NOT_FOUND,
    describe,
    is_retryable,
)

__all__ = ["Client", "Completion", "EXISTED", "LANES", "OPS", "set_log_level"]

#: Per-key status of a put with ``skip_existing=True`` for a key that already
#: held a value (Mooncake keeps the first value written).
EXISTED = lib.MCS_PUT_EXISTED

#: Lane names, in the shim's order.
LANES = _stats.LANES
#: Operation names, in the shim's order (``submit`` takes them).
OPS = _stats.OPS

_OP = _stats.OP_CODES
_EXISTS, _GET, _PUT, _UPSERT = _OP["exists"], _OP["get"], _OP["put"], _OP["upsert"]
_REMOVE, _SIZE, _GET_BUFFER = _OP["remove"], _OP["size"], _OP["get_buffer"]
_FLAG_FORCE = lib.MCS_FLAG_FORCE
_FLAG_SKIP_EXISTING = lib.MCS_FLAG_SKIP_EXISTING
#: A skip-existing put reads back what it wrote, waiting this often this long for a
#: racing writer's put to end (a key still unreadable then is reported written).
_READBACK_ROUNDS = 20
_READBACK_WAIT = 0.025
#: lookup_prefix asks at least this many keys first.
PREFIX_FIRST_WINDOW = 16


def set_log_level(level: int) -> None:
    """Set Mooncake's log threshold, process-wide: 0 INFO, 1 WARNING, 2 ERROR, 3 silent.

    Mooncake is silent (3) by default.
    """
    _binding.ensure_mooncake_loaded()
    check(lib.mcs_set_log_level(int(level)))


class Client(AsyncCore):
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
            completion per batch still.
        coalesce_keys: a lane worker merges small get/exists batches (up to
            16 keys each) that wait in its queue into one Mooncake call of at
            most this many keys (default 64; 1 turns merging off).
        replicate_config: a ``mooncake.store.ReplicateConfig`` used by puts
            (default: Mooncake's defaults).
        connect_timeout: seconds to wait for the master / metadata server to
            accept a TCP connection before failing with :class:`TransportError`.
        op_timeout: default deadline in seconds of every blocking call (None: no
            deadline, the default: a deadline costs a thread hand-off per call, about
            10 us); each method's ``timeout=`` overrides it.  A timed-out call raises
            :class:`MooncakeTimeoutError`; its batch goes on inside the shim, which keeps
            the call's buffers referenced until it ends (:attr:`in_flight`), so do not
            reuse them before.  Setting it also shortens Mooncake's own waits
            (``MC_RPC_TIMEOUT_MS``, ``MC_TCP_STATUS_TIMEOUT_SEC``) unless already set.
        retry: a :class:`RetryPolicy` for per-key failures that may succeed when tried
            again (None: no retries).

    Blocking methods are thread-safe and release the GIL.  Use as a context
    manager, or call :meth:`close`.  A client cannot be used in a forked child.
    """

    # ------------------------------------------------------------- storing

    def _store(
        self,
        op: int,
        keys: list[Any],
        values: list[Any],
        flags: int,
        replicate_config: Any,
        timeout: Any,
    ) -> list[int]:
        """Puts and upserts of bytes-like values: straight from the values, or with
        L1 registered, copied through the L1 staging area."""
        if self._l1_cdata is None:
            results = self._run(
                op, keys, values, flags=flags, replicate_config=replicate_config, timeout=timeout
            )
        else:
            # The staging area's put_from calls must not read back what they wrote while
            # they hold its slots (the read needs slots too): that is done below, after.
            self._tls.staging_put = True
            try:
                results = self.staging.put(
                    keys,
                    values,
                    upsert=op == _UPSERT,
                    skip_existing=bool(flags & _FLAG_SKIP_EXISTING),
                    replicate_config=replicate_config,
                    timeout=self._staging_timeout(timeout),
                )
            finally:
                self._tls.staging_put = False
        if flags & _FLAG_SKIP_EXISTING:
            self._first_writer_wins(keys, values, results, timeout)
        return results

    def _first_writer_wins(
        self, keys: list[Any], values: Sequence[Any], results: list[int], timeout: Any
    ) -> None:
        """Tell the losers of a put race that their key already existed.

        A skip-existing put looks keys up, then puts the absent ones; Mooncake's put of a
        key that appeared meanwhile succeeds and keeps the first value.  So every key this
        call reports written is read back: if the stored bytes are not this call's, another
        writer won and the key gets :data:`EXISTED`.  (Two writers of identical bytes both
        see "written".)
        """
        todo = [i for i, r in enumerate(results) if r == 0]
        # A racing writer's value becomes readable only when its put ends: wait for it.
        for _attempt in range(_READBACK_ROUNDS):
            if not todo:
                return
            stored = self.batch_get([keys[i] for i in todo], timeout=timeout)
            unseen = []
            for i, value in zip(todo, stored):
                if value is None:
                    unseen.append(i)
                elif value != memoryview(values[i]).cast("B"):
                    results[i] = EXISTED
            todo = unseen
            if todo:
                time.sleep(_READBACK_WAIT)

    def _staging_timeout(self, timeout: Any) -> float | None:
        t = self.op_timeout if timeout is DEFAULT else timeout
        return self.staging.timeout if t is None else t

    @property
    def staging(self) -> Staging:
        """The L1 staging area the bytes APIs use when L1 is registered.

        With an L1 region registered (RDMA), Mooncake moves data only to and from
        that region: ``put`` / ``get`` / ``upsert`` / ``batch_*`` of bytes then copy
        through slots of it (bounded, reused, thread-safe; a value larger than a
        slot is refused with an error naming it).  Created on first use; raises
        :class:`L1Error` when no L1 region is registered.
        """
        if self._staging is None:
            if self._l1_cdata is None:
                raise L1Error(MCS_E_STATE, "no L1 region is registered: nothing to stage through")
            with self._lock:
                if self._staging is None:
                    self._staging = Staging(
                        self, self._l1_obj, block_size=self._l1_block_size or None
                    )
        return self._staging

    # ---------------------------------------------------------- single key

    def put(
        self, key: str | bytes, value: Any, *, replicate_config: Any = None, timeout: Any = DEFAULT
    ) -> None:
        """Store ``value`` (any bytes-like object) under ``key``.

        Mooncake keeps the first value written: if ``key`` already exists this
        succeeds and the old value stays.  Use :meth:`upsert` to replace it, or
        :meth:`put_if_absent` to learn which happened.
        """
        results = self._store(_PUT, [key], [value], 0, replicate_config, timeout)
        self._key_errors([key], results, (), [nbytes(value)])

    def put_if_absent(
        self, key: str | bytes, value: Any, *, replicate_config: Any = None, timeout: Any = DEFAULT
    ) -> bool:
        """Store ``value`` unless ``key`` exists; True if written, False if it existed.

        Of writers racing on one key exactly one is told True: a key this call wrote is
        read back, and if the stored bytes are another writer's, the answer is False
        (two writers of identical bytes both see True).
        """
        results = self._store(_PUT, [key], [value], _FLAG_SKIP_EXISTING, replicate_config, timeout)
        self._key_errors([key], results, (), [nbytes(value)])
        return results[0] != EXISTED

    def upsert(
        self, key: str | bytes, value: Any, *, replicate_config: Any = None, timeout: Any = DEFAULT
    ) -> None:
        """Store ``value`` under ``key``, replacing any existing value."""
        results = self._store(_UPSERT, [key], [value], 0, replicate_config, timeout)
        self._key_errors([key], results, (), [nbytes(value)])

    def get(self, key: str | bytes, *, timeout: Any = DEFAULT) -> bytes | None:
        """The value of ``key``, or None if it does not exist.

        Values up to 256 KiB are read in one round trip through a per-thread
        scratch buffer; larger ones through Mooncake's buffer, or sized first and
        read straight into the returned object (one copy).
        """
        if self._l1_cdata is None and not self._deadline_ms(timeout):
            data, busy = self._scratch()
            if not busy[0]:  # (busy: a finalizer or signal handler called in mid-get)
                busy[0] = True
                try:
                    r = self._single(_GET, key, timeout, 0, data)
                    if r >= 0:
                        return ffi.unpack(data, r)
                finally:
                    busy[0] = False
                if r == OBJECT_NOT_FOUND:
                    return None
                # Larger than the scratch buffer, or an error the retry policy may retry.
                if r != INVALID_PARAMS and not (self.retry is not None and is_retryable(r)):
                    raise error_for(r, f"key {key!r}: {describe(r)}")
        elif self._l1_cdata is not None:
            return self.staging.get([key], timeout=self._staging_timeout(timeout))[0]
        return self._drive(batch_get_plan([key]), timeout)[0]

    def exists(self, key: str | bytes, *, timeout: Any = DEFAULT) -> bool:
        """True if ``key`` exists (this also renews its read lease)."""
        r = self._single(_EXISTS, key, timeout)
        if r < 0:
            if self.retry is not None and is_retryable(r):
                return self.batch_exists([key], timeout=timeout)[0]
            raise error_for(r, f"key {key!r}: {describe(r)}")
        return r == 1

    def remove(self, key: str | bytes, force: bool = False, *, timeout: Any = DEFAULT) -> bool:
        """Remove ``key``; True if removed, False if it was already absent.

        Raises :class:`HasLeaseError` if the key was read in the last few seconds
        (Mooncake's read lease); ``force=True`` removes it anyway.
        """
        r = self._single(_REMOVE, key, timeout, _FLAG_FORCE if force else 0)
        if r < 0 and self.retry is not None and is_retryable(r):
            r = self.batch_remove([key], force, timeout=timeout)[0]
        if r == OBJECT_NOT_FOUND:
            return False
        self._key_errors([key], [r])
        return True

    def size(self, key: str | bytes, *, timeout: Any = DEFAULT) -> int | None:
        """Size in bytes of the value of ``key``, or None if it does not exist."""
        r = self._single(_SIZE, key, timeout)
        self._key_errors([key], [r], (OBJECT_NOT_FOUND,))
        return None if r == OBJECT_NOT_FOUND else r

    # --------------------------------------------------------------- batch

    def batch_put(
        self,
        keys: Sequence[str | bytes],
        values: Sequence[Any],
        *,
        skip_existing: bool = False,
        replicate_config: Any = None,
        timeout: Any = DEFAULT,
    ) -> list[int]:
        """Store values under keys as one batch; per-key status, 0 = stored.

        With ``skip_existing=True`` keys are looked up first and the present
        ones get :data:`EXISTED` (1) instead of being sent; keys written are read
        back, so of racing writers exactly one sees 0 (see :meth:`put_if_absent`).
        Negative statuses are Mooncake error codes (see :func:`mooncake_cffi.error_name`).
        """
        flags = _FLAG_SKIP_EXISTING if skip_existing else 0
        return self._store(
            _PUT, as_list(keys), as_list(values, "values"), flags, replicate_config, timeout
        )

    def batch_upsert(
        self,
        keys: Sequence[str | bytes],
        values: Sequence[Any],
        *,
        replicate_config: Any = None,
        timeout: Any = DEFAULT,
    ) -> list[int]:
        """Like :meth:`batch_put` but replaces existing values; per-key status."""
        return self._store(
            _UPSERT, as_list(keys), as_list(values, "values"), 0, replicate_config, timeout
        )

    def batch_get(
        self, keys: Sequence[str | bytes], *, timeout: Any = DEFAULT
    ) -> list[bytes | None]:
        """Values of the keys (None for a missing key), read as one batch.

        One round trip in the common case: Mooncake reads the values into its
        local buffer (``local_buffer_size``) and they are copied out once.  Keys
        that did not fit there are sized and read separately; a value replaced by
        a larger one meanwhile is still read whole.  With L1 registered, values
        are read through the L1 staging area (:attr:`staging`).
        """
        keys = as_list(keys)
        if self._l1_cdata is not None:
            return self.staging.get(keys, timeout=self._staging_timeout(timeout))
        if len(keys) == 1:  # one round trip through the scratch buffer, as get() does
            return [self.get(keys[0], timeout=timeout)]
        return self._drive(batch_get_plan(keys), timeout)

    def batch_size(
        self, keys: Sequence[str | bytes], *, timeout: Any = DEFAULT
    ) -> list[int | None]:
        """Size in bytes of each key's value (None for a missing key), as one batch."""
        keys = as_list(keys)
        results = self._keys_list(_SIZE, keys, 0, timeout)
        self._key_errors(keys, results, (OBJECT_NOT_FOUND,))
        return [None if r == OBJECT_NOT_FOUND else r for r in results]

    def lookup_prefix(self, keys: Sequence[str | bytes], *, timeout: Any = DEFAULT) -> int:
        """How many leading ``keys`` are stored: the index of the first missing one.

        KV caches ask "how many leading chunks of this prompt are stored?".  Keys are
        asked in key order.  By default the first ``max(16, n // 8)`` keys are asked
        (128 of 1,024), and the rest only if all of those are present, so an early miss
        asks (and renews the read lease of) only that first window.  A second round trip
        costs about as much as a 1,024-key lookup's keys cost Mooncake, so the client
        adapts: after a lookup that found every key, the next one asks all keys in one
        call (as :meth:`batch_exists` does), until a lookup finds a miss again.
        ``len(keys)`` when all are present; 0 for an empty sequence.
        """
        keys = as_list(keys)
        n = len(keys)
        first = n if self._prefix_all_hit else min(n, max(PREFIX_FIRST_WINDOW, n // 8))
        done = 0
        for window in (keys[:first], keys[first:]):
            if not window:
                break
            found, codes = self._keys_call(_EXISTS, window, 0, timeout, exists_list)
            if found is None:  # some key failed: raise its error
                self._key_errors(window, codes)
                raise AssertionError("unreachable")  # pragma: no cover
            if False in found:
                self._prefix_all_hit = False
                return done + found.index(False)
            done += len(window)
        self._prefix_all_hit = n > 0
        return done

    def namespace(self, prefix: str | bytes) -> Namespace:
        """A view of this client whose key methods work inside ``prefix``.

        ``client.namespace("llama3-70b/fp16/v2/")`` prepends the prefix to every key
        on the way in and strips it on the way out (see :class:`Namespace`).
        """
        return Namespace(self, prefix)

    def batch_exists(self, keys: Sequence[str | bytes], *, timeout: Any = DEFAULT) -> list[bool]:
        """Whether each key exists, looked up as one batch."""
        if type(keys) is not list:
            keys = as_list(keys)
        start = time.monotonic() if self.retry is not None else 0.0
        found, codes = self._keys_call(_EXISTS, keys, 0, timeout, exists_list)
        if found is None:  # some key failed: retry per the policy, else raise its error
            results = self._retried(_EXISTS, keys, codes, start, timeout)
            self._key_errors(keys, results)
            found = list(map(bool, results))
        return found

    def batch_remove(
        self, keys: Sequence[str | bytes], force: bool = False, *, timeout: Any = DEFAULT
    ) -> list[int]:
        """Remove keys as one batch; per-key status: 0 removed, -704 absent, -706 leased, ..."""
        return self._keys_list(_REMOVE, as_list(keys), _FLAG_FORCE if force else 0, timeout)

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
        timeout: Any = DEFAULT,
    ) -> list[int]:
        """Store from buffer-protocol objects without copying; per-key status.

        ``sizes`` (default: each buffer's length) may send a prefix of a buffer.
        With L1 registered, every buffer must lie inside the L1 region.  If the
        call times out, Mooncake may still be reading the buffers: leave them
        unchanged until :attr:`in_flight` no longer counts the batch.
        """
        if upsert and skip_existing:
            raise ValueError("upsert and skip_existing exclude each other")
        if skip_existing:
            keys, buffers = as_list(keys), as_list(buffers, "buffers")
            results = self._run(
                _PUT,
                keys,
                buffers,
                sizes,
                flags=_FLAG_SKIP_EXISTING,
                replicate_config=replicate_config,
                timeout=timeout,
            )
            if not getattr(self._tls, "staging_put", False):
                sent = (
                    buffers
                    if sizes is None
                    else [memoryview(b).cast("B")[:n] for b, n in zip(buffers, sizes)]
                )
                self._first_writer_wins(keys, sent, results, timeout)
            return results
        return self._run(
            _UPSERT if upsert else _PUT,
            as_list(keys),
            as_list(buffers, "buffers"),
            sizes,
            flags=_FLAG_SKIP_EXISTING if skip_existing else 0,
            replicate_config=replicate_config,
            timeout=timeout,
        )

    def get_into(
        self,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
        *,
        timeout: Any = DEFAULT,
    ) -> list[int]:
        """Read values into writable buffers without copying.

        Returns per key the number of bytes read, or a negative code: -704
        (OBJECT_NOT_FOUND) for a missing key, -600 (INVALID_PARAMS) when the
        buffer is smaller than the value.  If the call times out, Mooncake may
        still write into the buffers: do not reuse them (or read them) until
        :attr:`in_flight` no longer counts the batch.
        """
        return self._run(
            _GET, as_list(keys), as_list(buffers, "buffers"), sizes, writable=True, timeout=timeout
        )

    # --------------------------------------------------------------- stats

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-lane counters and batch latency percentiles (microseconds).

        Keys are lane names (``lookup``, ``retrieve``, ``store``, ``delete``,
        ``shared``).  A lane served by the shared pool reports ``workers == 0``
        and counts the operations routed to it (whichever threads ran them); the
        ``shared`` lane counts what its threads ran.  ``merged`` counts Mooncake
        calls that served several queued batches.  Per-operation counters:
        :meth:`op_stats`.
        """
        return _stats.lane_stats(self._h())

    def op_stats(self) -> dict[str, dict[str, Any]]:
        """Per-operation counters: calls, keys, failed_calls, failed_keys, bytes,
        timeouts, no_space, sum_us and a latency histogram (``buckets``: batches
        under 2**i microseconds), counting fast paths and every lane alike.  A call
        counts as failed only when its caller saw a failure."""
        return _stats.op_stats(self._h())
