"""What became of a write that timed out: landed, existed, not landed, or unknown, per key.

A put whose caller stopped waiting (:class:`~mooncake_cffi.MooncakeTimeoutError`) is not
recalled: its batch goes on inside the shim and ends on Mooncake's clock, with the per-key
results the call would have returned.  :class:`PendingWrite` is the caller's handle on that
batch (``err.write``; ``err.outcome()``; ``client.batches.write_outcome(keys)`` by key, for
callers that only saw a status code, such as the drop-in's).  Its outcome comes

1. from the batch's own completion, once it has ended: exactly what the call would have
   answered had it waited (``source`` ``"completion"``);
2. otherwise, and for the answers that do not settle it (an RPC to the master that failed or
   timed out, which may have reached the master), from the store: the key read back and
   compared with the bytes the write sent (``source`` ``"store"``).  A key that holds those
   bytes is ``LANDED``; a key absent after the batch ended is ``NOT_LANDED``; anything else
   is ``UNKNOWN`` (a batch still in flight may yet land).

The write's buffers must hold what was sent until the outcome is known, as they must until
the batch ends anyway (``in_flight``).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .status import MCS_E_TIMEOUT, PUT_EXISTED, RPC_FAIL, RPC_TIMEOUT

__all__ = ["KeyOutcome", "PendingWrite", "WriteState"]

#: Per-key answers that do not tell whether the master recorded the write: an RPC that
#: failed or timed out may have been carried out (its reply was lost).
UNSETTLED = frozenset({RPC_FAIL, RPC_TIMEOUT, MCS_E_TIMEOUT})

#: How often a waiting outcome() looks for the batch's completion, in seconds.
POLL_SECONDS = 0.005


class WriteState(enum.Enum):
    """What a timed-out write did to one key."""

    #: The write succeeded: the call would have returned normally (for a plain put, as
    #: always with Mooncake's first-writer-wins, the key holds this value or an earlier
    #: one); or, asked of the store, the key holds the bytes this write sent.
    LANDED = "landed"
    #: A put that skips existing keys (``put_if_absent``, ``skip_existing``) found a value
    #: there and kept it: the call would have said the key existed.
    EXISTED = "existed"
    #: The write failed (``code`` says how): nothing of it is in the store and nothing will
    #: be (Mooncake revokes a write whose transfer failed).
    NOT_LANDED = "not_landed"
    #: Not known yet: the batch is still in flight and the store does not hold the bytes,
    #: or the batch ended with an unsettled answer and the key holds other bytes.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class KeyOutcome:
    """One key's outcome: its ``state``, the per-key result ``code`` (0, ``PUT_EXISTED`` or
    a negative status; None when the batch has not ended) and where the answer came from,
    ``"completion"`` or ``"store"``."""

    key: Any
    state: WriteState
    code: int | None
    source: str

    @property
    def landed(self) -> bool:
        """True when the state is LANDED."""
        return self.state is WriteState.LANDED


#: What a :data:`Reader` answers when the store could not be read (an error, a deadline).
UNREADABLE: Any = object()

#: Reads a key's current value for the store check (within the client's deadline): bytes,
#: None when absent, :data:`UNREADABLE` when it cannot tell.
Reader = Callable[[Any], Any]


def _nothing_sent(i: int) -> None:
    return None


class PendingWrite:
    """A timed-out write batch (PUT or UPSERT): its keys and, once known, its results.

    Created by the client when a write times out; thread-safe.  ``keys`` are the batch's
    keys in order, ``batch_id`` its id (as in :class:`~mooncake_cffi.Completion`).
    """

    def __init__(
        self,
        op: str,
        keys: Sequence[Any],
        batch_id: int | None,
        sent: Callable[[int], bytes | None],
        reader: Reader,
        poll: Callable[[], None] | None,
    ) -> None:
        self.op = op
        self.keys = list(keys)
        self.batch_id = batch_id
        self._sent = sent
        self._reader = reader
        self._poll = poll
        self._done = threading.Event()
        self._results: list[int] | None = None
        self._settled = False  # the batch ran as a whole: its per-key results stand

    def __repr__(self) -> str:
        state = "ended" if self.done else "in flight"
        n = len(self.keys)
        return f"<PendingWrite {self.op} of {n} key(s), batch {self.batch_id}, {state}>"

    # ---------------------------------------------------------- completion

    def complete(self, results: Sequence[int] | None, status: int = 0) -> None:
        """Record the batch's end: its per-key results (or, when it did not run as a whole,
        ``status`` for every key).  Called by the client when it drains the completion."""
        if status or results is None or len(results) != len(self.keys):
            self._results = [int(status or MCS_E_TIMEOUT)] * len(self.keys)
        else:
            self._settled = True  # (before the results: a reader of them sees it set)
            self._results = [int(r) for r in results]
            if not UNSETTLED.intersection(self._results):
                self._sent = _nothing_sent  # no store check left: let the buffers go
        self._done.set()

    @property
    def done(self) -> bool:
        """True once the batch has ended (its completion was drained)."""
        if not self._done.is_set() and self._poll is not None:
            self._poll()
        return self._done.is_set()

    @property
    def results(self) -> list[int] | None:
        """The per-key results the call would have returned, once the batch ended."""
        return None if self._results is None else list(self._results)

    # ------------------------------------------------------------- waiting

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the batch ends (True) or ``timeout`` seconds pass (False).  Not from
        the event loop an :class:`~mooncake_cffi.AsyncClient`'s write runs on: await
        :meth:`outcome_async` there."""
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while not self.done:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._done.wait(POLL_SECONDS if left is None else min(POLL_SECONDS, left))
        return True

    async def wait_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait` for a coroutine: the event loop goes on meanwhile."""
        import asyncio  # (not at import: the package loads without asyncio)

        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while not self.done:
            if end is not None and time.monotonic() >= end:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    # ------------------------------------------------------------- outcome

    def outcome(self, timeout: float | None = 0.0) -> list[KeyOutcome]:
        """Each key's outcome, waiting up to ``timeout`` seconds (None: until the batch ends;
        0: not at all) for the batch's completion, then asking the store about what that
        did not settle (each read within the client's deadline)."""
        self.wait(timeout)
        return self._resolve()

    async def outcome_async(self, timeout: float | None = 0.0) -> list[KeyOutcome]:
        """:meth:`outcome` for a coroutine (the store is asked in the loop's executor)."""
        import asyncio

        await self.wait_async(timeout)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._resolve)

    def _resolve(self) -> list[KeyOutcome]:
        out: list[KeyOutcome] = []
        for i, key in enumerate(self.keys):
            answer = self._from_completion(i, key)
            if answer is None:
                state = self._ask_store(i, key)
                # The batch may have ended during the read: its completion then answers.
                answer = self._from_completion(i, key)
                if answer is None:
                    results = self._results
                    answer = KeyOutcome(
                        key, state, None if results is None else results[i], "store"
                    )
            out.append(answer)
        return out

    def _from_completion(self, i: int, key: Any) -> KeyOutcome | None:
        """Key ``i``'s outcome as its batch's completion settles it, or None."""
        results = self._results
        if results is None or not self._settled or results[i] in UNSETTLED:
            return None
        code = results[i]
        if code == PUT_EXISTED:
            state = WriteState.EXISTED
        elif code >= 0:
            state = WriteState.LANDED
        else:
            state = WriteState.NOT_LANDED
        return KeyOutcome(key, state, code, "completion")

    def _ask_store(self, i: int, key: Any) -> WriteState:
        ended = self._done.is_set()  # before the read: a batch that ends after it may land
        sent = self._sent(i)
        now = self._reader(key)
        if now is UNREADABLE:
            return WriteState.UNKNOWN
        if now is None:
            # Absent: after the batch ended nothing of it will land; in flight, it may.
            return WriteState.NOT_LANDED if ended else WriteState.UNKNOWN
        if sent is not None and now == sent:
            return WriteState.LANDED
        return WriteState.UNKNOWN


def _key_id(key: Any) -> Any:
    return key.encode() if isinstance(key, str) else bytes(key)


class WriteLedger:
    """A client's timed-out writes: by batch id until their completions are drained, and the
    latest of each key (the newest :data:`KEEP` keys) for
    :meth:`~mooncake_cffi.batches.Batches.write_outcome`.  Thread-safe."""

    #: Keys whose latest timed-out write is remembered.
    KEEP = 65536

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_batch: dict[int, PendingWrite] = {}
        self._by_key: dict[Any, PendingWrite] = {}

    def add(self, write: PendingWrite) -> None:
        """Remember ``write`` (its batch id is set when it has one in flight)."""
        with self._lock:
            if write.batch_id is not None:
                self._by_batch[write.batch_id] = write
            for key in write.keys:
                kid = _key_id(key)
                self._by_key.pop(kid, None)
                self._by_key[kid] = write
            while len(self._by_key) > self.KEEP:
                del self._by_key[next(iter(self._by_key))]

    def ended(self, batch_id: int, results: Sequence[int] | None, status: int) -> None:
        """A drained completion of batch ``batch_id``: complete its write, if it is one."""
        if not self._by_batch:
            return
        with self._lock:
            write = self._by_batch.pop(batch_id, None)
        if write is not None:
            write.complete(results, status)

    def latest(self, key: Any) -> PendingWrite | None:
        """The latest timed-out write of ``key`` remembered, or None."""
        with self._lock:
            return self._by_key.get(_key_id(key))

    def outcome(self, keys: Sequence[Any], timeout: float | None = 0.0) -> list[KeyOutcome]:
        """Each key's outcome in its latest timed-out write remembered here (see
        :meth:`PendingWrite.outcome`: waits up to ``timeout`` seconds for the writes'
        batches, then asks the store about the rest).  A ValueError for a key no write of
        which timed out on this client (the newest :data:`KEEP` keys are remembered)."""
        writes = []
        for key in keys:
            write = self.latest(key)
            if write is None:
                raise ValueError(f"no write of key {key!r} timed out on this client")
            writes.append(write)
        end = None if timeout is None else time.monotonic() + timeout
        answers: dict[int, dict[Any, KeyOutcome]] = {}
        out: list[KeyOutcome] = []
        for key, write in zip(keys, writes):
            if id(write) not in answers:
                left = None if end is None else max(0.0, end - time.monotonic())
                answers[id(write)] = {_key_id(o.key): o for o in write.outcome(left)}
            out.append(answers[id(write)][_key_id(key)])
        return out
