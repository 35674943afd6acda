"""How a blocking call runs: its deadline, one shim call per batch, plans, retries.

:class:`BlockingCalls` turns one operation into one call of the client's
:class:`~_capi.runner.Runner` (which the drop-in shares): one key, keys only, or a filled
batch, through the calling thread's reused memory when it can (no deadline, nothing
re-entering) and a private :class:`~_capi.marshal.Packed` batch otherwise; a refusal raises
the error of its code.  It drives multi-step plans (:mod:`_core.plans`) within the call's
deadline as a whole and retries per-key failures per the client's
:class:`~mooncake_cffi.RetryPolicy`; what a timed-out call left with the shim stays alive
until its batch completes (the client's ``orphans``, freed by
:meth:`~.batches.Batches.reap`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from .._capi.binding import ffi
from .._capi.marshal import (
    Packed,
    ReusedBatch,
    checked_sizes,
    encode_key,
    from_buffer,
    gather_values,
    pack_keys,
    refused,
    sent_bytes,
)
from .._capi.native import NativeClient
from ..errors import InvalidArgumentError, MooncakeError, MooncakeTimeoutError, error_for
from ..outcome import UNREADABLE, PendingWrite
from ..retry import RetryPolicy
from ..status import (
    INVALID_PARAMS,
    MCS_E_INVALID_ARG,
    OBJECT_NOT_FOUND,
    OP_GET,
    OP_GET_BUFFER,
    OP_PUT,
    OP_UPSERT,
    OPS,
    describe,
    is_retryable,
)
from .batches import Batches
from .plans import Deadline, Plan, Sleep, Step, batch_get_plan, call_limit, retry_plan
from .types import DEFAULT, Timeout

__all__ = ["BlockingCalls", "NEEDS_PLAN"]


_NULL = ffi.NULL


def _list(sizes: Sequence[int] | None) -> list[int] | None:
    return None if sizes is None else list(sizes)


#: What :meth:`BlockingCalls.get_small` returns when the value needs the full get plan.
NEEDS_PLAN: Final = object()


class BlockingCalls:
    """The blocking execution of a client's operations (see :class:`mooncake_cffi.Client`).

    ``op_timeout`` is the default deadline of every call (None: none), ``retry`` the policy
    for retryable per-key failures (None: no retries).
    """

    def __init__(
        self,
        native: NativeClient,
        batches: Batches,
        op_timeout: float | None,
        retry: RetryPolicy | None,
    ) -> None:
        self.native = native
        self.batches = batches
        self.runner = batches.runner
        self.op_timeout = op_timeout
        self.retry = retry

    # ----------------------------------------------------------- deadlines

    def limit(self, timeout: Timeout) -> float | None:
        """The call's time limit in seconds (None: none); a ValueError for a timeout that
        is not positive seconds."""
        return call_limit(timeout, self.op_timeout)

    def deadline_ms(self, timeout: Timeout) -> int:
        """The call's deadline for the shim, in milliseconds (0: none)."""
        t = call_limit(timeout, self.op_timeout)
        # Rounded: a plan's first step, microseconds in, still shows the whole deadline.
        return 0 if t is None else max(1, round(t * 1000))

    def reused(self, timeout: Timeout) -> ReusedBatch | None:
        """This thread's reused batch, or None when the call must take a private one: it
        has a deadline (the shim may keep a timed-out batch), timed-out batches wait to be
        reaped, or the reused batch is in use (a finalizer or signal handler calling in
        mid-call).  Every call path asks here; it is on the hot path of every small call."""
        return self.runner.reused((self.op_timeout if timeout is DEFAULT else timeout) is not None)

    # ------------------------------------------------------- one shim call

    def run_packed(self, packed: Packed, timeout: Timeout = DEFAULT, what: str = "") -> int:
        """Run a packed batch; its id (for GET_BUFFER's release).  Raises if it did not run."""
        return self.runner.run_packed(packed, self.deadline_ms(timeout), what, self.pending_write)

    def pending_write(self, packed: Packed, batch_id: int) -> PendingWrite | None:
        """The handle on a timed-out PUT / UPSERT batch's outcome (None for other ops)."""
        op = int(packed.batch.op)
        if op not in (OP_PUT, OP_UPSERT):
            return None
        return PendingWrite(
            OPS[op],
            packed.keys,
            batch_id,
            lambda i: sent_bytes(packed, i),
            self.read_back,
            self.batches.reap,
        )

    def read_back(self, key: Any) -> Any:
        """The value of ``key`` now (None if missing, :data:`~mooncake_cffi.outcome.
        UNREADABLE` if it cannot be read), within the client's deadline: what a timed-out
        write's outcome compares with the bytes it sent."""
        try:
            return self.drive(batch_get_plan([key]), DEFAULT)[0]
        except MooncakeError:
            return UNREADABLE

    def run(
        self,
        op: int,
        keys: list[Any],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        flags: int = 0,
        writable: bool = False,
        replicate_config: Any = None,
        timeout: Timeout = DEFAULT,
        retrying: bool = True,
    ) -> list[int]:
        """One batch; its per-key results, retried per the client's policy (unless
        ``retrying`` is False: a step of a retry)."""
        start = time.monotonic() if self.retry is not None else 0.0
        rb = self.reused(timeout)
        parts = bool(buffers) and type(buffers[0]) in (list, tuple)  # type: ignore[index]
        if parts or rb is None:
            packed = Packed(
                op,
                keys,
                buffers,
                sizes,
                flags=flags,
                writable=writable,
                replicate_config=replicate_config,
                parts=parts,
            )
            self.run_packed(packed, timeout, OPS[op])
            results = packed.unpack()
        elif len(keys) == 1 and buffers is not None and replicate_config is None:
            if len(buffers) != 1:
                raise InvalidArgumentError(
                    MCS_E_INVALID_ARG, f"1 key but {len(buffers)} buffers: they must pair up"
                )
            cbuf = from_buffer(buffers[0], 0, writable)
            size = len(cbuf) if sizes is None else checked_sizes(sizes, [len(cbuf)])[0]
            results = [self.one(op, keys[0], timeout, flags, cbuf, size)]
        else:
            rc, results = self.runner.filled(
                rb, op, keys, flags, buffers, sizes, writable, replicate_config
            )
            if rc:
                raise refused(rc, keys)
        if retrying and self.retry is not None and results and min(results) < 0:
            bufs = None if buffers is None else list(buffers)
            step = Step(op, keys, bufs, flags, replicate_config, _list(sizes))
            results = self.retried(step, results, start, timeout)
        return results

    def one(
        self,
        op: int,
        key: Any,
        timeout: Timeout,
        flags: int = 0,
        buf: Any = None,
        size: int | None = None,
    ) -> int:
        """One key through ``mcs_client_run_one``: the small-operation fast path (no struct).

        ``buf`` is cdata of the key's buffer (GET, PUT, UPSERT), ``size`` its length to use
        (default: all of it).  The outcome lands in the thread's reused results array; a
        call that needs a private batch (see :meth:`reused`) gets one.
        """
        # The hot path of every small call: few Python operations, each of them costly
        # right after a round trip has left the caches cold.
        deadline = (self.op_timeout if timeout is DEFAULT else timeout) is not None
        if buf is None:
            cbuf, csize = _NULL, 0
        else:
            cbuf, csize = buf, len(buf) if size is None else size
        r = self.runner.one_now(op, key, flags, cbuf, csize, deadline)
        if isinstance(r, int):
            return r
        if r is not None:
            raise self.runner.refusal(r[0])
        rb = self.reused(timeout)
        if rb is None:
            packed = Packed(
                op,
                [key],
                None if buf is None else [buf],
                None if buf is None or size is None else [size],
                flags=flags,
                writable=op == OP_GET,
            )
            self.run_packed(packed, timeout, OPS[op])
            return int(packed.results[0])
        if type(key) is str:
            try:
                kb = key.encode()
            except UnicodeEncodeError:
                kb = encode_key(key, 0)  # raises, naming the key
        else:
            kb = encode_key(key, 0)
        rc, result = self.runner.one(rb, op, kb, flags, cbuf, csize)
        if rc:
            raise self.runner.refusal(rc)
        return result

    def keys_call(self, op: int, keys: list[Any], flags: int, timeout: Timeout) -> list[int]:
        """Run a batch of keys only: each key's result as an int.

        Without a deadline it is one C function (keys packed and results listed in C);
        otherwise it goes through this thread's reused batch (the shim is done with it on
        return) or, when :meth:`reused` says so, through a private batch.
        """
        deadline = (self.op_timeout if timeout is DEFAULT else timeout) is not None
        r = self.runner.keys_now(op, keys, flags, deadline)
        if isinstance(r, list):
            return r
        if r is not None:
            raise refused(r[0], keys)
        rb = self.reused(timeout)
        if rb is None:
            packed = Packed(op, keys, flags=flags)
            self.run_packed(packed, timeout, OPS[op])
            return packed.unpack()
        # The packed keys go to the shim as they are (cffi passes a bytes object's own
        # buffer, NUL-terminated); the outcomes land in the thread's results array, read
        # here before this thread's next call can reuse it.
        if self.native.handle is None:
            self.native.checked()  # raises ClosedError
        rc, results = self.runner.keys(rb, op, pack_keys(keys), len(keys), flags)
        if rc:
            raise refused(rc, keys)
        return results

    def keys_list(
        self, op: int, keys: list[Any], flags: int, timeout: Timeout, retrying: bool = True
    ) -> list[int]:
        """A batch of keys only, as a list of results, retried per the client's policy
        (unless ``retrying`` is False)."""
        start = time.monotonic() if self.retry is not None else 0.0
        results = self.keys_call(op, keys, flags, timeout)
        if retrying and self.retry is not None and results and min(results) < 0:
            results = self.retried(Step(op, keys, None, flags), results, start, timeout)
        return results

    # ----------------------------------------------------- cluster-wide calls

    def remove_all(self, force: bool) -> int:
        """Mooncake's removeAll: every key of the cluster; how many were removed."""
        rc, removed = self.runner.remove_all(force)
        if rc:
            raise self.runner.refusal(rc)
        return removed

    def remove_by_regex(self, pattern: str, force: bool) -> int:
        """Mooncake's removeByRegex: the keys ``pattern`` (ECMAScript) matches; the count."""
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
        rc, removed = self.runner.remove_by_regex(pattern.encode(), force)
        if rc:
            raise self.runner.refusal(rc)
        return removed

    def health_check(self) -> int:
        """Mooncake's health_check: 0 healthy, 1 not set up (or closed), 2 unhealthy."""
        rc, health = self.runner.health_check()
        if rc:
            raise self.runner.refusal(rc)
        return health

    # ------------------------------------------------------------ retries

    def retried(self, step: Step, results: list[int], start: float, timeout: Timeout) -> list[int]:
        """``results`` of ``step`` after the client's retry policy tried the retryable keys
        again (:func:`~_core.plans.retry_plan`), within what is left of the call's deadline."""
        if self.retry is None:
            return results
        deadline = Deadline(self.limit(timeout), start)
        plan = retry_plan(self.retry, step, results, deadline.end)
        return self.drive(plan, deadline.left(), False, deadline)  # type: ignore[no-any-return]

    # -------------------------------------------------------------- plans

    def drive(
        self, plan: Plan, timeout: Timeout, retrying: bool = True, call: Deadline | None = None
    ) -> Any:
        """Run a plan (see :mod:`_core.plans`) to its answer, one blocking batch per step, all
        of them within the call's deadline, each retried per the client's policy (unless
        ``retrying`` is False: the plan does its own).  A step that raises is thrown into
        the plan, which may handle it (and go on) or let it propagate.  ``call``: the
        deadline of the call this plan is part of (a retry's), when not its own."""
        self.deadline_ms(timeout)  # refuses a bad timeout before anything runs
        deadline = Deadline(self.limit(timeout)) if call is None else call
        try:
            request = next(plan)
            while True:
                if isinstance(request, Sleep):
                    left = deadline.left()
                    time.sleep(request.seconds if left is None else min(request.seconds, left))
                    request = plan.send(None)
                    continue
                try:
                    answer = self._step(request, deadline.left(), retrying)
                except MooncakeError as exc:
                    request = plan.throw(exc)
                    continue
                request = plan.send(answer)
        except StopIteration as done:
            return done.value
        except MooncakeTimeoutError as exc:
            raise deadline.noted(exc) from None

    def _step(self, step: Step, left: float | None, retrying: bool) -> Any:
        """One step of a plan: GET_BUFFER values as bytes, else per-key results."""
        op, keys, bufs, flags, replicate_config, sizes = step
        if op == OP_GET_BUFFER:
            packed, batch_id = self.runner.get_buffer(keys, self.deadline_ms(left))
            try:
                return gather_values(packed, packed.unpack())
            finally:
                self.runner.release(batch_id)
        if bufs is None:
            return self.keys_list(op, keys, flags, left, retrying)
        # A GET step's buffers are the plan's own fresh bytes objects, filled in place (the
        # value is copied once), so they are not asked to be writable.
        return self.run(
            op,
            keys,
            bufs,
            sizes,
            flags=flags,
            replicate_config=replicate_config,
            timeout=left,
            retrying=retrying,
        )

    def get_small(self, key: Any, timeout: Timeout) -> Any:
        """The value of one key read in one round trip through the thread's scratch buffer
        (None if missing), or :data:`NEEDS_PLAN` when it takes the full get plan: a value
        larger than the buffer, a deadline, the buffer in use, a retryable failure."""
        if self.deadline_ms(timeout):
            return NEEDS_PLAN
        runner = self.runner
        rb = runner.reused(False)
        state = runner.state()
        if rb is None or state.scratch_busy:  # a finalizer or signal handler called mid-get
            return NEEDS_PLAN
        if type(key) is str:
            try:
                kb = key.encode()
            except UnicodeEncodeError:
                kb = encode_key(key, 0)  # raises, naming the key
        else:
            kb = encode_key(key, 0)
        rc, r = runner.get_scratch(rb, state, kb)
        if rc:
            raise runner.refusal(rc)
        if type(r) is bytes:
            return r
        if r == OBJECT_NOT_FOUND:
            return None
        # Larger than the scratch buffer, or an error the retry policy may retry.
        if r != INVALID_PARAMS and not (self.retry is not None and is_retryable(r)):
            raise error_for(r, f"key {key!r}: {describe(r)}")
        return NEEDS_PLAN
