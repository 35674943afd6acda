"""The asynchronous core of a client: batches submitted to the lanes, their completions
drained through the eventfd, and what timed-out blocking calls left with the shim.

:class:`AsyncCore` sits between :class:`~mooncake_cffi._calls.BlockingCalls` and
:class:`mooncake_cffi.Client`; :class:`mooncake_cffi.AsyncClient` is built on its public
``submit`` / ``drain`` / ``fileno``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._binding import ffi, lib
from ._calls import BlockingCalls
from ._marshal import Packed, as_list, refused
from ._plans import gather_values
from ._stats import OP_CODES, OPS
from .errors import check
from .status import MCS_E_TIMEOUT

__all__ = ["AsyncCore", "Completion"]

_OP = OP_CODES
_GET, _GET_BUFFER = _OP["get"], _OP["get_buffer"]
_FLAG_FORCE = lib.MCS_FLAG_FORCE
_FLAG_SKIP_EXISTING = lib.MCS_FLAG_SKIP_EXISTING
_COMPLETION_SIZE = ffi.sizeof("struct mcs_completion")


@dataclass(frozen=True)
class Completion:
    """A finished batch, as returned by :meth:`Client.drain`.

    ``results`` holds one value per key (see the method that submitted it); ``status``
    is 0 or the first per-key error (a missing key is reported only in its result);
    ``message`` explains a non-zero status.  ``values`` holds the bytes read by a
    ``get_buffer`` batch (None for a key it did not read), else None.  ``ran`` is
    False when the batch as a whole did not run (``status`` then says why).
    """

    id: int
    op: str
    status: int
    results: list[int]
    n_failed: int
    message: str
    values: list[bytes | None] | None = None
    user_data: Any = None
    ran: bool = True

    @property
    def ok(self) -> bool:
        return self.status == 0


class AsyncCore(BlockingCalls):
    """Submitting batches and draining their completions (see :class:`mooncake_cffi.Client`)."""

    # ---------------------------------------------------------- async core

    def submit(
        self,
        op: str,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        force: bool = False,
        skip_existing: bool = False,
        replicate_config: Any = None,
        user_data: Any = None,
    ) -> int:
        """Queue a batch on its lane and return its id without waiting.

        ``op`` is one of :data:`OPS`: ``"exists"``, ``"get"``, ``"put"``,
        ``"upsert"``, ``"remove"``, ``"size"``, ``"get_buffer"`` (reads values
        without buffers of yours: they arrive as ``Completion.values``).  ``get``
        needs writable ``buffers``; ``put`` and ``upsert`` need readable ones; they
        (and the keys) are kept alive here until the completion is drained.
        Exactly one :class:`Completion` per batch becomes available through
        :meth:`drain`; :meth:`fileno` turns readable when one is waiting.
        """
        code = _OP.get(op) if isinstance(op, str) else None
        if code is None:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        flags = (_FLAG_FORCE if force else 0) | (_FLAG_SKIP_EXISTING if skip_existing else 0)
        packed = Packed(
            code,
            as_list(keys),
            None if buffers is None else as_list(buffers, "buffers"),
            sizes,
            flags=flags,
            writable=code == _GET,
            replicate_config=replicate_config,
        )
        idp = self._idp()
        with self._lock:  # registered before the completion can be drained
            rc = lib.mcs_submit(self._h(), idp, packed.batch)
            if rc < 0:
                raise refused(rc, packed.keys)
            self._pending[int(idp[0])] = (packed, user_data)
        return int(idp[0])

    def drain(self, max_items: int = 1024) -> list[Completion]:
        """Completions of finished batches (never blocks); resets :meth:`fileno`."""
        if self._handle is None:
            return []
        out = ffi.new("struct mcs_completion[]", max_items)
        done: list[Completion] = []
        with self._lock:
            k = check(lib.mcs_drain(self._handle, out, max_items, _COMPLETION_SIZE))
            for i in range(k):
                c = out[i]
                bid = int(c.id)
                if c.timed_out:  # a blocking call gave up on it: nobody to tell
                    self._orphans.pop(bid, None)
                    lib.mcs_release(self._handle, bid)
                    continue
                packed, user = self._pending.pop(bid, (None, None))
                results = packed.unpack() if packed is not None else []
                values = None
                if c.op == _GET_BUFFER and packed is not None and c.status == 0:
                    values = gather_values(packed, results)
                    lib.mcs_release(self._handle, bid)
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

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a completion is waiting (True) or ``timeout`` seconds pass (False)."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rc = lib.mcs_wait(self._h(), ms)
        if rc == MCS_E_TIMEOUT:
            return False
        check(rc)
        return True

    def fileno(self) -> int:
        """The completion eventfd (non-blocking): readable while completions wait."""
        fd = ffi.new("int *")
        check(lib.mcs_client_fd(self._h(), fd))
        return int(fd[0])

    @property
    def pending(self) -> int:
        """Submitted batches whose completion has not been drained yet."""
        return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Batches the shim still works on: submitted and not drained, plus timed-out calls."""
        if self._orphans and not self._pending:
            self.drain()
        return len(self._pending) + len(self._orphans)
