"""How :class:`mooncake_cffi.store.MooncakeDistributedStore` runs its calls: one shim call each,
answered as Mooncake's own binding answers, never with an exception where it returns a code.

:class:`StoreCalls` holds a :class:`~mooncake_cffi.Client`'s native side and blocking calls.
Each data call takes the calling thread's reused memory and makes one shim call
(``mcs_client_run_one`` for one key, ``mcs_client_run_keys`` for keys only, ``mcs_client_run``
for the rest).  With a deadline (``op_timeout``) the calls at addresses and the bytes batch
writes fill a reused batch of their own (``Runner.run_until``: a timed-out one is left to the
shim and the thread takes another); the others take a private batch through
:class:`~_core.blocking.BlockingCalls`, which keeps what a timed-out call left with the shim.
Status codes of the shim become Mooncake's (:func:`code_of`).  A batch the shim refuses as a
whole (an empty key, a key twice, a NULL buffer) is answered key by key, as Mooncake does, by
:mod:`.repair`.  ``get_buffer`` values come back as :class:`BufferHandle` objects over
Mooncake's own memory, released when the last of a batch's handles is dropped.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._capi.binding import ffi
from .._capi.marshal import Packed, address, gather_values, pack_keys
from .._capi.pointers import ranges_struct, staging_area
from .._capi.runner import Runner
from .._capi.shm import shm_alloc, shm_free
from .._core.types import DEFAULT
from ..errors import MooncakeError
from ..status import FLAG_LAND, NO_AVAILABLE_HANDLE, OP_EXISTS, OP_GET, OP_PUT, OP_UPSERT
from . import repair
from .buffer_handles import handles
from .repair import Failed, code_of

_MIB = 1 << 20

__all__ = ["StoreCalls", "code_of"]

INVALID_PARAMS = -600

_NULL = ffi.NULL
_unpack = ffi.unpack
_from_buffer = ffi.from_buffer


class StoreCalls:
    """The drop-in's calls over ``client`` (a :class:`mooncake_cffi.Client`); thread-safe.

    ``staged``: the bytes calls copy values through memory registered for the call, and gets
    read through Mooncake's local buffer (protocols other than tcp move data only from and
    to registered memory).  ``copies`` False (a ``local_buffer_size`` of 0): the bytes calls
    (``put``, ``put_batch``, ``put_parts``, their upserts, ``get``, ``get_batch``) answer
    -600 and ``b""``, as Mooncake's do with no local buffer to copy through; the zero-copy
    calls work.  ``shared`` (a client set up with ``setup_dummy``): the staging memory is a
    segment of Mooncake's shared memory (``MooncakeHostMemAllocator``'s kind), the only memory
    a dummy client's service reads from.  ``land`` (the drop-in failing open, over tcp): every
    GET into the caller's memory carries ``MCS_FLAG_LAND``, so a load that outlives its
    deadline lands in the shim's memory, never in the caller's, which a stack reuses as soon
    as the call has failed (``shim/mcs.h``).
    """

    def __init__(
        self,
        client: Any,
        staged: bool = False,
        copies: bool = True,
        shared: bool = False,
        keys_on_rpc_wait: bool = False,
        per_mib: float | None = None,
        land: bool = False,
    ) -> None:
        self.client = client
        parts = client.parts  # the client's layers, declared (mooncake_cffi._core.parts)
        self.native = parts.native
        self.calls = parts.calls
        #: The client's shim calls, which its blocking driver makes too.
        self.runner: Runner = parts.batches.runner
        self.values = parts.values
        self.staged = staged
        self.copies = copies
        self.shared = shared
        #: Whether calls on keys alone (no buffer) ignore the client's deadline: they need
        #: only the master, and its RPC wait is as short (the drop-in's fail-open default).
        self.keys_deadline = parts.calls.op_timeout is not None and not keys_on_rpc_wait
        #: Seconds a data call's deadline grows by per MiB it moves (None: it does not):
        #: the drop-in's fail-open default, so that a large transfer on a loaded machine is
        #: not taken for a store that stopped answering.
        self.per_mib = per_mib if parts.calls.op_timeout is not None else None
        #: The flags of a GET into the caller's memory.
        self.get_flags = FLAG_LAND if land and not staged else 0
        # BufferHandle batches alive, and whether close() waits for them to be dropped.
        self._held = 0
        self._closing = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the client, or once the last BufferHandle of it is dropped: a handle's
        memory stays valid until then, as the memory of Mooncake's handles does."""
        with self._lock:
            self._closing = True
            wait = self._held > 0
        if not wait:
            self.client.close()

    def _handle_dropped(self) -> None:
        with self._lock:
            self._held -= 1
            last = self._closing and self._held == 0
        if last and not sys.is_finalizing():  # (at exit, the client's atexit hook closes it)
            # Closing takes ~0.5 s: not in the finalizer that dropped the handle.
            threading.Thread(target=self.client.close, name="mooncake-store-close").start()

    def _private(self, build: Callable[[], Packed], what: str = "") -> list[int]:
        """Run a private batch (``build()``): its per-key results, or Failed."""
        try:
            packed = build()
            self.calls.run_packed(packed, self._limit(packed), what)
        except MooncakeError as exc:
            raise Failed(exc.code) from None
        return packed.unpack()

    def _limit(self, packed: Packed) -> Any:
        """A private batch's time limit: the client's, plus :attr:`per_mib` for each MiB
        it moves."""
        if self.per_mib is None or self.calls.op_timeout is None:
            return DEFAULT
        return self._limit_for(packed.payload())

    def _limit_for(self, payload: int) -> Any:
        """The time limit of a call moving ``payload`` bytes (see :meth:`_limit`)."""
        per_mib, base = self.per_mib, self.calls.op_timeout
        if per_mib is None or base is None:
            return DEFAULT
        return base + per_mib * payload / _MIB

    # ------------------------------------------------------------ one key

    def one(self, op: int, key: Any, flags: int = 0, buf: Any = _NULL, size: int = 0) -> int:
        """One key through ``mcs_client_run_one``: its result, or Mooncake's code."""
        deadline = self.keys_deadline if buf is _NULL else self.calls.op_timeout is not None
        r = self.runner.one_now(op, key, flags, buf, size, deadline)
        if isinstance(r, int):
            return r
        if r is not None:
            return repair.one_refused(r[0], op, key.encode())
        rb = self.runner.reused(deadline)
        if rb is None:
            return self._one_private(op, key, flags, buf, size)
        kb = key.encode() if type(key) is str else repair.key_bytes(key)
        rc, result = self.runner.one(rb, op, kb, flags, buf, size)
        if rc:
            return repair.one_refused(rc, op, kb)
        return result

    def _one_private(self, op: int, key: Any, flags: int, buf: Any, size: int) -> int:
        """One key with a deadline (a buffer: the thread's reused batch when free, see
        :meth:`_until`), or through a private batch (re-entry, no buffer): either keeps
        ``buf`` (cdata, which keeps its Python buffer) alive for as long as the shim may
        use it."""
        kb = repair.key_bytes(key)
        if buf is not _NULL:
            addr = int(ffi.cast("uintptr_t", buf))
            timed = self._addresses_until(op, [kb], [addr], [size], flags, buf)
            if timed is not None:
                rc, results = timed
                return results[0] if rc == 0 else repair.one_refused(rc, op, kb)
        try:
            if buf is _NULL:
                packed = Packed(op, [kb], flags=flags)
            else:
                packed = Packed(op, [kb], [addr], [size], flags=flags, addresses=True)
                packed.hold(buf)
            self.calls.run_packed(packed, self._limit(packed), "")
        except MooncakeError as exc:
            return repair.one_refused(exc.code, op, kb)
        return int(packed.results[0])

    def get(self, key: Any) -> bytes:
        """The value of ``key``; b"" when it cannot be read (missing, or any failure).

        One round trip into this thread's read buffer for a value up to its size; a larger
        one (or a call with a deadline: a read that times out must not go on writing into
        that buffer) through Mooncake's local buffer (:meth:`get_values`)."""
        if not self.copies:
            return b""
        runner = self.runner
        rb = runner.reused(self.calls.op_timeout is not None)
        state = runner.state()
        if rb is None or self.staged or state.scratch_busy:
            return self._get_values([key])[0]
        kb = key.encode() if type(key) is str else repair.key_bytes(key)
        rc, r = runner.get_scratch(rb, state, kb)
        if type(r) is bytes:
            return r
        if rc == 0 and r == INVALID_PARAMS:  # larger than the read buffer: read it whole
            return self._get_values([key])[0]
        return b""

    def get_into(self, key: Any, ptr: int, size: int) -> int:
        if not size or not ptr:
            return INVALID_PARAMS
        return self.one(OP_GET, key, self.get_flags, address(ptr), size)

    def put_from(self, op: int, key: Any, ptr: int, size: int, config: Any) -> int:
        """Store ``size`` bytes at ``ptr`` (``op``: PUT or UPSERT); Mooncake's code."""
        if not size:
            repair.key_bytes(key)
            return 0  # Mooncake's answer: nothing to store, nothing stored
        if not ptr:
            return INVALID_PARAMS
        if config is not None:
            return self.addresses(op, [key], [ptr], [size], config)[0]
        return self.one(op, key, 0, address(ptr), size)

    def put(self, op: int, key: Any, value: Any, config: Any) -> int:
        """Store a bytes-like value (``op``: PUT or UPSERT); Mooncake's code."""
        if not self.copies:
            return INVALID_PARAMS
        if config is not None or self.staged:
            return self.put_values(op, [key], [value], config)
        buf = _from_buffer(value)
        if not len(buf):
            return INVALID_PARAMS
        return self.one(op, key, 0, buf, len(buf))

    # ------------------------------------------------------------ keys only

    def exists(self, keys: list[Any]) -> list[int]:
        """``batch_is_exist``: 1 / 0 / a negative code per key."""
        return self.keys(OP_EXISTS, keys)

    def exists_one(self, key: Any) -> int:
        """``is_exist``: 1, 0 or a negative code."""
        return self.one(OP_EXISTS, key)

    def keys(self, op: int, keys: list[Any], flags: int = 0) -> list[int]:
        """A batch of keys only (EXISTS, REMOVE): per-key results as Mooncake gives them."""
        n = len(keys)
        if not n:
            return []
        if n == 1:  # the single-key call: Mooncake's answer is the same, and cheaper here
            return [self.one(op, keys[0], flags)]
        r = self.runner.keys_now(op, keys, flags, self.keys_deadline)
        if isinstance(r, list):
            return r
        if r is not None:
            return self.keys_refused(r[0], op, keys, flags)
        rb = self.runner.reused(self.keys_deadline)
        if rb is None:
            return self._keys_private(op, keys, flags)
        rc, results = self.runner.keys(rb, op, pack_keys(keys), n, flags)
        if rc == 0:
            return results
        return self.keys_refused(rc, op, keys, flags)

    def _keys_private(self, op: int, keys: list[Any], flags: int) -> list[int]:
        try:
            return self._private(lambda: Packed(op, keys, flags=flags))
        except Failed as f:
            return self.keys_refused(f.rc, op, keys, flags)

    def keys_refused(self, rc: int, op: int, keys: list[Any], flags: int) -> list[int]:
        """The answers to a batch of keys only the shim refused with ``rc`` (run again
        privately where that can help, see :func:`~.repair.batch_refused`)."""

        def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
            return self._private(lambda: Packed(op, [keys[i] for i in idx], flags=flags))

        return repair.batch_refused(rc, keys, repair.key_answer(op), run)

    # ------------------------------------------------------------ memory at addresses

    def addresses(
        self, op: int, keys: list[Any], addrs: Sequence[int], sizes: Sequence[int], config: Any
    ) -> list[int]:
        """GET into, or PUT / UPSERT from, memory at integer addresses; per-key results."""
        n = len(keys)
        if len(addrs) != n or len(sizes) != n:
            return [INVALID_PARAMS] * n
        flags = self.get_flags if op == OP_GET else 0
        if config is not None:
            if not n:
                return []
            try:
                return self._private(
                    lambda: Packed(op, keys, addrs, sizes, replicate_config=config, addresses=True)
                )
            except Failed as f:
                return self._addresses_refused(f.rc, op, keys, addrs, sizes, config)
        if n == 1:  # Mooncake's one-key call, no batch to fill
            return [self.one(op, keys[0], flags, address(addrs[0]), sizes[0])]
        if not n:
            return []
        rb = self.calls.reused(DEFAULT)
        if rb is not None:
            rc, results = self.runner.at_addresses(rb, op, keys, addrs, sizes, flags)
        else:
            timed = self._addresses_until(op, keys, addrs, sizes, flags)
            if timed is None:
                try:
                    return self._private(
                        lambda: Packed(op, keys, addrs, sizes, flags=flags, addresses=True)
                    )
                except Failed as f:
                    return self._addresses_refused(f.rc, op, keys, addrs, sizes, config)
            rc, results = timed
        if rc == 0:
            return results
        return self._addresses_refused(rc, op, keys, addrs, sizes, config)

    def _addresses_until(
        self,
        op: int,
        keys: list[Any],
        addrs: Sequence[int],
        sizes: Sequence[int],
        flags: int,
        hold: Any = None,
    ) -> tuple[int, list[int]] | None:
        """A call at addresses with the client's deadline: see :meth:`_until`."""
        if self.calls.op_timeout is None:
            return None  # no deadline: the reused batch was busy
        try:
            payload, least = sum(sizes), min(sizes)
        except (TypeError, ValueError):
            return None  # the private batch names the bad size
        if least < 0:
            return None  # as above
        return self._until(
            lambda rb: rb.fill_addresses(op, keys, flags, addrs, sizes), keys, payload, hold
        )

    def _until(
        self, fill: Callable[[Any], Any], keys: list[Any], payload: int, hold: Any = None
    ) -> tuple[int, list[int]] | None:
        """A call with the client's deadline (the caller has checked there is one; plus
        :attr:`per_mib` for its ``payload`` bytes) through the thread's reused batch,
        filled by ``fill``: (the shim's status, per-key results; a timeout's status is
        MCS_E_TIMEOUT), or None when it must take a private batch."""
        calls = self.calls
        limit = calls.deadline_ms(self._limit_for(payload))
        try:
            return self.runner.run_until(fill, keys, limit, calls.pending_write, hold)
        except MooncakeError as exc:
            return exc.code, []

    def _addresses_refused(
        self,
        rc: int,
        op: int,
        keys: list[Any],
        addrs: Sequence[int],
        sizes: Sequence[int],
        config: Any,
    ) -> list[int]:
        flags = self.get_flags if op == OP_GET else 0

        def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
            sub = [keys[i] for i in idx]
            a, s = [addrs[i] for i in idx], [sizes[i] for i in idx]
            return self._private(
                lambda: Packed(op, sub, a, s, flags=flags, replicate_config=config, addresses=True)
            )

        def bad(i: int) -> int | None:
            return INVALID_PARAMS if not addrs[i] or not sizes[i] else None

        answer = repair.key_answer(op)
        return repair.batch_refused(rc, keys, answer, run, bad, reverse=op == OP_PUT)

    def address_parts(
        self,
        op: int,
        keys: list[Any],
        all_addrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        config: Any,
    ) -> list[int]:
        """Mooncake's multi-buffer calls: key i's value in the buffers ``all_addrs[i]``."""
        n = len(keys)
        if len(all_addrs) != n or len(all_sizes) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []

        flags = self.get_flags if op == OP_GET else 0

        def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
            sub = [keys[i] for i in idx]
            a, s = [all_addrs[i] for i in idx], [all_sizes[i] for i in idx]
            return self._private(
                lambda: Packed(
                    op,
                    sub,
                    a,
                    s,  # type: ignore[arg-type]
                    flags=flags,
                    replicate_config=config,
                    parts=True,
                    addresses=True,
                )
            )

        def bad(i: int) -> int | None:
            a, s = all_addrs[i], all_sizes[i]
            if not a or len(a) != len(s) or 0 in a or 0 in s:
                return INVALID_PARAMS
            return None

        try:
            return run(list(range(n)), keys)
        except Failed as f:
            answer = repair.key_answer(op)
            return repair.batch_refused(f.rc, keys, answer, run, bad, reverse=op == OP_PUT)

    # ------------------------------------------------------------ bytes values
    # (the bytes writes that are not one key: Mooncake's put_batch / upsert_batch, one code
    # for the batch; put_parts / upsert_parts and the tensor calls' values, several parts
    # each; and the staged writes of protocols that move data only from registered memory)

    def put_values(self, op: int, keys: list[Any], values: Sequence[Any], config: Any) -> int:
        """Mooncake's put_batch / upsert_batch (and put / upsert with a config): one code,
        0 or the first failing key's."""
        if not self.copies:
            return INVALID_PARAMS
        n = len(keys)
        if len(values) != n:
            return INVALID_PARAMS
        if not n:
            return 0
        if self.staged:
            results = self._put_staged(op, keys, values, config)
            worst = min(results)
            return worst if worst < 0 else 0
        if n == 1 and config is None:
            return self.put(op, keys[0], values[0], None)
        try:
            results = self._values_until(op, keys, values, config)
        except Failed as f:
            if any(not memoryview(v).nbytes for v in values):
                return INVALID_PARAMS  # as Mooncake's: the batch fails whole, nothing stored

            def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
                sub, vals = [keys[i] for i in idx], [values[i] for i in idx]
                return self._private(lambda: Packed(op, sub, vals, replicate_config=config))

            answer = repair.key_answer(op)
            results = repair.batch_refused(f.rc, keys, answer, run, reverse=op == OP_UPSERT)
        worst = min(results)
        return worst if worst < 0 else 0

    def _values_until(
        self, op: int, keys: list[Any], values: Sequence[Any], config: Any
    ) -> list[int]:
        """Per-key results of a bytes write (the thread's reused batch with a deadline, or
        a private one); Failed when the shim refuses the batch."""
        timed = None
        if self.calls.op_timeout is not None:
            try:
                payload = sum(memoryview(v).nbytes for v in values)
            except TypeError:
                payload = -1  # the private batch names the value that is not bytes-like
            if payload >= 0:
                timed = self._until(
                    lambda rb: rb.fill(op, keys, 0, values, None, False, config), keys, payload
                )
        if timed is None:
            return self._private(lambda: Packed(op, keys, values, replicate_config=config))
        rc, results = timed
        if rc:
            raise Failed(rc)
        return results

    def _put_staged(
        self, op: int, keys: list[Any], values: Sequence[Any], config: Any
    ) -> list[int]:
        """Copy the values into one buffer registered for the call and store them from it;
        per-key results."""
        if self.shared:
            return self._put_shared(op, keys, values, config)
        staged = staging_area(values)
        if staged is None:
            return [INVALID_PARAMS] * len(keys)
        area, base, addrs, sizes = staged
        rc = self.register(base, len(area))
        if rc:
            return [rc] * len(keys)
        try:
            return self.addresses(op, keys, addrs, sizes, config)
        finally:
            self.unregister(base)
            del area

    def _put_shared(
        self, op: int, keys: list[Any], values: Sequence[Any], config: Any
    ) -> list[int]:
        """:meth:`_put_staged` through a segment of Mooncake's shared memory, registered with
        a dummy client's service for the call."""
        views = [memoryview(v).cast("B") for v in values]
        if any(not v.nbytes for v in views):
            return [INVALID_PARAMS] * len(keys)
        total = sum(v.nbytes for v in views)
        try:
            base = shm_alloc(total)
        except MooncakeError:
            return [NO_AVAILABLE_HANDLE] * len(keys)
        try:
            addrs, sizes, pos = [], [], 0
            for v in views:
                ctypes.memmove(base + pos, v.tobytes(), v.nbytes)
                addrs.append(base + pos)
                sizes.append(v.nbytes)
                pos += v.nbytes
            rc = self.register(base, total)
            if rc:
                return [rc] * len(keys)
            try:
                return self.addresses(op, keys, addrs, sizes, config)
            finally:
                self.unregister(base)
        finally:
            shm_free(base)

    def put_parts_many(
        self, op: int, keys: list[Any], parts: Sequence[Sequence[Any]], config: Any
    ) -> list[int]:
        """Values made of several bytes-like parts each, stored one after another (a
        tensor: its metadata, then its data); per-key results."""
        n = len(keys)
        if len(parts) != n:
            return [INVALID_PARAMS] * n
        if not n:
            return []
        if self.staged:
            joined = [b"".join(memoryview(x).cast("B").tobytes() for x in p) for p in parts]
            return self._put_staged(op, keys, joined, config)

        def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
            sub, vals = [keys[i] for i in idx], [list(parts[i]) for i in idx]
            return self._private(lambda: Packed(op, sub, vals, replicate_config=config, parts=True))

        def bad(i: int) -> int | None:
            return INVALID_PARAMS if not parts[i] else None

        try:
            return run(list(range(n)), keys)
        except Failed as f:
            answer = repair.key_answer(op)
            return repair.batch_refused(f.rc, keys, answer, run, bad, reverse=op == OP_UPSERT)

    def put_parts(self, op: int, key: Any, parts: Sequence[Any], config: Any) -> int:
        """One value from several bytes-like parts, stored one after another.  As Mooncake's:
        empty parts add nothing, and a value with no bytes at all (no parts, or only empty
        ones) answers 0 and stores nothing (an existing value stays)."""
        if not self.copies:
            return INVALID_PARAMS
        kept = [p for p in parts if memoryview(p).nbytes]
        if not kept:
            return 0
        return self.put_parts_many(op, [key], [kept], config)[0]

    # ------------------------------------------------------------ values out

    def _get_buffer_batch(self, keys: list[Any]) -> tuple[Packed, list[int], int]:
        """Run a GET_BUFFER batch: (it, its results, its id for the release); a
        MooncakeError if it did not run."""
        packed, batch_id = self.runner.get_buffer(keys, self.calls.deadline_ms(DEFAULT))
        return packed, packed.unpack(), batch_id

    def get_values(self, keys: list[Any]) -> list[bytes]:
        """Mooncake's get_batch: the values, b"" for a key that cannot be read."""
        if not keys:
            return [b""]  # what Mooncake's binding answers for no keys
        if not self.copies:
            return [b""] * len(keys)
        if len(keys) == 1 and not self.staged and self.calls.op_timeout is None:
            return [self.get(keys[0])]
        return self._get_values(keys)

    def _get_values(self, keys: list[Any]) -> list[bytes]:
        try:
            packed, results, batch_id = self._get_buffer_batch(keys)
            try:
                values = gather_values(packed, results)
            finally:
                self.runner.release(batch_id)
        except MooncakeError as exc:
            if exc.code not in repair.REPAIRABLE:
                return [b""] * len(keys)
            return repair.values_by_key(self._get_values, keys, b"")
        if None in values:  # missing, or larger than the local buffer: read those whole
            unread = [i for i, v in enumerate(values) if v is None]
            try:
                more = self.values.batch_get([keys[i] for i in unread], DEFAULT)
            except MooncakeError:
                more = [None] * len(unread)
            for i, v in zip(unread, more):
                values[i] = v
        return [b"" if v is None else v for v in values]

    def get_handles(self, keys: list[Any]) -> list[Any]:
        """Mooncake's batch_get_buffer: a BufferHandle per key, None where unread."""
        if not keys:
            return []
        # Held before the batch runs: a close() meanwhile waits for these handles too.
        with self._lock:
            if self._closing:
                return [None] * len(keys)
            self._held += 1
        try:
            packed, results, batch_id = self._get_buffer_batch(keys)
        except BaseException as exc:
            self._handle_dropped()
            if not isinstance(exc, MooncakeError):
                raise
            if exc.code not in repair.REPAIRABLE:
                return [None] * len(keys)
            return repair.values_by_key(self.get_handles, keys, None)
        runner = self.runner

        def release() -> None:
            runner.release(batch_id)
            self._handle_dropped()

        addrs = _unpack(ffi.cast("uintptr_t *", packed.values), len(results))
        return handles(results, addrs, release)

    # ------------------------------------------------------------ registration, ranges

    def register(self, ptr: int, size: int) -> int:
        rc = self.runner.register_buffer(address(ptr), size)
        return code_of(rc) if rc else 0

    def unregister(self, ptr: int) -> int:
        rc = self.runner.unregister_buffer(address(ptr))
        return code_of(rc) if rc else 0

    def get_into_ranges(
        self,
        addrs: Sequence[int],
        all_keys: Sequence[Sequence[Any]],
        dst: Sequence[Sequence[Sequence[int]]],
        src: Sequence[Sequence[Sequence[int]]],
        sizes: Sequence[Sequence[Sequence[int]]],
    ) -> list[list[list[int]]]:
        """Mooncake's get_into_ranges: per buffer, per key, per range, bytes read or a code."""
        shape = repair.ranges_shape(addrs, all_keys, dst, src, sizes)
        if shape is None:  # lists that do not pair up: every range fails, as Mooncake's do
            return repair.ranges_failed(len(addrs), all_keys, dst, INVALID_PARAMS)
        (keys_per_buf, flat_keys, per_key, flat_dst, flat_src, flat_sizes), skipped = shape
        r, keep = ranges_struct(
            addrs, keys_per_buf, flat_keys, per_key, flat_dst, flat_src, flat_sizes
        )
        rc = self.runner.get_into_ranges(r)
        del keep
        if rc:
            return repair.ranges_failed(len(addrs), all_keys, dst, code_of(rc))
        return repair.ranges_nest(_unpack(r.results, len(flat_sizes)), all_keys, dst, skipped)
