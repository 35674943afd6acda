"""A staging area in registered L1 memory, so bytes APIs work when Mooncake needs L1 buffers.

With an L1 region registered (the RDMA case), every transfer buffer must lie inside it, so
``bytes`` values cannot be handed to Mooncake directly.  :class:`Staging` carves slots out of
the region (or a slice of it), copies values into them and stores them with
``client.put_from``, or reads values into them with ``client.get_into`` and copies them out.

- **Bounded and reused**: it never allocates beyond the region it was given; slots return to
  it after each round.
- **Thread-safe**: concurrent callers get disjoint slots; when the area is full they wait, in
  arrival order, up to a timeout (then :class:`~mooncake_cffi.MooncakeTimeoutError`).
- **Deadlines kept**: every Mooncake batch of a call gets what is left of the call's
  ``timeout``; a batch that times out keeps its slots (Mooncake may still read or write them)
  until the shim reports it finished, so no later call reuses memory Mooncake still uses.
- **Large batches in pieces**: a batch larger than the free space is moved in several rounds,
  in key order, each as one Mooncake batch.  A single value must fit one slot, i.e. one L1
  block of the staging area (Mooncake stores a value from one buffer and reads it into one):
  a larger value is refused up front, before anything is sent, with an error naming its size
  and the area's.

The client is a :class:`StagingClient`, the interface declared below (a
:class:`mooncake_cffi.Client` is one, and is meant to own the area).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import ClosedError, InvalidArgumentError, MooncakeTimeoutError, error_for
from ..status import (
    INVALID_PARAMS,
    MCS_E_CLOSED,
    MCS_E_INVALID_ARG,
    MCS_E_TIMEOUT,
    OBJECT_NOT_FOUND,
)
from ..status import text as status_text
from .slots import Slots, block_spans

__all__ = ["Staging", "StagingClient", "DEFAULT_ALIGN", "DEFAULT_TIMEOUT"]


class StagingClient(Protocol):
    """What :class:`Staging` uses of its client (:class:`mooncake_cffi.Client` is one).

    Beyond these three calls it uses, when the client has them: ``batch_size(keys,
    timeout=)`` (one round trip to size a batch, else one ``size`` per key), ``l1_blocks``
    (the blocks L1 was registered in: slots must not cross one) and
    ``batches.finished(batch_id)`` (when a timed-out batch has ended, so its slots can be
    used again; without it they stay held).
    """

    def put_from(
        self, keys: Any, buffers: Any, *, timeout: float | None = ..., **options: Any
    ) -> Any: ...

    def get_into(self, keys: Any, buffers: Any, *, timeout: float | None = ...) -> Any: ...

    def size(self, key: Any, *, timeout: float | None = ...) -> Any: ...


#: Slots start at multiples of this many bytes from the start of their block's part of the area.
DEFAULT_ALIGN = 64
#: Seconds a call waits for free staging space before raising MooncakeTimeoutError.
DEFAULT_TIMEOUT = 30.0
#: Re-reads of a key whose value was replaced by a larger one between sizing and reading.
_GET_ATTEMPTS = 3


def _byte_view(value: Any, index: int) -> memoryview:
    """A flat byte view of a bytes-like value, or a TypeError naming it."""
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(
            f"value #{index} must be a bytes-like object, not {type(value).__name__}"
        ) from None
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class Staging:
    """Bytes in and out of Mooncake through slots of a registered L1 region.

    Args:
        client: the client that registered ``l1`` (a :class:`mooncake_cffi.Client`, or any
            object with its ``put_from`` / ``get_into`` / ``size`` methods).
        l1: the whole L1 buffer given to the client (``Client(config, l1=...)``): a writable,
            C-contiguous buffer (numpy array, ``mmap``, ``bytearray``).
        offset, size: the slice of ``l1`` to stage through (default: all of it).  Give a slice
            when other parts of L1 hold the caller's own zero-copy buffers.
        block_size: the L1 registration block size (``Client(l1_block_size=...)``).  Slots
            never cross a block boundary, as Mooncake requires.  Default: one block when the
            client registered one, else ``$MC_MAX_MR_SIZE`` if that matches the client's block
            count; otherwise it must be given.
        align: slots start at multiples of this many bytes from the start of their block's
            part of the area.
        timeout: seconds a call waits for free space before raising
            :class:`~mooncake_cffi.MooncakeTimeoutError` (each call may override it).

    The area is shared by all callers: each round of a call holds its slots only while its
    Mooncake batch runs, and a caller waits for space only while holding none, so callers
    never deadlock; waiters are served in arrival order.  The caller keeps ``l1`` alive (a
    ``Client`` owning both does).
    """

    def __init__(
        self,
        client: StagingClient,
        l1: Any,
        *,
        offset: int = 0,
        size: int | None = None,
        block_size: int | None = None,
        align: int = DEFAULT_ALIGN,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        try:
            region = memoryview(l1)
        except TypeError:
            raise TypeError(f"l1 must be a writable buffer, not {type(l1).__name__}") from None
        if region.readonly:
            raise ValueError("l1 must be writable (it is read-only)")
        if not region.c_contiguous:
            raise ValueError("l1 must be C-contiguous")
        region = region.cast("B") if region.format != "B" or region.ndim != 1 else region
        n = len(region)
        if n == 0:
            raise ValueError("l1 is empty")
        if size is None:
            size = n - offset
        for name, value in (("offset", offset), ("size", size), ("align", align)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer")
        if size == 0 or offset + size > n:
            raise ValueError(
                f"the staging slice [{offset}, {offset + size}) must be non-empty and lie "
                f"inside l1 ({n} bytes)"
            )
        if align < 1:
            raise ValueError("align must be at least 1")
        if timeout is None or timeout < 0:
            raise ValueError("timeout must be >= 0 seconds")
        block = self._block_size(client, n, block_size)
        self.client = client
        self.region = region
        self.offset = offset
        self.size = size
        self.block_size = block
        self.timeout = float(timeout)
        self._slots = Slots(block_spans(n, offset, size, block), align)
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._tickets = 0
        self._closed = False
        #: Slots of batches that timed out, kept until the shim says the batch ended.
        self._held: list[tuple[int, list[tuple[int, int]]]] = []

    @staticmethod
    def _block_size(client: Any, region_len: int, given: int | None) -> int:
        if given is not None:
            if not isinstance(given, int) or isinstance(given, bool) or given <= 0:
                raise ValueError("block_size must be a positive integer")
            return given
        blocks = int(getattr(client, "l1_blocks", 0) or 0)
        if blocks <= 1:
            return region_len
        env = os.environ.get("MC_MAX_MR_SIZE", "")
        if env.isdigit() and int(env) > 0 and -(-region_len // int(env)) == blocks:
            return int(env)
        raise ValueError(
            f"the client registered l1 in {blocks} blocks: give block_size= (the client's "
            "l1_block_size) so staging slots do not cross a block boundary"
        )

    # --------------------------------------------------------------- space

    @property
    def capacity(self) -> int:
        """Bytes in the staging area."""
        return self._slots.total

    @property
    def max_value_bytes(self) -> int:
        """The largest value that fits one slot (the largest block part of the area)."""
        return self._slots.largest

    @property
    def in_use(self) -> int:
        """Bytes held by calls in progress, and by timed-out batches Mooncake still works on."""
        with self._cond:
            self._release_ended()
            return self._slots.used

    def _release_ended(self) -> bool:
        """Give back the slots of timed-out batches that have ended (under the lock)."""
        if not self._held:
            return False
        finished = getattr(getattr(self.client, "batches", None), "finished", None)
        if finished is None:
            return False
        kept = []
        freed = False
        for batch_id, slots in self._held:
            if finished(batch_id):
                for offset, length in slots:
                    self._slots.give(offset, length)
                freed = True
            else:
                kept.append((batch_id, slots))
        self._held = kept
        return freed

    def _hold(self, exc: MooncakeTimeoutError, slots: list[tuple[int, int]]) -> None:
        """Keep the slots of a batch that timed out until it ends (Mooncake may still read
        or write them); without its id, for good."""
        with self._cond:
            self._held.append((exc.batch_id if exc.batch_id is not None else -1, list(slots)))
        slots.clear()

    def _check_fits(self, sizes: Sequence[int], keys: Sequence[Any], what: str) -> None:
        largest = self._slots.largest
        for i, n in enumerate(sizes):
            if n > largest:
                where = (
                    f"one {self.block_size}-byte L1 block"
                    if largest < self._slots.total
                    else "the staging area"
                )
                raise InvalidArgumentError(
                    MCS_E_INVALID_ARG,
                    f"{what} #{i} (key {keys[i]!r}) is {n} bytes: larger than the {largest} "
                    f"bytes a staging slot can hold (a value must fit {where}; the area has "
                    f"{self._slots.total} bytes); register a larger L1 region",
                )

    def _take(self, sizes: Sequence[int], deadline: float) -> list[tuple[int, int]]:
        """Slots for the longest leading run of ``sizes`` that fits now (at least one)."""
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._queue.append(ticket)
            try:
                while True:
                    if self._closed:
                        raise ClosedError(MCS_E_CLOSED, "the staging area was closed")
                    if self._queue[0] == ticket:
                        self._release_ended()
                        got: list[tuple[int, int]] = []
                        for n in sizes:
                            slot = self._slots.take(n)
                            if slot is None:
                                break
                            got.append(slot)
                        if got:
                            return got
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise MooncakeTimeoutError(
                            MCS_E_TIMEOUT,
                            f"waited for {sizes[0]} bytes of L1 staging space longer than the "
                            f"timeout ({self._slots.used} of {self._slots.total} bytes in use "
                            "by other calls)",
                        )
                    # Timed-out batches end without notifying: look again now and then.
                    self._cond.wait(min(left, 0.01) if self._held else left)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def _give(self, slots: list[tuple[int, int]]) -> None:
        with self._cond:
            for offset, length in slots:
                self._slots.give(offset, length)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop using the area and release the view of ``l1`` (so an mmap can be closed).

        Waits for calls in progress to give their slots back (timed-out batches: once they
        end; the owning client closes its shim client first, which ends them).  Later calls
        raise :class:`~mooncake_cffi.ClosedError`.  Idempotent.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(
                lambda: not self._release_ended() and self._slots.used == 0, timeout=self.timeout
            )
            self.region.release()

    def _left(self, deadline: float) -> float:
        """What is left of a call's deadline for its next Mooncake batch (at least 1 ms)."""
        return max(0.001, deadline - time.monotonic())

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _deadline(self, timeout: float | None) -> float:
        if self._closed:
            raise ClosedError(MCS_E_CLOSED, "the staging area is closed")
        return time.monotonic() + (self.timeout if timeout is None else max(0.0, timeout))

    # ----------------------------------------------------------------- put

    def put(
        self,
        keys: Sequence[Any],
        values: Sequence[Any],
        *,
        upsert: bool = False,
        skip_existing: bool = False,
        replicate_config: Any = None,
        timeout: float | None = None,
        first_writer_check: bool = True,
    ) -> list[int]:
        """Store bytes-like ``values`` under ``keys`` through the staging area.

        Per-key status as :meth:`Client.put_from` returns it (0 stored, ``EXISTED`` with
        ``skip_existing``, negative codes).  ``upsert=True`` replaces existing values.  Values
        that do not fit the free space together go in several rounds, in key order; a value
        larger than a slot (:attr:`max_value_bytes`) or an empty one is refused before anything
        is sent.  If a round raises, the rounds before it are stored.
        ``first_writer_check=False`` leaves the read-back of ``skip_existing`` to the
        caller (it must not run while this call holds slots: the read needs slots too).
        """
        if isinstance(keys, (str, bytes)):
            raise TypeError(f"keys must be a sequence of keys, not a single {type(keys).__name__}")
        keys = list(keys)
        views = [_byte_view(v, i) for i, v in enumerate(values)]
        if len(views) != len(keys):
            raise InvalidArgumentError(
                MCS_E_INVALID_ARG, f"{len(keys)} keys but {len(views)} values: they must pair up"
            )
        if not keys:
            raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
        sizes = [len(v) for v in views]
        for i, n in enumerate(sizes):
            if n == 0:
                raise InvalidArgumentError(
                    MCS_E_INVALID_ARG,
                    f"value #{i} (key {keys[i]!r}) is empty: Mooncake stores no empty values",
                )
        self._check_fits(sizes, keys, "value")
        options: dict[str, Any] = {}
        if upsert:
            options["upsert"] = True
        if skip_existing:
            options["skip_existing"] = True
            if not first_writer_check:
                options["first_writer_check"] = False
        if replicate_config is not None:
            options["replicate_config"] = replicate_config
        deadline = self._deadline(timeout)
        out: list[int] = []
        i = 0
        while i < len(keys):
            slots = self._take(sizes[i:], deadline)
            try:
                bufs = []
                for (offset, _), view in zip(slots, views[i : i + len(slots)]):
                    buf = self.region[offset : offset + len(view)]
                    buf[:] = view
                    bufs.append(buf)
                part = keys[i : i + len(slots)]
                try:
                    out.extend(
                        self.client.put_from(part, bufs, timeout=self._left(deadline), **options)
                    )
                except MooncakeTimeoutError as exc:
                    self._hold(exc, slots)  # Mooncake may still read them
                    raise
            finally:
                self._give(slots)
            i += len(slots)
        return out

    # ----------------------------------------------------------------- get

    def _sizes(self, keys: list[Any], deadline: float) -> list[int | None]:
        batch_size = getattr(self.client, "batch_size", None)
        if batch_size is not None:
            return list(batch_size(keys, timeout=self._left(deadline)))
        return [self.client.size(k, timeout=self._left(deadline)) for k in keys]

    def get(self, keys: Sequence[Any], *, timeout: float | None = None) -> list[bytes | None]:
        """Values of ``keys`` (None for a missing key), read through the staging area.

        Keys are sized first, then read in rounds that fit the free space, in key order.  A
        stored value larger than a slot is refused (before any read) with an error naming it;
        a key replaced by a larger value between sizing and reading is sized and read again.
        """
        if isinstance(keys, (str, bytes)):
            raise TypeError(f"keys must be a sequence of keys, not a single {type(keys).__name__}")
        keys = list(keys)
        if not keys:
            raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
        deadline = self._deadline(timeout)
        out: list[bytes | None] = [None] * len(keys)
        todo = list(range(len(keys)))
        sizes = self._sizes(keys, deadline)
        for _attempt in range(_GET_ATTEMPTS):
            present = [i for i in todo if sizes[i] is not None]
            self._check_fits(
                [sizes[i] or 0 for i in present], [keys[i] for i in present], "stored value"
            )
            grown = self._read(keys, present, sizes, out, deadline)
            if not grown:
                return out
            todo = grown
            for i, n in zip(grown, self._sizes([keys[i] for i in grown], deadline)):
                sizes[i] = n
        raise error_for(
            INVALID_PARAMS,
            f"key {keys[todo[0]]!r} kept growing while being read ({_GET_ATTEMPTS} attempts): "
            f"{status_text(INVALID_PARAMS)}",
        )

    def _read(
        self,
        keys: list[Any],
        idx: list[int],
        sizes: list[int | None],
        out: list[bytes | None],
        deadline: float,
    ) -> list[int]:
        """Read keys ``idx`` into ``out``; the indices whose value outgrew its slot."""
        grown: list[int] = []
        j = 0
        while j < len(idx):
            want = [max(1, sizes[i] or 0) for i in idx[j:]]
            slots = self._take(want, deadline)
            part = idx[j : j + len(slots)]
            try:
                bufs = [
                    self.region[offset : offset + n]
                    for (offset, _), n in zip(slots, want[: len(slots)])
                ]
                try:
                    got = self.client.get_into(
                        [keys[i] for i in part], bufs, timeout=self._left(deadline)
                    )
                except MooncakeTimeoutError as exc:
                    self._hold(exc, slots)  # Mooncake may still write them
                    raise
                for i, buf, r in zip(part, bufs, got):
                    if r >= 0:
                        out[i] = bytes(buf[:r])
                    elif r == INVALID_PARAMS:
                        grown.append(i)  # replaced by a larger value meanwhile
                    elif r == OBJECT_NOT_FOUND:
                        out[i] = None
                    else:
                        raise error_for(r, f"key {keys[i]!r}: {status_text(r)}", got)
            finally:
                self._give(slots)
            j += len(slots)
        return grown

    def __repr__(self) -> str:
        return (
            f"<mooncake_cffi.Staging {self.capacity} bytes at offset {self.offset}, "
            f"largest value {self.max_value_bytes}, {self.in_use} in use>"
        )
