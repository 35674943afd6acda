"""Exceptions of mooncake-cffi and the mapping from shim status codes to them.

Every failure reported by the shim or by Mooncake becomes a :class:`MooncakeError`
(or a subclass) carrying the numeric ``code`` and its symbolic ``name``.  Several
subclasses also derive from a builtin so callers can catch either:
``KeyNotFoundError`` is a ``LookupError``, ``InvalidArgumentError`` a ``ValueError``,
``ClosedError`` a ``RuntimeError``, ``MooncakeTimeoutError`` a ``TimeoutError``.
Symbolic names of codes come from :func:`mooncake_cffi.error_name` (:mod:`.status`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import status
from .status import (
    ILLEGAL_CLIENT,
    INVALID_PARAMS,
    MCS_E_CLOSED,
    MCS_E_CORRUPT,
    MCS_E_DUPLICATE_KEY,
    MCS_E_FORKED,
    MCS_E_INVALID_ARG,
    MCS_E_INVALID_HANDLE,
    MCS_E_OUTSIDE_L1,
    MCS_E_QUEUE_FULL,
    MCS_E_TIMEOUT,
    MCS_E_UNREACHABLE,
    MCS_E_UNSUPPORTED,
    NO_AVAILABLE_HANDLE,
    OBJECT_HAS_LEASE,
    OBJECT_NOT_FOUND,
    REPLICA_IS_NOT_READY,
    RPC_FAIL,
    RPC_TIMEOUT,
    TRANSFER_FAIL,
)

if TYPE_CHECKING:
    from .outcome import KeyOutcome, PendingWrite

__all__ = [
    "MooncakeError",
    "KeyNotFoundError",
    "HasLeaseError",
    "NoSpaceError",
    "ClosedError",
    "ForkedError",
    "TransportError",
    "QueueFullError",
    "InvalidArgumentError",
    "L1Error",
    "MooncakeTimeoutError",
    "IntegrityError",
    "ConcurrentWriteError",
    "CONCURRENT_WRITE_CODES",
    "error_for",
    "write_error_for",
]


class MooncakeError(Exception):
    """A failed operation.

    Attributes:
        code: the status code (Mooncake's ErrorCode, or the shim's ``MCS_E_*``).
        name: its symbolic name, e.g. ``"OBJECT_HAS_LEASE"``.
        message: what went wrong, in words.
        results: per-key results of the batch, when the error concerns a batch.
        retryable: True when the same call may succeed if tried again (a full pool,
            a failed transfer or RPC, a timeout, a replica not yet ready); False for
            bad input, a closed client, a missing key.
    """

    def __init__(self, code: int, message: str = "", results: Sequence[int] | None = None):
        self.code = int(code)
        self.name = status.name(self.code)
        self.message = message or status.text(self.code)
        self.retryable = status.is_retryable(self.code)
        self.results = list(results) if results is not None else None
        super().__init__(f"{self.name} ({self.code}): {self.message}")


class KeyNotFoundError(MooncakeError, LookupError):
    """The key is not in the store (OBJECT_NOT_FOUND, -704)."""


class HasLeaseError(MooncakeError):
    """The key is under a read lease (OBJECT_HAS_LEASE, -706); remove with force=True."""


class NoSpaceError(MooncakeError):
    """The cluster's memory segments are full (NO_AVAILABLE_HANDLE, -200)."""


class ClosedError(MooncakeError, RuntimeError):
    """The client was closed (or its handle freed)."""


class ForkedError(MooncakeError, RuntimeError):
    """The client was created in a parent process; create a new one after fork()."""


class TransportError(MooncakeError, ConnectionError):
    """Moving data or talking to the master failed (TRANSFER_FAIL, RPC_FAIL, unreachable)."""


class QueueFullError(MooncakeError):
    """A lane's queue stayed full (see ``queue_capacity`` / ``queue_timeout``)."""


class InvalidArgumentError(MooncakeError, ValueError):
    """Bad input: empty or duplicate keys, zero sizes, too-small buffers, ..."""


class L1Error(InvalidArgumentError):
    """A transfer buffer lies outside the registered L1 region or crosses a block."""


