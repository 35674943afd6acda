"""How multi-step operations proceed, shared by the synchronous and asynchronous clients.

A plan is a generator: it yields requests, a :class:`Step` (one batch to run) or a
:class:`Sleep` (a pause, between retries), receives each step's answer from whichever driver
runs it (:class:`~.blocking.BlockingCalls` blocks in the shim, :class:`mooncake_cffi.AsyncClient`
awaits a completion), and returns the answer of the whole operation.  A step that fails is
thrown into the plan at its ``yield``.  The answer of a GET_BUFFER step is the values read
(None where unread); of any other step, the per-key results.  Also here: turning per-key
error codes into exceptions.  Pure: nothing here touches the native library.
"""

from __future__ import annotations

import errno
import os
import resource
import time
from collections.abc import Generator, Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import (
    CONCURRENT_WRITE_CODES,
    InvalidArgumentError,
    MooncakeError,
    MooncakeTimeoutError,
    error_for,
    write_error_for,
)
from ..retry import RetryPolicy
from ..status import (
    FLAG_SKIP_EXISTING,
    INVALID_PARAMS,
    MCS_E_DUPLICATE_KEY,
    NO_AVAILABLE_HANDLE,
    OBJECT_NOT_FOUND,
    OP_EXISTS,
    OP_GET,
    OP_GET_BUFFER,
    OP_PUT,
    OP_SIZE,
    PUT_EXISTED,
    REPLICA_IS_NOT_READY,
    TRANSFER_FAIL,
    describe,
    is_retryable,
)
from .types import DEFAULT, Timeout

__all__ = [
    "MAX_RESIZE_ROUNDS",
    "NOT_READY",
    "PREFIX_FIRST_WINDOW",
    "Deadline",
    "Request",
    "Sleep",
    "Step",
    "batch_get_plan",
    "call_limit",
    "store_plan",
    "first_writer_plan",
    "lookup_prefix_plan",
    "raise_key_errors",
    "retry_plan",
    "segment_note",
]

#: A value that keeps changing size while it is read is given up on after this many rounds
#: (with an error: never a truncated value, never "missing" for a present key).
MAX_RESIZE_ROUNDS = 16


class Step(NamedTuple):
    """One batch for the driver to run: ``op`` (a ``status.OP_*`` code) over ``keys``, with
    ``bufs`` for GET / PUT / UPSERT (None otherwise) and their ``sizes`` (None: each
    buffer's length), ``flags`` (``status.FLAG_*``) and a replica config for writes."""

    op: int
    keys: list[Any]
    bufs: list[Any] | None = None
    flags: int = 0
    replicate_config: Any = None
    sizes: list[int] | None = None


class Sleep(NamedTuple):
    """A pause of ``seconds`` (cut short by the call's deadline) before the next step."""

    seconds: float


Request = Step | Sleep
Plan = Generator[Request, Any, Any]

#: What :func:`batch_get_plan` gives, when asked to, for a key whose replica is still being
#: written (REPLICA_IS_NOT_READY) instead of raising.
NOT_READY: Any = type("NotReady", (), {"__repr__": lambda self: "NOT_READY"})()


#: The longest deadline the shim's millisecond fields hold (int32: 24.8 days).
MAX_TIMEOUT = (2**31 - 1) / 1000


def call_limit(timeout: Timeout, default: float | None) -> float | None:
    """A call's time limit in seconds (None: none): ``timeout``, or ``default`` when it is
    :data:`~_core.types.DEFAULT`; a ValueError for one that is not positive seconds."""
    t = default if timeout is DEFAULT else timeout
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= MAX_TIMEOUT:
        raise ValueError(
            f"timeout must be positive seconds (at most {MAX_TIMEOUT:g}) or None, not {t!r}"
        )
    return float(t)


