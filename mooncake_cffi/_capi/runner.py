"""One runner for every shim call a face makes: the blocking driver and the drop-in share it.

:class:`Runner` holds a :class:`~.native.NativeClient` and makes each data call in one shim
call:

* ``mcs_client_run_one`` for one key (:meth:`Runner.one`, and :meth:`Runner.get_scratch`
  into the thread's read buffer);
* ``mcs_client_run_keys`` for a batch of keys only (:meth:`Runner.keys`);
* ``mcs_client_run`` for a filled batch, of buffers (:meth:`Runner.filled`) or of integer
  addresses (:meth:`Runner.at_addresses`), and with a deadline (:meth:`Runner.run_until`:
  a timed-out one becomes an orphan, and the thread takes a fresh reused batch);
* GET_BUFFER runs, whose values stay valid until :meth:`Runner.release`
  (:meth:`Runner.get_buffer`);
* ``mcs_client_submit`` / ``mcs_client_drain`` / ``mcs_client_wait`` for the batches that run
  in the background (:meth:`Runner.submit`, :meth:`Runner.drain`, :meth:`Runner.wait`).

The fast methods take the calling thread's :class:`~.marshal.ReusedBatch` (from
:meth:`Runner.reused`, which says when a call may use it) and answer the shim's status code,
0 when the call ran, with the per-key results left in the batch's ``results``.  A call that
may not use it runs a private :class:`~.marshal.Packed` batch (:meth:`Runner.run_packed`),
which the shim may keep past a deadline: a timed-out one is kept in the client's
``orphans`` until its batch completes.  What a refused call means is the caller's to say:
the blocking driver raises (:func:`~.marshal.refused`), the drop-in answers Mooncake's codes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ClosedError, MooncakeTimeoutError, error_for
from ..outcome import PendingWrite
from ..status import MCS_E_CLOSED, MCS_E_TIMEOUT, OP_GET, OP_GET_BUFFER, OPS
from . import binding
from .binding import check, ffi, lib
from .completion import Completion
from .marshal import Packed, ReusedBatch, gather_values, refused, results_list
from .native import SCRATCH_BYTES, NativeClient, ThreadState

__all__ = ["Runner"]

_fast_run_one: Callable[[int, int, int, object], int | tuple[int] | None] | None
_fast_run_keys: Callable[[int, int, int, object], list[int] | tuple[int] | None] | None
_Lookups: Any
try:
    from ._fastcall import Lookups as _Lookups
    from ._fastcall import run_keys as _fast_run_keys
    from ._fastcall import run_one as _fast_run_one
except ImportError:  # a build without it (the calls below then go through cffi)
    _fast_run_one = _fast_run_keys = _Lookups = None

#: Whether the calls on keys alone (one key without a buffer, or a list of keys) go through
#: the build's C functions (``_fastcall``) rather than cffi.
FAST_CALLS = _fast_run_one is not None

_NULL = ffi.NULL
_COMPLETION_SIZE = ffi.sizeof("struct mcs_completion")
_run_one = lib.mcs_client_run_one
_run_keys = lib.mcs_client_run_keys
_run = lib.mcs_client_run


class Runner:
    """The shim calls of one client (``native``); thread-safe as the shim is.  It holds
    nothing but the native client, so dropping a client's last reference frees it at once."""

    __slots__ = ("native",)

    def __init__(self, native: NativeClient) -> None:
        self.native = native

    # ------------------------------------------------------------ the reused batch

    def reused(self, deadline: bool) -> ReusedBatch | None:
        """This thread's reused batch, or None when the call must take a private one: it has
        a ``deadline`` (the shim may keep a timed-out batch), timed-out batches wait to be
        reaped, or the reused batch is in use (a finalizer or signal handler calling in
        mid-call).  Every fast path asks here: it is on the hot path of every small call."""
        native = self.native
        try:
            rb: ReusedBatch = native.tls.state.batch
        except AttributeError:
            rb = native.thread().batch
        if deadline or native.orphans or rb.busy:
            return None
        return rb

    def state(self) -> ThreadState:
        """This thread's reusable memory (its batch, read buffer and id out-parameter)."""
        native = self.native
        try:
            state: ThreadState = native.tls.state
        except AttributeError:
            state = native.thread()
        return state

    def one_now(
        self, op: int, key: Any, flags: int, buf: Any, size: int, deadline: bool
    ) -> int | tuple[int] | None:
        """One ``str`` key through ``mcs_client_run_one``, in one frame: the key's result;
        ``(the shim's status,)`` when the shim refused the call; None when the call must go
        the general way (it has a ``deadline``, timed-out batches wait to be reaped, the
        thread's reused batch is not free: see :meth:`reused`, or the key is not a
        UTF-8-encodable ``str``).  ``buf``: cdata of the key's buffer, or NULL.

        The single-key path of both faces.  Right after a round trip each Python operation
        costs several times its warm time.  Without a buffer (exists, size, remove) the
        call is one C function (``_fastcall.run_one``: the key's UTF-8 read where the str
        keeps it, the result on its own stack); with one (or a build without it), the
        key is encoded and run through :meth:`reused` and :meth:`one`.
        """
        native = self.native
        if buf is _NULL and _fast_run_one is not None:
            if deadline or native.orphans:
                return None
            return _fast_run_one(native.address, op, flags, key)
        rb = self.reused(deadline)
        if rb is None or type(key) is not str:
            return None
        try:
            kb = key.encode()
        except UnicodeEncodeError:
            return None
        rc, result = self.one(rb, op, kb, flags, buf, size)
        return result if rc == 0 else (rc,)

    def keys_now(
        self, op: int, keys: list[Any], flags: int, deadline: bool
    ) -> list[int] | tuple[int] | None:
        """A batch of keys only (EXISTS, SIZE, REMOVE) through ``mcs_client_run_keys`` in
        one C function (``_fastcall.run_keys``): the keys' results as ints; ``(the shim's
        status,)`` when the shim refused the batch; None when the call must go the general
        way (it has a ``deadline``, timed-out batches wait to be reaped, the build has no
        C function, or ``keys`` is not a list of UTF-8-encodable ``str``).

        The keys are packed and the results listed in C: right after a round trip,
        ``"\\0".join(keys).encode()`` and ``ffi.unpack`` cost several times their warm
        time (24 and 21 us at 1,024 keys, measured).
        """
        native = self.native
        if _fast_run_keys is None or deadline or native.orphans:
            return None
        return _fast_run_keys(native.address, op, flags, keys)

    def lookups(
        self,
        breaker: Any,
        live: Any,
        health: Any,
        rest: Callable[[Any, list[int] | tuple[int] | int | None, float], Any],
        one: bool = False,
    ) -> Callable[[Any], Any] | None:
        """A lookup (EXISTS) made whole in one C function (``_fastcall.Lookups``), for the
        drop-in's fail-open layer; None in a build without it.

        Called with a list of keys (or, made with ``one``, one ``str`` key), it runs them
        (``mcs_client_run_keys``, ``mcs_client_run_one``) while this client is open with no
        timed-out batch waiting and ``breaker.open`` is false. It answers the keys' list, or
        the key's result, when no result is negative and the clock (``time.monotonic``) is
        still before ``live.discover_at`` and ``health.up_until`` (asked of a list, or of
        one key's 1).
        Every other case goes to ``rest(keys, raw, started)``: ``raw`` None when nothing
        ran, ``(the shim's status,)`` when it refused, or the result(s) to check;
        ``started`` the clock before the call. Right after a round trip, the Python that
        checks those conditions costs as much as the rest of the drop-in's layers together
        (measured: 20-25 us of a 16-key lookup after a 10 ms gap)."""
        if _Lookups is None:
            return None
        lookup: Callable[[Any], Any] = _Lookups(self.native, breaker, live, health, rest, one=one)
        return lookup

    def one(
        self, rb: ReusedBatch, op: int, kb: bytes, flags: int, buf: Any, size: int
    ) -> tuple[int, int]:
        """One key (``kb``, encoded) through ``mcs_client_run_one``: (the shim's status, the
        key's result).  ``buf``: cdata of its buffer, or NULL."""
        results = rb.results
        rb.busy = True
        try:
            rc = _run_one(self.native.handle, results, op, flags, kb, len(kb), buf, size)
            return rc, results[0]
        finally:
            rb.busy = False

    def get_scratch(self, rb: ReusedBatch, state: ThreadState, kb: bytes) -> tuple[int, Any]:
        """Read one key into the thread's read buffer (:data:`~.native.SCRATCH_BYTES`):
        ``(0, its bytes)``, ``(0, its negative result)`` (missing, larger than the buffer,
        a failure), or ``(the shim's nonzero status, None)``."""
        data = state.scratch
        results = rb.results
        rb.busy = state.scratch_busy = True
        try:
            rc = _run_one(self.native.handle, results, OP_GET, 0, kb, len(kb), data, SCRATCH_BYTES)
            if rc:
                return rc, None
            r = results[0]
            return 0, (ffi.unpack(data, r) if r >= 0 else r)
        finally:
            rb.busy = state.scratch_busy = False

    def keys(
        self, rb: ReusedBatch, op: int, packed_keys: bytes, n: int, flags: int
    ) -> tuple[int, list[int]]:
        """A batch of ``n`` keys only (EXISTS, SIZE, REMOVE), packed by
        :func:`~.marshal.pack_keys`, through ``mcs_client_run_keys``: (the shim's status,
        the results as ints, ``[]`` when it refused).  The results are read before the
        reused batch is free again: a call nested in this one (a finalizer, a signal
        handler) cannot overwrite them."""
        if n > rb.cap:
            rb.grow(n)
        results = rb.results
        rb.busy = True
        try:
            rc = _run_keys(
                self.native.handle, results, op, flags, packed_keys, len(packed_keys) + 1, n
            )
            return rc, (results_list(results, n) if rc == 0 else [])
        finally:
            rb.busy = False

    def filled(
        self,
        rb: ReusedBatch,
        op: int,
        keys: list[Any],
        flags: int,
        buffers: Sequence[Any] | None,
        sizes: Sequence[int] | None,
        writable: bool,
        replicate_config: Any,
    ) -> tuple[int, list[int]]:
        """A batch of keys and buffers through the reused struct: (the shim's status, the
        per-key results).  Raises for buffers that cannot be used."""
        rb.busy = True
        try:
            keep = rb.fill(op, keys, flags, buffers, sizes, writable, replicate_config)
            rc: int = _run(self.native.checked(), _NULL, rb.batch)
            del keep
            return rc, (results_list(rb.results, len(keys)) if rc == 0 else [])
        finally:
            rb.busy = False

    def at_addresses(
        self,
        rb: ReusedBatch,
        op: int,
        keys: list[Any],
        addrs: Sequence[int],
        sizes: Sequence[int],
        flags: int = 0,
    ) -> tuple[int, list[int]]:
        """GET into, or PUT / UPSERT from, memory at integer addresses through the reused
        struct: (the shim's status, the per-key results).  A TypeError for addresses or
        sizes that are not non-negative ints."""
        rb.busy = True
        try:
            keep = rb.fill_addresses(op, keys, flags, addrs, sizes)
            rc: int = _run(self.native.handle, _NULL, rb.batch)
            del keep
            return rc, (results_list(rb.results, len(keys)) if rc == 0 else [])
        finally:
            rb.busy = False

    # ------------------------------------------------------------ private batches

    def run_packed(
        self,
        packed: Packed,
        timeout_ms: int,
        what: str = "",
        pending_write: Callable[[Packed, int], PendingWrite | None] | None = None,
    ) -> int:
        """Run a private batch with a deadline of ``timeout_ms`` (0: none); its id (for a
        GET_BUFFER's release).  Raises if it did not run: MooncakeTimeoutError (carrying the
        batch id; the shim goes on with the batch, kept here until it completes), else the
        refusal's error (:func:`~.marshal.refused`).  ``pending_write(packed, id)`` makes
        the handle on a timed-out write's outcome that the error carries (its ``write``),
        kept in the client's ledger of timed-out writes."""
        native = self.native
        if native.orphans:
            self.reap()
        packed.batch.timeout_ms = timeout_ms
        idp = native.thread().idp
        rc = _run(native.checked(), idp, packed.batch)
        if rc == 0:
            return int(idp[0])
        if rc == MCS_E_TIMEOUT:
            raise self._timed_out(packed, int(idp[0]), what, pending_write)
        raise refused(rc, packed.keys)

    def _timed_out(
        self,
        packed: Packed,
        batch_id: int,
        what: str,
        pending_write: Callable[[Packed, int], PendingWrite | None] | None,
    ) -> MooncakeTimeoutError:
        """Keep a timed-out batch (the shim still uses it) until it completes, with the
        handle on a write's outcome; the error the call raises."""
        native = self.native
        msg = binding.last_error()
        write = None if pending_write is None else pending_write(packed, batch_id)
        with native.lock:
            if write is not None:
                native.writes.add(write)
            status = native.ended_early.pop(batch_id, None)
            if status is None:
                native.orphans[batch_id] = packed
            elif write is not None:  # its completion was drained already
                native.writes.ended(batch_id, packed.unpack(), status)
        return MooncakeTimeoutError(
            MCS_E_TIMEOUT, f"{what + ': ' if what else ''}{msg}", None, batch_id, write
        )

    def run_until(
        self,
        fill: Callable[[ReusedBatch], Any],
        keys: list[Any],
        timeout_ms: int,
        pending_write: Callable[[Packed, int], PendingWrite | None] | None = None,
        hold: Any = None,
    ) -> tuple[int, list[int]] | None:
        """A call with a deadline of ``timeout_ms`` through this thread's reused batch for
        such calls (``ThreadState.timed``), filled by ``fill(batch)`` (which returns what
        must stay alive with it, such as :meth:`~.marshal.ReusedBatch.fill_addresses`):
        (the shim's status, the per-key results); None when the call must take a private
        batch (timed-out batches wait to be reaped, or the batch is in use).  A call that
        times out leaves the struct with the shim: it becomes that batch's orphan (a
        :class:`Packed` over it, kept until the batch completes, with ``hold`` besides),
        the thread takes a fresh one, and this raises MooncakeTimeoutError as
        :meth:`run_packed` does.  A private batch per call cost 4-5 us more at 16 keys."""
        native = self.native
        state = self.state()
        rb = state.timed
        if native.orphans or rb.busy:
            return None
        rb.busy = True
        timed_out = False
        try:
            keep = fill(rb)
            rb.batch.timeout_ms = timeout_ms
            idp = state.idp
            rc: int = _run(native.checked(), idp, rb.batch)
            if rc == MCS_E_TIMEOUT:
                batch_id = int(idp[0])  # before anything can run a nested call
                timed_out = True
                state.timed = ReusedBatch()  # this one stays the shim's until it completes
                packed = Packed.over(rb.batch, rb.results, keys, [rb, keep, hold])
                raise self._timed_out(packed, batch_id, "", pending_write)
            del keep
            return rc, (results_list(rb.results, len(keys)) if rc == 0 else [])
        finally:
            if not timed_out:
                rb.batch.timeout_ms = 0
                rb.busy = False

    def get_buffer(self, keys: list[Any], timeout_ms: int, what: str = "get") -> tuple[Packed, int]:
        """A GET_BUFFER batch: (it, its id).  Its values (:func:`~.marshal.gather_values`)
        stay valid until :meth:`release` of that id.  Raises as :meth:`run_packed` does."""
        packed = Packed(OP_GET_BUFFER, keys)
        native = self.native
        if timeout_ms or native.orphans or native.handle is None:
            return packed, self.run_packed(packed, timeout_ms, what)
        # No deadline: straight to the shim, as run_packed would, minus its checks.
        idp = self.state().idp
        rc = _run(native.handle, idp, packed.batch)
        if rc:
            raise refused(rc, keys)
        return packed, int(idp[0])

    def withdraw(self, batch_id: int) -> int:
        """Take back what of background batch ``batch_id`` is still queued (nothing of it
        is sent; its keys answer MCS_E_TIMEOUT in its completion): the keys withdrawn, 0
        when none of it is queued or the client is closed."""
        handle = self.native.handle
        if handle is None:
            return 0
        return max(0, int(lib.mcs_client_withdraw(handle, batch_id)))

    def release(self, batch_id: int) -> None:
        """Let the shim free a GET_BUFFER batch's values (a closed client freed them)."""
        handle = self.native.handle
        if handle is not None:
            lib.mcs_client_release(handle, batch_id)

    # ------------------------------------------------------------ background batches

    def submit(self, packed: Packed, user_data: Any) -> int:
        """Queue ``packed`` on its lane; its id.  It is kept (with ``user_data``) until its
        completion is drained."""
        native = self.native
        idp = native.thread().idp
        with native.lock:  # registered before the completion can be drained
            rc = lib.mcs_client_submit(native.checked(), idp, packed.batch)
            if rc < 0:
                raise refused(rc, packed.keys)
            batch_id = int(idp[0])
            native.pending[batch_id] = (packed, user_data)
        return batch_id

    def drain(self, max_items: int) -> list[Completion]:
        """Completions of finished batches (never blocks); resets the eventfd.  Those of
        timed-out blocking calls free what the calls left and are not returned."""
        native = self.native
        handle = native.handle
        if handle is None:
            return []
        out = ffi.new("struct mcs_completion[]", max_items)
        if max_items > 0:
            out[0].struct_size = _COMPLETION_SIZE  # the array's stride (see mcs_client_drain)
        done: list[Completion] = []
        with native.lock:
            k = check(lib.mcs_client_drain(handle, out, max_items))
            for i in range(k):
                c = out[i]
                bid = int(c.id)
                if c.timed_out:  # a blocking call gave up on it: only its outcome to tell
                    orphan = native.orphans.pop(bid, None)
                    lib.mcs_client_release(handle, bid)
                    if orphan is None:  # its call has not registered it yet: it will see this
                        native.ended_early[bid] = int(c.status)
                        continue
                    native.writes.ended(bid, orphan.unpack(), int(c.status))
                    continue
                packed, user = native.pending.pop(bid, (None, None))
                results = packed.unpack() if packed is not None else []
                values = None
                if c.op == OP_GET_BUFFER and packed is not None and c.status == 0:
                    values = gather_values(packed, results)
                    lib.mcs_client_release(handle, bid)
                done.append(
                    Completion(
                        id=bid,
                        op=OPS[c.op],
                        status=int(c.status or c.first_error),
                        results=results,
                        n_failed=int(c.n_failed),
                        message=ffi.string(c.message).decode("utf-8", "replace"),
                        values=values,
                        user_data=user,
                        ran=c.status == 0,
                    )
                )
        return done

    def reap(self) -> None:
        """Free what timed-out blocking calls left with the shim, once their batches ended.

        When batches are pending, their completions are someone else's to drain (draining
        reaps the orphans then); otherwise this drains.
        """
        if not self.native.pending:
            self.drain(1024)

    def wait(self, timeout_ms: int) -> bool:
        """Block until a completion waits (True) or ``timeout_ms`` pass (False; -1: none)."""
        rc = lib.mcs_client_wait(self.native.checked(), timeout_ms)
        if rc == MCS_E_TIMEOUT:
            return False
        check(rc)
        return True

    # ------------------------------------------------------------ the rest

    def refusal(self, rc: int) -> Exception:
        """The error of a call the shim refused (a closed client's: ClosedError)."""
        if self.native.handle is None:
            return ClosedError(MCS_E_CLOSED, "the client is closed")
        return error_for(rc, binding.last_error())

    def remove_all(self, force: bool) -> tuple[int, int]:
        """Mooncake's removeAll: (the shim's status, how many keys were removed)."""
        out = ffi.new("int64_t *")
        rc = lib.mcs_client_remove_all(self.native.handle, out, 1 if force else 0)
        return rc, int(out[0])

    def remove_by_regex(self, pattern: bytes, force: bool) -> tuple[int, int]:
        """Mooncake's removeByRegex: (the shim's status, how many keys were removed)."""
        out = ffi.new("int64_t *")
        rc = lib.mcs_client_remove_by_regex(self.native.handle, out, pattern, 1 if force else 0)
        return rc, int(out[0])

    def health_check(self) -> tuple[int, int]:
        """Mooncake's health_check: (the shim's status, 0 healthy / 1 not set up / 2 not)."""
        out = ffi.new("int *")
        rc = lib.mcs_client_health_check(self.native.handle, out)
        return rc, int(out[0])

    def replica_desc(self, keys: Sequence[bytes]) -> tuple[int, str]:
        """Mooncake's batch_get_replica_desc for ``keys`` (UTF-8, without NUL bytes): (the
        shim's status, its JSON text: one element per key, null or the key's descriptors)."""
        out = ffi.new("char **")
        size = ffi.new("uint64_t *")
        packed = b"".join(k + b"\0" for k in keys)
        rc = lib.mcs_client_replica_desc(
            self.native.handle, out, size, packed, len(packed), len(keys)
        )
        if rc != 0:
            return rc, ""
        try:
            return rc, ffi.unpack(out[0], size[0]).decode("utf-8", "replace")
        finally:
            lib.mcs_replica_desc_free(out[0])

    def register_buffer(self, buf: Any, size: int) -> int:
        """Register memory (cdata ``buf``) with Mooncake: the shim's status."""
        return lib.mcs_client_register_buffer(self.native.handle, buf, size)  # type: ignore[no-any-return]

    def unregister_buffer(self, buf: Any) -> int:
        """Unregister memory registered by :meth:`register_buffer`: the shim's status."""
        return lib.mcs_client_unregister_buffer(self.native.handle, buf)  # type: ignore[no-any-return]

    def get_into_ranges(self, ranges: Any) -> int:
        """Byte ranges of values into buffers (a filled ``mcs_ranges``): the shim's status."""
        return lib.mcs_client_get_into_ranges(self.native.handle, ranges)  # type: ignore[no-any-return]
