"""Values in and out: where a client's bytes go, and who won a put race.

:class:`Values` is what :class:`mooncake_cffi.Client`'s puts, upserts and gets call.  Without
L1 a value goes straight from (or into) Python memory in blocking batches through
:class:`~_core.blocking.BlockingCalls` (gets: one round trip through the thread's scratch buffer
for a small value, else the get plan of :mod:`_core.plans`); with an L1 region registered it is
copied through the L1 :class:`~.staging.Staging` area.  For ``skip_existing`` puts it finds
out which keys this call really wrote (:meth:`Values.first_writer_wins`), unless the client
verifies values (``integrity``), whose shim tells that from each key's trailer.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from .._capi.marshal import nbytes
from .._capi.native import NativeClient
from ..status import FLAG_SKIP_EXISTING, OP_PUT, OP_UPSERT
from .blocking import NEEDS_PLAN, BlockingCalls
from .plans import Step, batch_get_plan, first_writer_plan, raise_key_errors, segment_note
from .staging import Staging
from .types import Timeout

__all__ = ["Values"]


def _list(sizes: Sequence[int] | None) -> list[int] | None:
    return None if sizes is None else list(sizes)


class Values:
    """Puts, upserts and gets of bytes-like values for ``owner`` (the client).

    Without an L1 region registered with ``native``, values go straight from and into
    Python memory; with one, through the L1 staging area, created on first use over the
    owner's zero-copy calls.

    The owner is held through a weak proxy: the client holds this object, and a cycle
    between them would keep a dropped client (its Mooncake client and memory segment)
    alive until the garbage collector's next pass, where Mooncake's own class goes at once.
    """

    def __init__(self, calls: BlockingCalls, native: NativeClient, owner: Any) -> None:
        self.calls = calls
        self.native = native
        self.owner = weakref.proxy(owner)
        self.note = segment_note(native.config)  # NO_AVAILABLE_HANDLE's words on the segment
        #: With ``integrity`` on, the shim tells the first writer itself (from the trailer's
        #: nonce, 16 bytes read back): no read-back of whole values here.
        self.shim_confirms = native.config.integrity == "crc32c"
        self.area: Staging | None = None

    def staging(self) -> Staging | None:
        """The L1 staging area (created on first use), or None without L1."""
        if self.area is not None:
            return self.area
        native = self.native
        if native.l1_cdata is None:
            return None
        with native.lock:
            if self.area is None:
                block = native.l1_block_size or None
                self.area = Staging(self.owner, native.l1, block_size=block)
        return self.area

    def _staging_timeout(self, staging: Staging, timeout: Timeout) -> float:
        limit = self.calls.limit(timeout)
        return staging.timeout if limit is None else limit

    # ---------------------------------------------------------------- gets

    def get(self, key: Any, timeout: Timeout) -> bytes | None:
        """The value of one key, or None if it does not exist."""
        staging = self.staging()
        if staging is not None:
            return staging.get([key], timeout=self._staging_timeout(staging, timeout))[0]
        value = self.calls.get_small(key, timeout)
        if value is not NEEDS_PLAN:
            return value  # type: ignore[no-any-return]
        return self.calls.drive(batch_get_plan([key]), timeout)[0]  # type: ignore[no-any-return]

    def batch_get(self, keys: list[Any], timeout: Timeout) -> list[bytes | None]:
        """The values of ``keys`` (None where missing), in as few round trips as it takes."""
        staging = self.staging()
        if staging is not None:
            return staging.get(keys, timeout=self._staging_timeout(staging, timeout))
        if len(keys) == 1:  # one round trip through the scratch buffer
            return [self.get(keys[0], timeout)]
        return self.calls.drive(batch_get_plan(keys), timeout)  # type: ignore[no-any-return]

    # -------------------------------------------------------------- writes

    def store_one(
        self, op: int, key: Any, value: Any, flags: int, replicate_config: Any, timeout: Timeout
    ) -> int:
        """Store one value; its status (0, or ``PUT_EXISTED``); raises for an error."""
        results = self.store(op, [key], [value], flags, replicate_config, timeout)
        raise_key_errors([key], results, (), [nbytes(value)], self.note, upsert=op == OP_UPSERT)
        return results[0]

    def store(
        self,
        op: int,
        keys: list[Any],
        values: list[Any],
        flags: int,
        replicate_config: Any,
        timeout: Timeout,
    ) -> list[int]:
        """Store ``values`` under ``keys`` (``op``: PUT or UPSERT); per-key status."""
        staging = self.staging()
        if staging is None:
            results = self.calls.run(
                op, keys, values, flags=flags, replicate_config=replicate_config, timeout=timeout
            )
        else:
            results = staging.put(
                keys,
                values,
                upsert=op == OP_UPSERT,
                skip_existing=bool(flags & FLAG_SKIP_EXISTING),
                replicate_config=replicate_config,
                timeout=self._staging_timeout(staging, timeout),
                first_writer_check=False,  # done below, once the slots are free again
            )
        if flags & FLAG_SKIP_EXISTING and not self.shim_confirms:
            step = Step(OP_PUT, keys, values, flags, replicate_config)
            results = self.first_writer_wins(step, values, results, timeout)
        return results

    def put_from(
        self,
        keys: list[Any],
        buffers: list[Any],
        sizes: Sequence[int] | None,
        *,
        op: int,
        skip_existing: bool,
        replicate_config: Any,
        timeout: Timeout,
        first_writer_check: bool,
    ) -> list[int]:
        """Store from the callers' buffers as they are (zero-copy); per-key status."""
        results = self.calls.run(
            op,
            keys,
            buffers,
            sizes,
            flags=FLAG_SKIP_EXISTING if skip_existing else 0,
            replicate_config=replicate_config,
            timeout=timeout,
        )
        if skip_existing and first_writer_check and not self.shim_confirms:
            sent = (
                buffers
                if sizes is None
                else [memoryview(b).cast("B")[:n] for b, n in zip(buffers, sizes)]
            )
            step = Step(op, keys, buffers, FLAG_SKIP_EXISTING, replicate_config, _list(sizes))
            results = self.first_writer_wins(step, sent, results, timeout)
        return results

    def first_writer_wins(
        self,
        step: Step,
        values: Sequence[Any],
        results: list[int],
        timeout: Timeout,
    ) -> list[int]:
        """``results`` of the skip-existing put ``step`` of ``values``, with ``PUT_EXISTED``
        for every key another writer won (see :func:`~_core.plans.first_writer_plan`)."""
        plan = first_writer_plan(step, values, results)
        return self.calls.drive(plan, timeout)  # type: ignore[no-any-return]
