"""Batches that run in the background: submitted to their lane, finished through the eventfd.

Every :class:`mooncake_cffi.Client` has one :class:`Batches` (``client.batches``; the client's
``submit`` / ``drain`` / ``wait`` / ``fileno`` / ``pending`` / ``in_flight`` are the same
calls).  A submit queues a batch on its operation's lane and returns its id at once; the
keys are copied, the buffers and result arrays are kept alive here until the batch's
:class:`Completion` has been drained.  Exactly one completion per batch; the client's eventfd
(:meth:`Batches.fileno`) is readable while completions wait, so an event loop can watch it
(:class:`mooncake_cffi.AsyncClient` does).  Draining also frees what timed-out blocking calls
left with the shim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._capi.completion import Completion
from .._capi.marshal import Packed, as_list
from .._capi.native import NativeClient
from .._capi.runner import Runner
from ..outcome import KeyOutcome
from ..status import FLAG_FORCE, FLAG_LAND, FLAG_SKIP_EXISTING, OP_CODES, OP_GET, OPS
from .plans import Step
from .types import Key

if TYPE_CHECKING:
    from ..replica import ReplicateConfig

__all__ = ["Batches", "Completion", "submit_flags"]


def submit_flags(*, force: bool = False, skip_existing: bool = False, land: bool = False) -> int:
    """The ``status.FLAG_*`` bits of a submitted batch's options (``Batches.submit``,
    ``AsyncClient.submit``)."""
    return (
        (FLAG_FORCE if force else 0)
        | (FLAG_SKIP_EXISTING if skip_existing else 0)
        | (FLAG_LAND if land else 0)
    )


class Batches:
    """Submitting batches to a client's lanes and draining their completions.

    Created by the client (``client.batches``); thread-safe.  Its shim calls go through
    the client's :class:`~_capi.runner.Runner` (``runner``), which it makes.
    """

    def __init__(self, native: NativeClient) -> None:
        self.native = native
        #: The client's shim calls, shared with its blocking driver.
        self.runner = Runner(native)

    def submit(
        self,
        op: str,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        force: bool = False,
        skip_existing: bool = False,
        land: bool = False,
        replicate_config: ReplicateConfig | None = None,
        user_data: Any = None,
    ) -> int:
        """Queue a batch on its lane and return its id without waiting.

        ``op`` is one of :data:`mooncake_cffi.OPS`: ``"exists"``, ``"get"``, ``"put"``,
        ``"upsert"``, ``"remove"``, ``"size"``, ``"get_buffer"`` (reads values without
        buffers of yours: they arrive as ``Completion.values``).  ``get`` needs writable
        ``buffers``; ``put`` and ``upsert`` need readable ones; they (and the keys) are kept
        alive here until the completion is drained.  ``force`` (remove) ignores the read
        lease; ``skip_existing`` (put) looks keys up first and does not send present ones.
        ``land`` (get) reads into memory of the shim's first and copies each key's bytes
        into its buffer when its read ends, until you :meth:`withdraw` the batch: once
        ``withdraw`` returns, the buffers are never written (a read that goes on in
        Mooncake lands in the shim's memory), and keys read but not copied answer
        MCS_E_TIMEOUT.  Without it, a withdrawn batch's running reads still write your
        buffers when they end.  (Not for rdma, which reads only into registered memory.)
        ``user_data`` comes back in the completion.  Exactly one :class:`Completion` per
        batch becomes available through :meth:`drain`.  Refused batches (bad input, a full
        lane, a closed client) raise here and get no completion.
        """
        code = OP_CODES.get(op) if isinstance(op, str) else None
        if code is None:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        flags = submit_flags(force=force, skip_existing=skip_existing, land=land)
        step = Step(
            code,
            as_list(keys),
            None if buffers is None else as_list(buffers, "buffers"),
            flags,
            replicate_config,
            None if sizes is None else list(sizes),
        )
        return self.submit_step(step, writable=code == OP_GET, user_data=user_data)

    def submit_step(self, step: Step, *, writable: bool = False, user_data: Any = None) -> int:
        """Queue the batch of a plan's :class:`~_core.plans.Step`; its id.  ``writable``: GET
        buffers must be writable (a plan's own fresh ``bytes`` buffers are filled in place
        and are not)."""
        packed = Packed(
            step.op,
            step.keys,
            step.bufs,
            step.sizes,
            flags=step.flags,
            writable=writable,
            replicate_config=step.replicate_config,
        )
        return self.runner.submit(packed, user_data)

    def withdraw(self, batch_id: int) -> int:
        """Take back what of batch ``batch_id`` is still queued on its lane, when you stopped
        waiting for it: none of that is sent, and its keys answer MCS_E_TIMEOUT in the
        batch's one completion, which comes once its parts already running end (Mooncake
        cannot stop a transfer it started).  Returns the number of keys withdrawn (0: none
        queued, the batch running or ended).  Without it, a lane goes on to run work
        nobody waits for (a blocking call does this by itself at its deadline).  A batch
        submitted with ``land`` writes none of its buffers once this returns."""
        return self.runner.withdraw(batch_id)

    def drain(self, max_items: int = 1024) -> list[Completion]:
        """Completions of finished batches (never blocks); resets the eventfd."""
        return self.runner.drain(max_items)

    def fileno(self) -> int:
        """The completion eventfd (non-blocking, close-on-exec, owned by the client):
        readable while completions wait to be drained."""
        return self.native.fileno()

    def reap(self) -> None:
        """Free what timed-out blocking calls left with the shim, once their batches ended.

        When batches are pending, their completions are someone else's to drain (draining
        reaps the orphans then); otherwise this drains.
        """
        self.runner.reap()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a completion is waiting (True) or ``timeout`` seconds pass (False)."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        return self.runner.wait(ms)

    def finished(self, batch_id: int) -> bool:
        """True once batch ``batch_id`` (submitted, or a blocking call's that timed out) has
        ended and its completion was drained (reaping those of timed-out calls first)."""
        native = self.native
        if batch_id in native.orphans:
            self.reap()
        return batch_id not in native.orphans and batch_id not in native.pending

    def write_outcome(self, keys: Sequence[Key], timeout: float | None = 0.0) -> list[KeyOutcome]:
        """What the latest timed-out write of each of ``keys`` on this client did, for a
        caller who no longer holds its :class:`~mooncake_cffi.MooncakeTimeoutError` (the
        drop-in's callers see only ``-901``): see
        :meth:`mooncake_cffi.outcome.WriteLedger.outcome`."""
        return self.native.writes.outcome(as_list(keys), timeout)

    @property
    def pending(self) -> int:
        """Submitted batches whose completion has not been drained yet."""
        return len(self.native.pending)

    @property
    def in_flight(self) -> int:
        """Batches the shim still works on: submitted and not drained, plus timed-out calls."""
        native = self.native
        if native.orphans and not native.pending:
            self.drain()
        return len(native.pending) + len(native.orphans)