class Deadline:
    """What is left of a call's time limit, for each of its steps (None: no limit).

    A plan of several round trips answers within the limit of the call as a whole: each
    step gets what the steps before it left (at least 1 ms, so a late step times out
    rather than running unbounded)."""

    __slots__ = ("end", "limit", "step_ms")

    def __init__(self, limit: float | None, start: float | None = None) -> None:
        """``limit`` seconds from ``start`` (a time.monotonic() reading; default now)."""
        begin = time.monotonic() if start is None else start
        self.limit = limit
        self.end = None if limit is None else begin + limit
        #: The deadline the last step was given, in the shim's milliseconds (None: none yet).
        self.step_ms: int | None = None

    def left(self) -> float | None:
        """Seconds left for the next step (None: no limit)."""
        if self.end is None:
            return None
        left = max(0.001, self.end - time.monotonic())
        self.step_ms = max(1, round(left * 1000))
        return left

    def noted(self, exc: MooncakeTimeoutError) -> MooncakeTimeoutError:
        """``exc`` (a step that timed out, whose message gives what the step had left) with
        the call's own deadline added, which is the one the caller set."""
        if self.limit is None or "the call's deadline" in exc.message:
            return exc
        if self.step_ms == max(1, round(self.limit * 1000)):
            return exc  # the step had the whole deadline: the message already names it
        note = f"{exc.message}; the call's deadline: {self.limit:g} s"
        return MooncakeTimeoutError(exc.code, note, exc.results, exc.batch_id, exc.write)


def segment_note(config: Any) -> str:
    """What a NO_AVAILABLE_HANDLE message says about the client's own segment."""
    gss = config.setup_config.get("global_segment_size", "16 MiB (default)")
    return f" (this client contributes global_segment_size={gss})"


