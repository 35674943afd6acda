"""How a blocking call runs: deadlines, packed batches, plans, the single-key fast path.

:class:`BlockingCalls` sits between :class:`~mooncake_cffi._lifecycle.ClientHandle` (create,
close) and :class:`mooncake_cffi.Client` (the public operations): it turns one operation into
one shim call (``mcs_run``), drives multi-step plans, keeps what a timed-out call left with
the shim alive until its batch completes, and raises the error for what did not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from . import _binding
from ._binding import ffi, lib
from ._lifecycle import ClientHandle
from ._marshal import (
    Packed,
    ReusedBatch,
    checked_sizes,
    encode_key,
    from_buffer,
    pack_keys,
    refused,
    results_list,
)
from ._plans import Deadline, gather_values, raise_key_errors, segment_note
from ._stats import OP_CODES, OPS
from .errors import InvalidArgumentError, MooncakeTimeoutError, error_for
from .retry import retry_keys
from .status import MCS_E_INVALID_ARG, MCS_E_TIMEOUT

__all__ = ["BlockingCalls", "DEFAULT"]

#: ``timeout=`` not given: the client's ``op_timeout`` applies.
DEFAULT = object()
_GET_BUFFER = OP_CODES["get_buffer"]
_GET = OP_CODES["get"]
_SCRATCH_BYTES = 256 * 1024


class BlockingCalls(ClientHandle):
    """The machinery of a client's blocking calls (see :class:`mooncake_cffi.Client`)."""

    def _deadline_ms(self, timeout: Any) -> int:
        t = self.op_timeout if timeout is DEFAULT else timeout
        if t is None:
            return 0
        if t <= 0:
            raise ValueError(f"timeout must be positive seconds or None, not {t!r}")
        # Rounded: a plan's first step, microseconds in, still shows the whole deadline.
        return max(1, round(t * 1000))

    def _private(self, timeout: Any, rb: ReusedBatch) -> bool:
        """Whether a call takes a private batch instead of the thread's reused one: it has a
        deadline (the shim may keep a timed-out batch), timed-out batches wait to be
        reaped, or the reused batch is in use (a finalizer or signal handler calling in
        mid-call)."""
        return (
            (self.op_timeout if timeout is DEFAULT else timeout) is not None
            or bool(self._orphans)
            or rb.busy
        )

    def _run_packed(self, packed: Packed, timeout: Any = DEFAULT, what: str = "") -> int:
        """Run a packed batch; its id (for GET_BUFFER's release).  Raises if it did not run."""
        if self._orphans:
            self._reap()
        ms = self._deadline_ms(timeout)
        packed.batch.timeout_ms = ms
        idp = self._idp()
        rc = lib.mcs_run(self._h(), idp, packed.batch)
        if rc == 0:
            return int(idp[0])
        msg = _binding.last_error()
        if rc == MCS_E_TIMEOUT:
            with self._lock:  # the shim still uses the batch: keep it until it completes
                self._orphans[int(idp[0])] = packed
            raise MooncakeTimeoutError(rc, f"{what + ': ' if what else ''}{msg}")
        raise refused(rc, packed.keys)

    def _run(
        self,
        op: int,
        keys: list[Any],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        flags: int = 0,
        writable: bool = False,
        replicate_config: Any = None,
        timeout: Any = DEFAULT,
    ) -> list[int]:
        start = time.monotonic() if self.retry is not None else 0.0
        rb = self._reused()
        if self._private(timeout, rb):
            packed = Packed(
                op,
                keys,
                buffers,
                sizes,
                flags=flags,
                writable=writable,
                replicate_config=replicate_config,
            )
            self._run_packed(packed, timeout, OPS[op])
            results = packed.unpack()
        elif len(keys) == 1 and buffers is not None and replicate_config is None:
            results = [self._one_with_buffer(op, keys[0], buffers, sizes, flags, writable, timeout)]
        else:
            rb.busy = True
            try:
                keep = rb.fill(op, keys, flags, buffers, sizes, writable, replicate_config)
                rc = lib.mcs_run(self._h(), ffi.NULL, rb.batch)
                del keep
                if rc:
                    raise refused(rc, keys)
                results = results_list(rb.results, len(keys))
            finally:
                rb.busy = False
        if self.retry is not None and results and min(results) < 0:
            results = self._retried(
                op,
                keys,
                results,
                start,
                timeout,
                flags=flags,
                buffers=buffers,
                sizes=sizes,
                writable=writable,
                replicate_config=replicate_config,
            )
        return results

    def _one_with_buffer(
        self,
        op: int,
        key: Any,
        buffers: Sequence[Any],
        sizes: Sequence[int] | None,
        flags: int,
        writable: bool,
        timeout: Any,
    ) -> int:
        """A one-key get / put (no deadline) through :meth:`_single`; its result."""
        if len(buffers) != 1:
            raise InvalidArgumentError(
                MCS_E_INVALID_ARG, f"1 key but {len(buffers)} buffers: they must pair up"
            )
        cbuf = from_buffer(buffers[0], 0, writable)
        size = len(cbuf) if sizes is None else checked_sizes(sizes, [len(cbuf)])[0]
        return self._single(op, key, timeout, flags, cbuf, size)

    def _retried(
        self,
        op: int,
        keys: list[Any],
        results: list[int],
        start: float,
        timeout: Any,
        *,
        flags: int = 0,
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        writable: bool = False,
        replicate_config: Any = None,
    ) -> list[int]:
        """``results`` after the client's retry policy tried the retryable keys again, each
        attempt within what is left of the call's deadline."""
        deadline = Deadline(self.op_timeout if timeout is DEFAULT else timeout, start)

        def rerun(idx: list[int]) -> list[int]:
            packed = Packed(
                op,
                [keys[i] for i in idx],
                None if buffers is None else [buffers[i] for i in idx],
                None if sizes is None else [sizes[i] for i in idx],
                flags=flags,
                writable=writable,
                replicate_config=replicate_config,
            )
            self._run_packed(packed, deadline.left(), OPS[op])
            return packed.unpack()

        return retry_keys(self.retry, results, rerun, deadline.end)

    def _keys_list(self, op: int, keys: list[Any], flags: int, timeout: Any) -> list[int]:
        """A batch of keys only, as a list of results, retried per the client's policy."""
        start = time.monotonic() if self.retry is not None else 0.0
        results = self._keys_call(op, keys, flags, timeout)[0]
        if self.retry is not None and results and min(results) < 0:
            results = self._retried(op, keys, results, start, timeout, flags=flags)
        return results

    def _keys_call(
        self,
        op: int,
        keys: list[Any],
        flags: int,
        timeout: Any,
        convert: Callable[[Any, int], Any] = results_list,
    ) -> tuple[Any, list[int] | None]:
        """Run a batch of keys only: ``(convert(results, n), None)``, or when ``convert``
        gives None (exists_list does when a key failed), ``(None, results as ints)``.

        Without a deadline it goes through this thread's reused batch (the shim is done
        with it on return); with one, or while the reused batch is in use (a finalizer
        or signal handler calling in mid-call), through a private batch.
        """
        n = len(keys)
        rb = self._reused()
        if self._private(timeout, rb):
            packed = Packed(op, keys, flags=flags)
            self._run_packed(packed, timeout, OPS[op])
            answer = convert(packed.results, n)
            return answer, (None if answer is not None else packed.unpack())
        # The packed keys go to mcs_run_keys as they are (cffi passes a bytes object's own
        # buffer, NUL-terminated); the outcomes land in the thread's results array.
        rb.busy = True
        try:
            if n > rb.cap:
                rb.grow(n)
            packed = pack_keys(keys)
            rc = lib.mcs_run_keys(
                self._handle or self._h(), rb.results, op, flags, packed, len(packed) + 1, n
            )
            if rc:
                raise refused(rc, keys)
            answer = convert(rb.results, n)
            return answer, (None if answer is not None else results_list(rb.results, n))
        finally:
            rb.busy = False

    def _reused(self) -> ReusedBatch:
        """This thread's reusable batch (see :class:`~._marshal.ReusedBatch`)."""
        try:
            return self._tls.batch
        except AttributeError:
            self._tls.batch = ReusedBatch()
            return self._tls.batch

    def _drive(self, plan: Generator[Any, Any, Any], timeout: Any) -> Any:
        """Run a plan (see :mod:`._plans`) to its answer, one blocking batch per step, all
        of them within the call's deadline."""
        self._deadline_ms(timeout)  # refuses a bad timeout before anything runs
        deadline = Deadline(self.op_timeout if timeout is DEFAULT else timeout)
        op, keys, bufs = next(plan)
        while True:
            timeout = deadline.left()
            if op == _GET_BUFFER:
                packed = Packed(op, keys)
                batch_id = self._run_packed(packed, timeout, "get")
                try:
                    answer: Any = gather_values(packed, packed.unpack())
                finally:
                    lib.mcs_release(self._handle, batch_id)
            else:
                # Plan buffers are the plan's own fresh bytes objects, filled in place.
                answer = self._run(op, keys, bufs, timeout=timeout)
            try:
                op, keys, bufs = plan.send(answer)
            except StopIteration as done:
                return done.value

    def _single(
        self,
        op: int,
        key: Any,
        timeout: Any,
        flags: int = 0,
        buf: Any = None,
        size: int | None = None,
    ) -> int:
        """One key through ``mcs_run_one``: the small-operation fast path (no struct to fill).

        ``buf`` is cdata of the key's buffer (GET, PUT, UPSERT), ``size`` its length to use
        (default: all of it).  The outcome lands in the thread's reused results array; a
        call that needs a private batch (see :meth:`_private`) gets one.
        """
        rb = self._reused()
        if self._private(timeout, rb):
            return self._single_run([key], op, buf, size, flags=flags, timeout=timeout)
        kb = key.encode() if type(key) is str and key.isascii() else encode_key(key, 0)
        if buf is None:
            buf, size = ffi.NULL, 0
        elif size is None:
            size = len(buf)
        rb.busy = True
        try:
            rc = lib.mcs_run_one(self._h(), rb.results, op, flags, kb, len(kb), buf, size)
            if rc < 0:
                raise error_for(rc, _binding.last_error())
            return rb.results[0]
        finally:
            rb.busy = False

    def _single_run(
        self, keys: list[Any], op: int, buf: Any, size: int | None, *, flags: int, timeout: Any
    ) -> int:
        packed = Packed(
            op,
            keys,
            None if buf is None else [buf],
            None if buf is None or size is None else [size],
            flags=flags,
            writable=op == _GET,
        )
        self._run_packed(packed, timeout, OPS[op])
        return packed.results[0]

    def _scratch(self) -> tuple[Any, list[bool]]:
        """This thread's reusable read buffer (cdata of _SCRATCH_BYTES) and its in-use flag."""
        try:
            return self._tls.scratch
        except AttributeError:
            self._tls.scratch = (ffi.new("char[]", _SCRATCH_BYTES), [False])
            return self._tls.scratch

    def _key_errors(self, keys: Sequence[Any], results: Sequence[int], allow=(), sizes=None):
        raise_key_errors(keys, results, allow, sizes, segment_note(self.config))

    def _reap(self) -> None:
        """Free what timed-out blocking calls left with the shim, once their batches end."""
        if self._pending:
            return  # completions are someone's to drain: drain() reaps orphans then
        self.drain()