class MooncakeTimeoutError(MooncakeError, TimeoutError):
    """A wait ran out.

    ``batch_id`` is the id of the batch a blocking call stopped waiting for (it goes on in
    the shim, which keeps the call's buffers in use until it ends), or None.

    ``write`` is set when the call was a write (put, upsert, their batch and zero-copy
    forms, sync or async): a :class:`~mooncake_cffi.outcome.PendingWrite` whose
    :meth:`outcome` tells, per key, whether it landed; None for any other call.
    """

    def __init__(
        self,
        code: int,
        message: str = "",
        results: Sequence[int] | None = None,
        batch_id: int | None = None,
        write: PendingWrite | None = None,
    ) -> None:
        super().__init__(code, message, results)
        self.batch_id = batch_id
        self.write = write

    def outcome(self, timeout: float | None = 0.0) -> list[KeyOutcome]:
        """What the timed-out write did to each of its keys (see :class:`~mooncake_cffi.
        outcome.WriteState`): waits up to ``timeout`` seconds (None: until its batch ends)
        for the batch, then asks the store about the rest.  Not on an event loop: await
        ``err.write.outcome_async()`` there.  A ValueError for a timed-out read."""
        if self.write is None:
            raise ValueError("this timeout is not a write's: it has no outcome to learn")
        return self.write.outcome(timeout)


class IntegrityError(MooncakeError):
    """A value read with the ``integrity`` option on did not verify: its checksum trailer
    was missing (written by a client without the option) or did not match its bytes (torn
    by a concurrent upsert, or damaged), still after the shim re-read it for ~15 ms.  No
    bytes of it are returned."""


class ConcurrentWriteError(MooncakeError):
    """Another writer upserted the same key at the same time, and this write lost.

    Mooncake's master lets one upsert of a key be in progress at a time.  An upsert that
    starts while another is in progress takes the key over at once: the earlier writer's
    space is discarded and its upsert ends in ``ILLEGAL_CLIENT`` (-601) when it tries to
    complete.  ``REPLICA_IS_NOT_READY`` (-703), a key whose replica another writer is still
    writing, is taken the same way.  This call's bytes were not stored; the key holds the
    other writer's value, whole.  ``code`` is Mooncake's.

    What to do: upsert again if this value must win (the later upsert wins), or read the
    key if any whole value will do.  ``retryable`` is True (the same call would succeed),
    but a client's retry policy retries only -703, as for any write: retrying on its own
    would just make the loser the last writer.  See the guide's section on writes.
    """

    def __init__(self, code: int, message: str = "", results: Sequence[int] | None = None):
        super().__init__(code, message, results)
        self.retryable = True


#: Mooncake's codes that, for an upsert, mean another writer of the same key won the race.
CONCURRENT_WRITE_CODES: frozenset[int] = frozenset({ILLEGAL_CLIENT, REPLICA_IS_NOT_READY})


_BY_CODE: dict[int, type[MooncakeError]] = {
    OBJECT_NOT_FOUND: KeyNotFoundError,
    OBJECT_HAS_LEASE: HasLeaseError,
    NO_AVAILABLE_HANDLE: NoSpaceError,
    INVALID_PARAMS: InvalidArgumentError,
    TRANSFER_FAIL: TransportError,
    RPC_FAIL: TransportError,
    RPC_TIMEOUT: TransportError,
    MCS_E_INVALID_ARG: InvalidArgumentError,
    MCS_E_INVALID_HANDLE: ClosedError,
    MCS_E_CLOSED: ClosedError,
    MCS_E_FORKED: ForkedError,
    MCS_E_QUEUE_FULL: QueueFullError,
    MCS_E_OUTSIDE_L1: L1Error,
    MCS_E_DUPLICATE_KEY: InvalidArgumentError,
    MCS_E_UNREACHABLE: TransportError,
    MCS_E_UNSUPPORTED: InvalidArgumentError,  # a replica option the wheel lacks
    MCS_E_TIMEOUT: MooncakeTimeoutError,
    MCS_E_CORRUPT: IntegrityError,
}


def error_for(code: int, message: str = "", results: Sequence[int] | None = None) -> MooncakeError:
    """The exception instance for a status code."""
    return _BY_CODE.get(int(code), MooncakeError)(code, message, results)


def write_error_for(
    code: int, message: str = "", results: Sequence[int] | None = None, *, upsert: bool = False
) -> MooncakeError:
    """The exception for a write's per-key code: for an upsert, a code that shows a racing
    writer of the same key is a :class:`ConcurrentWriteError`; otherwise :func:`error_for`."""
    if upsert and int(code) in CONCURRENT_WRITE_CODES:
        return ConcurrentWriteError(code, message, results)
    return error_for(code, message, results)