def fd_note() -> str:
    """ "; the process has no free file descriptors ..." when none can be opened, else ""."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            return ""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return (
            f"; the process has no free file descriptors (limit {limit}): close clients or "
            "raise the limit (ulimit -n)"
        )
    os.close(fd)
    return ""


def raise_key_errors(
    keys: Sequence[Any],
    results: Sequence[int],
    allow: Iterable[int] = (),
    sizes: Sequence[int] | None = None,
    segment_note: str = "",
    *,
    upsert: bool = False,
) -> None:
    """Raise the exception for the first per-key error not in ``allow``; for an
    ``upsert``, a code that shows a racing writer of the key is a ConcurrentWriteError."""
    if not results or min(results) >= 0:
        return
    allowed = set(allow)
    for i, (k, r) in enumerate(zip(keys, results)):
        if r < 0 and r not in allowed:
            msg = f"key {k!r}: {describe(r)}"
            if r == TRANSFER_FAIL:
                msg += fd_note()  # a transfer that found no free fd is no dead node
            if r == NO_AVAILABLE_HANDLE and sizes is not None:
                msg = (
                    f"key {k!r}: no space for {sizes[i]} bytes in the cluster's memory "
                    f"segments{segment_note}; the value is larger than the free space of any "
                    "segment: remove keys or add storage"
                )
            if upsert and r in CONCURRENT_WRITE_CODES:
                msg = (
                    f"key {k!r}: another writer upserted it at the same time and this upsert "
                    f"lost ({describe(r)}): the key holds the other writer's value; upsert "
                    "again for this value to win, or read the key"
                )
            raise write_error_for(r, msg, results, upsert=upsert)


def batch_get_plan(
    keys: list[Any], not_ready: Any = None
) -> Generator[Request, list[Any], list[Any]]:
    """Values of ``keys`` (None where missing), in as few round trips as the data allows.

    1. One GET_BUFFER batch: Mooncake sizes and reads every key into its local buffer
       (``local_buffer_size``) in one round trip; the driver sends back the values (a
       fresh list: the plan fills it in), None for keys it did not read.
    2. Keys it did not read (missing, or the local buffer was too small for them) are
       looked up with one EXISTS batch; present ones are sized and read into buffers of
       their size, sized again and re-read while they keep growing (a value replaced by a
       larger one meanwhile is still read whole), at most MAX_RESIZE_ROUNDS times.

    ``not_ready``: when not None, what a key whose replica is still being written gets
    (e.g. :data:`NOT_READY`), instead of REPLICA_IS_NOT_READY being raised.
    """
    tolerate = () if not_ready is None else (REPLICA_IS_NOT_READY,)
    out: list[Any] = yield Step(OP_GET_BUFFER, keys)
    unread = [i for i, v in enumerate(out) if v is None]
    if not unread:
        return out
    present = yield Step(OP_EXISTS, [keys[i] for i in unread])
    raise_key_errors([keys[i] for i in unread], present, tolerate)
    todo = [i for i, p in zip(unread, present) if p == 1]
    for i, p in zip(unread, present):
        if p == REPLICA_IS_NOT_READY:
            out[i] = not_ready
    for _round in range(MAX_RESIZE_ROUNDS):
        if not todo:
            return out
        sizes = yield Step(OP_SIZE, [keys[i] for i in todo])
        raise_key_errors([keys[i] for i in todo], sizes, (OBJECT_NOT_FOUND, *tolerate))
        for i, size in zip(todo, sizes):
            if size == REPLICA_IS_NOT_READY:
                out[i] = not_ready
        todo = [i for i, size in zip(todo, sizes) if size >= 0]
        sizes = [size for size in sizes if size >= 0]
        if not todo:
            return out
        # Fresh bytes objects (size >= 1), filled in place: the value is copied once.
        bufs = [bytes(max(1, size)) for size in sizes]
        read = yield Step(OP_GET, [keys[i] for i in todo], bufs)
        retry = []
        for i, buf, r in zip(todo, bufs, read):
            if r >= 0:
                out[i] = buf if r == len(buf) else buf[:r]
            elif r == INVALID_PARAMS:
                retry.append(i)  # replaced by a larger value meanwhile
            elif r == REPLICA_IS_NOT_READY and tolerate:
                out[i] = not_ready
            elif r != OBJECT_NOT_FOUND:
                raise error_for(r, f"key {keys[i]!r}: {describe(r)}", read)
        todo = retry
    if todo:
        raise MooncakeError(
            INVALID_PARAMS,
            f"key {keys[todo[0]]!r}: its value changed size {MAX_RESIZE_ROUNDS} times while "
            "being read; giving up rather than returning a truncated value",
        )
    return out


#: lookup_prefix asks at least this many keys first.
PREFIX_FIRST_WINDOW = 16


def _wire(key: Any) -> bytes:
    """A key as the shim compares it (str keys travel as UTF-8)."""
    return key.encode() if isinstance(key, str) else bytes(key)


def lookup_prefix_plan(
    keys: list[Any], all_hit_before: bool
) -> Generator[Request, list[Any], tuple[int, bool]]:
    """How many leading ``keys`` are stored, and whether all were (for the next lookup).

    The first ``max(16, n // 8)`` keys are asked, and the rest only if all of those are
    present; after a lookup that found every key (``all_hit_before``) all keys are asked
    in one window, until a lookup finds a miss again.  A key given twice is asked once.
    """
    n = len(keys)
    first = n if all_hit_before else min(n, max(PREFIX_FIRST_WINDOW, n // 8))
    done = 0
    for window in (keys[:first], keys[first:]):
        if not window:
            break
        try:
            found = yield Step(OP_EXISTS, window)
        except InvalidArgumentError as exc:  # a key given twice: ask each key once
            if exc.code != MCS_E_DUPLICATE_KEY:
                raise
            unique = list({_wire(k): k for k in window}.items())
            asked = yield Step(OP_EXISTS, [k for _, k in unique])
            raise_key_errors([k for _, k in unique], asked)
            answer = {w: r for (w, _), r in zip(unique, asked)}
            found = [answer[_wire(k)] for k in window]
        raise_key_errors(window, found)
        if found.count(1) != len(found):  # (a C-speed check of the common all-present case)
            return done + next(i for i, r in enumerate(found) if r != 1), False
        done += len(window)
    return done, n > 0


def _subset(step: Step, idx: list[int]) -> Step:
    """``step`` for the keys at ``idx`` only."""
    return step._replace(
        keys=[step.keys[i] for i in idx],
        bufs=None if step.bufs is None else [step.bufs[i] for i in idx],
        sizes=None if step.sizes is None else [step.sizes[i] for i in idx],
    )


def retry_plan(
    policy: RetryPolicy, step: Step, results: list[int], deadline: float | None
) -> Generator[Request, list[int], list[int]]:
    """``results`` of ``step`` after trying its retryable keys again per ``policy``, each
    attempt only for those keys, after the policy's backoff (see :mod:`mooncake_cffi.retry`).

    Retrying stops when the attempts are used up, when no key is retryable, or when the
    next wait would pass ``deadline`` (a ``time.monotonic()`` value, None: none) or the
    policy's ``budget``.  The results say per key what the last attempt did.
    """
    start = time.monotonic()
    for delay in policy.delays():
        todo = [i for i, r in enumerate(results) if r < 0 and is_retryable(r)]
        if not todo:
            break
        now = time.monotonic()
        if deadline is not None and now + delay >= deadline:
            break
        if policy.budget is not None and now + delay - start > policy.budget:
            break
        yield Sleep(delay)
        again = yield _subset(step, todo)
        for i, r in zip(todo, again):
            results[i] = r
    return results


#: A skip-existing put that finds its key missing right after writing it (the writer it lost
#: to failed) writes it again, at most this many times.
FIRST_WRITER_ROUNDS = 20
#: ... waiting this long between rounds.
FIRST_WRITER_WAIT = 0.025


def first_writer_plan(
    step: Step, values: Sequence[Any], results: list[int]
) -> Generator[Request, Any, list[int]]:
    """Tell the losers of a put race that their key already existed: ``results`` of the
    skip-existing put ``step`` with ``PUT_EXISTED`` for every key another writer won.

    Mooncake's put of a key that appeared meanwhile succeeds and keeps the first value,
    so every key the put reports written is read back: stored bytes that are not this
    call's ``values``, or a replica still being written (only another writer can be writing
    it: this call's own put has ended), mean another writer won.  A key missing right after
    (the writer it lost to failed, or it was removed) is written again.  Two writers of
    identical bytes both see "written".
    """
    todo = [i for i, r in enumerate(results) if r == 0]
    for _round in range(FIRST_WRITER_ROUNDS):
        if not todo:
            return results
        stored = yield from batch_get_plan([step.keys[i] for i in todo], not_ready=NOT_READY)
        missing = []
        for i, value in zip(todo, stored):
            if value is None:
                missing.append(i)
            elif value is NOT_READY or value != memoryview(values[i]).cast("B"):
                results[i] = PUT_EXISTED
        todo = []
        if missing:
            yield Sleep(FIRST_WRITER_WAIT)
            again = yield _subset(step, missing)._replace(flags=step.flags | FLAG_SKIP_EXISTING)
            for i, r in zip(missing, again):
                results[i] = r
            todo = [i for i, r in zip(missing, again) if r == 0]
    return results


def store_plan(
    step: Step,
    values: Sequence[Any],
    policy: RetryPolicy | None,
    deadline: float | None,
    shim_confirms: bool = False,
) -> Generator[Request, Any, list[int]]:
    """A put or upsert ``step`` (of ``values``): retried per ``policy``; for a
    skip-existing put, the losers of a race told (:func:`first_writer_plan`), unless
    ``shim_confirms`` (``integrity`` on: the shim tells them from each key's trailer)."""
    results: list[int] = yield step
    if policy is not None and results and min(results) < 0:
        results = yield from retry_plan(policy, step, results, deadline)
    if step.op == OP_PUT and step.flags & FLAG_SKIP_EXISTING and not shim_confirms:
        results = yield from first_writer_plan(step, values, results)
    return results
