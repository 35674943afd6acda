"""asyncio front end: :class:`AsyncClient` awaits the shim's completion eventfd.

No polling thread and no thread per request: batches are submitted to the lanes from the
event loop (``client.batches``), and ``loop.add_reader`` on the client's eventfd drains
finished batches and resolves their futures.  Every operation is a plan of
:mod:`_core.plans` (the same plans, retries and first-writer check the blocking client runs),
driven here by awaiting one completion per step.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._capi.marshal import sent_bytes
from ._core.batches import Completion, submit_flags
from ._core.plans import (
    Deadline,
    Plan,
    Sleep,
    Step,
    batch_get_plan,
    call_limit,
    lookup_prefix_plan,
    raise_key_errors,
    retry_plan,
    segment_note,
    store_plan,
)
from ._core.types import DEFAULT, Key, Timeout
from .client import EXISTED, Client
from .config import StoreConfig
from .errors import ClosedError, MooncakeError, MooncakeTimeoutError, QueueFullError, error_for
from .outcome import PendingWrite
from .status import (
    FLAG_FORCE,
    FLAG_LAND,
    FLAG_SKIP_EXISTING,
    MCS_E_CLOSED,
    MCS_E_TIMEOUT,
    OBJECT_NOT_FOUND,
    OP_CODES,
    OP_EXISTS,
    OP_GET,
    OP_GET_BUFFER,
    OP_PUT,
    OP_REMOVE,
    OP_SIZE,
    OP_UPSERT,
    OPS,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._core.types import Buffer, ClientOptions
    from .replica import ReplicateConfig

__all__ = ["AsyncClient", "EXISTED"]


class AsyncClient:
    """Awaitable operations over a :class:`Client`, with the same names and answers.

    ``AsyncClient(config, **options)`` creates its own client (``options`` are
    :class:`Client`'s; ``queue_timeout`` defaults to 0 here: a full lane makes a coroutine
    wait for a completion instead of blocking the loop); ``AsyncClient(client)`` wraps an
    existing one (and does not close it).  Use it from one event loop; ``async with`` or
    ``await aclose()``.

    Every operation takes ``timeout=`` (seconds; default the client's ``op_timeout``) and
    raises :class:`MooncakeTimeoutError` when it passes; failures that may succeed when tried
    again are retried per the client's ``retry`` policy.  A timed-out or cancelled call stops
    waiting, but a batch already handed to Mooncake cannot be recalled: Mooncake may still
    read (put) or write (get_into) the caller's buffers until it finishes -- wait for
    :meth:`quiesce` before reusing them.  With an L1 region registered, the bytes calls run
    the client's blocking calls in the loop's executor (they copy through the L1 staging
    area); those do not wait for room in a full lane (``QueueFullError`` at once with the
    default ``queue_timeout`` of 0): pass ``queue_timeout=`` seconds for them to wait.
    """

    def __init__(
        self,
        config: Client | StoreConfig | Mapping[str, Any] | str,
        **options: Unpack[ClientOptions],
    ) -> None:
        if isinstance(config, Client):
            if options:
                raise TypeError("keyword arguments apply only when AsyncClient creates the client")
            self.client = config
            self._owns = False
        else:
            options.setdefault("queue_timeout", 0)
            self.client = Client(config, **options)
            self._owns = True
        self._futures: dict[int, asyncio.Future[Completion]] = {}
        self._closing = False  # aclose() runs: no new batch is submitted
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = self.client.fileno()
        self._progress: asyncio.Event | None = None
        self._prefix_all_hit = False
        self._note = segment_note(self.client.config)
        self._confirms = self.client.config.integrity == "crc32c"  # see Values.shim_confirms

    # ---------------------------------------------------------- machinery

    def _attach(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._progress = asyncio.Event()
            loop.add_reader(self._fd, self._on_readable)
        elif self._loop is not loop:
            raise RuntimeError("an AsyncClient is bound to the event loop that first used it")
        return loop

    def _on_readable(self) -> None:
        for comp in self.client.drain():
            fut = self._futures.pop(comp.id, None)
            if fut is not None and not fut.done():
                fut.set_result(comp)
        if self._progress is not None:
            self._progress.set()

    async def _wait_progress(self) -> None:
        assert self._progress is not None
        self._progress.clear()
        await self._progress.wait()

    async def _run(self, step: Step, limit: float | None, writable: bool = False) -> Completion:
        """Submit one step's batch and await its completion, within ``limit`` seconds."""
        loop = self._attach()
        while True:
            if self._closing:
                raise ClosedError(MCS_E_CLOSED, "the AsyncClient is closing (aclose())")
            try:
                batch_id = self.client.batches.submit_step(step, writable=writable)
                break
            except QueueFullError:
                if not self._futures:  # nothing of ours can free the lane
                    raise
                await self._wait_progress()  # some batch finishes, rather than blocking
        fut: asyncio.Future[Completion] = loop.create_future()
        self._futures[batch_id] = fut
        if limit is None:
            return await fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit)
        except asyncio.TimeoutError:
            # what of it is still queued is not sent: the lane does not go on to run work
            # nobody waits for
            withdrawn = self.client.batches.withdraw(batch_id)
            gone = f"{withdrawn} of its keys withdrawn unsent, " if withdrawn else ""
            buffers = (
                "its buffers are not written again"
                if step.flags & FLAG_LAND
                else "its buffers stay in use until it completes"
            )
            raise MooncakeTimeoutError(
                MCS_E_TIMEOUT,
                f"{OPS[step.op]} of {len(step.keys)} key(s) did not finish within {limit} s "
                f"(batch {batch_id}: {gone}what runs goes on; {buffers})",
                None,
                batch_id,
                self._pending_write(step, batch_id, fut),
            ) from None

    def _pending_write(
        self, step: Step, batch_id: int, fut: asyncio.Future[Completion]
    ) -> PendingWrite | None:
        """The handle on a timed-out write's outcome, completed with its batch's completion
        (None for other ops)."""
        if step.op not in (OP_PUT, OP_UPSERT):
            return None
        native = self.client.parts.native
        packed = native.pending[batch_id][0] if batch_id in native.pending else None
        write = PendingWrite(
            OPS[step.op],
            step.keys,
            batch_id,
            lambda i: None if packed is None else sent_bytes(packed, i),
            self.client.parts.calls.read_back,
            None,
        )

        def ended(f: asyncio.Future[Completion]) -> None:
            if f.cancelled():
                write.complete(None, MCS_E_TIMEOUT)
                return
            comp = f.result()
            write.complete(comp.results, 0 if comp.ran else comp.status)

        fut.add_done_callback(ended)
        native.writes.add(write)
        return write

    async def _drive(
        self, plan: Plan, timeout: Timeout, retrying: bool = True, call: Deadline | None = None
    ) -> Any:
        """A plan's steps, one completion each, all within the call's deadline (``call``,
        when the plan is part of another's: a retry); each step retried per the client's
        policy (unless ``retrying`` is False)."""
        if call is None:
            call = Deadline(call_limit(timeout, self.client.op_timeout))
        deadline = call
        policy = self.client.retry if retrying else None
        try:
            request = next(plan)
            while True:
                if isinstance(request, Sleep):
                    left = deadline.left()
                    await asyncio.sleep(
                        request.seconds if left is None else min(request.seconds, left)
                    )
                    request = plan.send(None)
                    continue
                try:
                    comp = await self._run(request, deadline.left())
                    if not comp.ran:
                        raise error_for(comp.status, comp.message)
                except MooncakeError as exc:
                    request = plan.throw(exc)
                    continue
                answer: Any = comp.values if request.op == OP_GET_BUFFER else comp.results
                if policy is not None and request.op != OP_GET_BUFFER and min(answer) < 0:
                    again = retry_plan(policy, request, answer, deadline.end)
                    answer = await self._drive(again, deadline.left(), False, deadline)
                request = plan.send(answer)
        except StopIteration as done:
            return done.value
        except MooncakeTimeoutError as exc:
            raise deadline.noted(exc) from None

    async def _one(self, step: Step, timeout: Timeout) -> list[int]:
        """One step as a plan of one (so it is retried like any other)."""

        def plan() -> Plan:
            return (yield step)

        results: list[int] = await self._drive(plan(), timeout)
        return results

    async def _blocking(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The client's blocking ``name`` in the loop's executor (the L1 staging path)."""
        if self._closing:
            raise ClosedError(MCS_E_CLOSED, "the AsyncClient is closing (aclose())")
        call = functools.partial(getattr(self.client, name), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    def _staged(self) -> bool:
        return self.client.l1_registered

    async def submit(
        self,
        op: str,
        keys: Sequence[Key],
        buffers: Sequence[Buffer] | None = None,
        *,
        sizes: Sequence[int] | None = None,
        force: bool = False,
        skip_existing: bool = False,
        land: bool = False,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> Completion:
        """Submit a batch (as :meth:`Client.submit`) and await its :class:`Completion`.
        With ``land=True`` (get) a batch that times out never writes ``buffers`` after
        the :class:`~mooncake_cffi.MooncakeTimeoutError`: they are yours again at once."""
        if op not in OP_CODES:
            raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        code = OP_CODES[op]
        flags = submit_flags(force=force, skip_existing=skip_existing, land=land)
        bufs = None if buffers is None else list(buffers)
        step = Step(code, list(keys), bufs, flags, replicate_config, _list(sizes))
        return await self._run(step, call_limit(timeout, self.client.op_timeout), code == OP_GET)

    async def quiesce(self) -> None:
        """Wait until no batch of this client is in flight (buffers free to reuse)."""
        self._attach()
        while self.client.in_flight:
            await self._wait_progress()

    # ---------------------------------------------------------------- reads

    async def get(self, key: Key, *, timeout: Timeout = DEFAULT) -> bytes | None:
        """The value of ``key``, or None if it does not exist (one round trip usually)."""
        return (await self.batch_get([key], timeout=timeout))[0]

    async def batch_get(
        self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT
    ) -> list[bytes | None]:
        """Values of the keys (None where missing), as :meth:`Client.batch_get`."""
        if self._staged():
            return await self._blocking("batch_get", keys, timeout=timeout)  # type: ignore[no-any-return]
        values: list[bytes | None] = await self._drive(batch_get_plan(list(keys)), timeout)
        return values

    async def get_into(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Buffer],
        sizes: Sequence[int] | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Read into writable buffers; per key bytes read or a negative code."""
        step = Step(OP_GET, list(keys), list(buffers), 0, None, _list(sizes))
        comp = await self._run(step, call_limit(timeout, self.client.op_timeout), writable=True)
        if not comp.ran:
            raise error_for(comp.status, comp.message)
        return comp.results

    async def exists(self, key: Key, *, timeout: Timeout = DEFAULT) -> bool:
        """True if ``key`` exists."""
        return (await self.batch_exists([key], timeout=timeout))[0]

    async def batch_exists(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[bool]:
        """Whether each key exists."""
        key_list = list(keys)
        results = await self._one(Step(OP_EXISTS, key_list), timeout)
        raise_key_errors(key_list, results)
        return [r == 1 for r in results]

    async def size(self, key: Key, *, timeout: Timeout = DEFAULT) -> int | None:
        """Size in bytes of the value of ``key``, or None if it does not exist."""
        return (await self.batch_size([key], timeout=timeout))[0]

    async def batch_size(
        self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT
    ) -> list[int | None]:
        """Size in bytes of each key's value (None for a missing key)."""
        key_list = list(keys)
        results = await self._one(Step(OP_SIZE, key_list), timeout)
        raise_key_errors(key_list, results, (OBJECT_NOT_FOUND,))
        return [None if r == OBJECT_NOT_FOUND else r for r in results]

    async def lookup_prefix(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> int:
        """How many leading ``keys`` are stored, as :meth:`Client.lookup_prefix`."""
        plan = lookup_prefix_plan(list(keys), self._prefix_all_hit)
        count, self._prefix_all_hit = await self._drive(plan, timeout)
        return int(count)

    # --------------------------------------------------------------- writes

    async def _store(
        self,
        op: int,
        keys: Sequence[Key],
        values: Sequence[Any],
        flags: int,
        replicate_config: Any,
        timeout: Timeout,
    ) -> list[int]:
        key_list, value_list = list(keys), list(values)
        if self._staged():
            name = "batch_upsert" if op == OP_UPSERT else "batch_put"
            kwargs: dict[str, Any] = {"replicate_config": replicate_config, "timeout": timeout}
            if flags & FLAG_SKIP_EXISTING:
                kwargs["skip_existing"] = True
            return await self._blocking(name, key_list, value_list, **kwargs)  # type: ignore[no-any-return]
        deadline = Deadline(call_limit(timeout, self.client.op_timeout))
        step = Step(op, key_list, value_list, flags, replicate_config)
        plan = store_plan(step, value_list, self.client.retry, deadline.end, self._confirms)
        results: list[int] = await self._drive(plan, deadline.left(), retrying=False)
        return results

    def _raise(
        self, keys: list[Any], values: list[Any], results: list[int], upsert: bool = False
    ) -> None:
        sizes = [memoryview(v).nbytes for v in values]
        raise_key_errors(keys, results, (), sizes, self._note, upsert=upsert)

    async def put(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Store ``value`` (first writer wins, as :meth:`Client.put`)."""
        results = await self._store(OP_PUT, [key], [value], 0, replicate_config, timeout)
        self._raise([key], [value], results)

    async def put_if_absent(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> bool:
        """Store ``value`` unless ``key`` exists; True if written, False if it existed
        (of writers racing on one key exactly one is told True, as :meth:`Client.put_if_absent`)."""
        skip = FLAG_SKIP_EXISTING
        results = await self._store(OP_PUT, [key], [value], skip, replicate_config, timeout)
        self._raise([key], [value], results)
        return results[0] == 0

    async def upsert(
        self,
        key: Key,
        value: Buffer,
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Store ``value``, replacing any existing one."""
        results = await self._store(OP_UPSERT, [key], [value], 0, replicate_config, timeout)
        self._raise([key], [value], results, upsert=True)

    async def batch_put(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        skip_existing: bool = False,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Per-key status: 0 stored, :data:`EXISTED` with ``skip_existing``, <0 error."""
        flags = FLAG_SKIP_EXISTING if skip_existing else 0
        return await self._store(OP_PUT, keys, values, flags, replicate_config, timeout)

    async def batch_upsert(
        self,
        keys: Sequence[Key],
        values: Sequence[Buffer],
        *,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Like :meth:`batch_put` but replaces existing values; per-key status."""
        return await self._store(OP_UPSERT, keys, values, 0, replicate_config, timeout)

    async def put_from(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Buffer],
        *,
        upsert: bool = False,
        replicate_config: ReplicateConfig | None = None,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """Store from buffers without copying; per-key status."""
        op = OP_UPSERT if upsert else OP_PUT
        deadline = Deadline(call_limit(timeout, self.client.op_timeout))
        step = Step(op, list(keys), list(buffers), 0, replicate_config)
        plan = store_plan(step, step.bufs or [], self.client.retry, deadline.end, self._confirms)
        results: list[int] = await self._drive(plan, deadline.left(), retrying=False)
        return results

    async def remove(self, key: Key, force: bool = False, *, timeout: Timeout = DEFAULT) -> bool:
        """True if removed, False if absent; raises HasLeaseError under a read lease."""
        res = await self.batch_remove([key], force=force, timeout=timeout)
        if res[0] == OBJECT_NOT_FOUND:
            return False
        raise_key_errors([key], res)
        return True

    async def batch_remove(
        self, keys: Sequence[Key], force: bool = False, *, timeout: Timeout = DEFAULT
    ) -> list[int]:
        """Per-key status: 0 removed, -704 absent, -706 leased, ..."""
        return await self._one(
            Step(OP_REMOVE, list(keys), None, FLAG_FORCE if force else 0), timeout
        )

    # ------------------------------------------------------------ counters

    def stats(self) -> dict[str, dict[str, Any]]:
        """The client's per-lane counters (:meth:`Client.stats`; reading them never blocks)."""
        return self.client.stats()

    def op_stats(self) -> dict[str, dict[str, Any]]:
        """The client's per-operation counters (:meth:`Client.op_stats`)."""
        return self.client.op_stats()

    # ----------------------------------------------------------- lifecycle

    async def aclose(self) -> None:
        """Let the batches in flight finish (their callers get their answers: what was
        stored is reported stored), stop watching the eventfd, and close the client if this
        object created it.  From its start, calls of this object that would submit a new
        batch raise :class:`ClosedError` (tasks still calling cannot keep it waiting); once
        it returns, one that did not create its client may be used again."""
        self._closing = True
        try:
            if self._loop is not None:
                while self._futures and self._loop is asyncio.get_running_loop():
                    await asyncio.wait(list(self._futures.values()))
                self._loop.remove_reader(self._fd)
                self._loop = None
            if self._owns:
                # close() joins worker threads: keep the loop responsive meanwhile.
                await asyncio.get_running_loop().run_in_executor(None, self.client.close)
        finally:
            self._closing = self._owns

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _list(sizes: Sequence[int] | None) -> list[int] | None:
    return None if sizes is None else list(sizes)
