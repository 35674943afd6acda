"""asyncio front end: :class:`AsyncClient` awaits the shim's completion eventfd.

No polling thread and no thread per request: batches are submitted to the lanes from the
event loop (``Client.submit``), and ``loop.add_reader`` on the client's eventfd drains
finished batches (``Client.drain``) and resolves their futures.  Multi-step operations
follow the same plans as the blocking client (:mod:`._plans`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ._marshal import nbytes
from ._plans import Deadline, batch_get_plan, raise_key_errors, segment_note
from .client import EXISTED, OPS, Client, Completion
from .config import StoreConfig
from .errors import MooncakeTimeoutError, QueueFullError, error_for
from .status import MCS_E_TIMEOUT, OBJECT_NOT_FOUND

__all__ = ["AsyncClient", "EXISTED"]

_DEFAULT = object()


class AsyncClient:
    """Awaitable operations over a :class:`Client`.

    ``AsyncClient(config, **client_kwargs)`` creates its own client (with
    ``queue_timeout=0``: a full lane makes a coroutine wait for a completion
    instead of blocking the loop); ``AsyncClient(client)`` wraps an existing
    one.  Use it from one event loop; ``async with`` or ``await aclose()``.

    Every operation takes ``timeout=`` (seconds; default the client's
    ``op_timeout``) and raises :class:`MooncakeTimeoutError` when it passes.  A
    timed-out or cancelled call stops waiting, but a batch already handed to
    Mooncake cannot be recalled: the client keeps its buffers alive until it
    finishes, and Mooncake may still read (put) or write (get_into) the caller's
    buffers until then -- wait for :attr:`Client.in_flight` to drop (or
    :meth:`quiesce`) before reusing them.
    """

    def __init__(self, config: Client | StoreConfig | Mapping[str, Any] | str, **kwargs: Any):
        if isinstance(config, Client):
            if kwargs:
                raise TypeError("keyword arguments apply only when AsyncClient creates the client")
            self.client = config
            self._owns = False
        else:
            kwargs.setdefault("queue_timeout", 0)
            self.client = Client(config, **kwargs)
            self._owns = True
        self._futures: dict[int, asyncio.Future[Completion]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = self.client.fileno()
        self._progress: asyncio.Event | None = None

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

    def _timeout(self, timeout: Any) -> float | None:
        return self.client.op_timeout if timeout is _DEFAULT else timeout

    async def submit(
        self, op: str, keys: Sequence[Any], buffers: Any = None, *, timeout: Any = _DEFAULT, **kw
    ) -> Completion:
        """Submit a batch (see :meth:`Client.submit`) and await its completion."""
        loop = self._attach()
        while True:
            try:
                batch_id = self.client.submit(op, keys, buffers, **kw)
                break
            except QueueFullError:
                # Wait for some batch to finish rather than blocking the loop.
                assert self._progress is not None
                self._progress.clear()
                if not self._futures:
                    raise
                await self._progress.wait()
        fut: asyncio.Future[Completion] = loop.create_future()
        self._futures[batch_id] = fut
        limit = self._timeout(timeout)
        if limit is None:
            return await fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit)
        except asyncio.TimeoutError:
            raise MooncakeTimeoutError(
                MCS_E_TIMEOUT,
                f"{op} of {len(keys)} key(s) did not finish within {limit} s (batch {batch_id} "
                "goes on; its buffers stay in use until it completes)",
            ) from None

    async def quiesce(self) -> None:
        """Wait until no batch of this client is in flight (buffers free to reuse)."""
        self._attach()
        while self.client.in_flight:
            assert self._progress is not None
            self._progress.clear()
            if not self.client.in_flight:
                break
            await self._progress.wait()

    async def _drive(self, plan: Any, timeout: Any) -> Any:
        """A plan's steps, all of them within the call's deadline."""
        deadline = Deadline(self._timeout(timeout))
        op, keys, bufs = next(plan)
        while True:
            comp = await self.submit(OPS[op], keys, bufs, timeout=deadline.left())
            if not comp.ran:
                raise error_for(comp.status, comp.message)
            answer = comp.values if comp.op == "get_buffer" else comp.results
            try:
                op, keys, bufs = plan.send(answer)
            except StopIteration as done:
                return done.value

    def _key_errors(self, keys: Sequence[Any], results: Sequence[int], allow=(), sizes=None):
        raise_key_errors(keys, results, allow, sizes, segment_note(self.client.config))

    # ---------------------------------------------------------- operations

    async def exists(self, key: str | bytes, *, timeout: Any = _DEFAULT) -> bool:
        """True if ``key`` exists."""
        return (await self.batch_exists([key], timeout=timeout))[0]

    async def batch_exists(
        self, keys: Sequence[str | bytes], *, timeout: Any = _DEFAULT
    ) -> list[bool]:
        """Whether each key exists."""
        comp = await self.submit("exists", keys, timeout=timeout)
        self._key_errors(keys, comp.results)
        return list(map(bool, comp.results))  # 1 or 0 once errors are raised

    async def get(self, key: str | bytes, *, timeout: Any = _DEFAULT) -> bytes | None:
        """The value of ``key``, or None if it does not exist (one round trip usually)."""
        return (await self.batch_get([key], timeout=timeout))[0]

    async def batch_get(
        self, keys: Sequence[str | bytes], *, timeout: Any = _DEFAULT
    ) -> list[bytes | None]:
        """Values of the keys (None where missing), as :meth:`Client.batch_get`."""
        return await self._drive(batch_get_plan(list(keys)), timeout)

    async def get_into(
        self,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
        *,
        timeout: Any = _DEFAULT,
    ) -> list[int]:
        """Read into writable buffers; per key bytes read or a negative code."""
        return (await self.submit("get", keys, buffers, sizes=sizes, timeout=timeout)).results

    async def put(self, key: str | bytes, value: Any, *, timeout: Any = _DEFAULT) -> None:
        """Store ``value`` (first writer wins, as :meth:`Client.put`)."""
        res = await self.batch_put([key], [value], timeout=timeout)
        self._key_errors([key], res, (), [nbytes(value)])

    async def upsert(self, key: str | bytes, value: Any, *, timeout: Any = _DEFAULT) -> None:
        """Store ``value``, replacing any existing one."""
        comp = await self.submit("upsert", [key], [value], timeout=timeout)
        self._key_errors([key], comp.results, (), [nbytes(value)])

    async def batch_put(
        self,
        keys: Sequence[str | bytes],
        values: Sequence[Any],
        *,
        skip_existing: bool = False,
        timeout: Any = _DEFAULT,
    ) -> list[int]:
        """Per-key status: 0 stored, :data:`EXISTED` with ``skip_existing``, <0 error."""
        comp = await self.submit("put", keys, values, skip_existing=skip_existing, timeout=timeout)
        return comp.results

    async def put_from(
        self, keys: Sequence[str | bytes], buffers: Sequence[Any], *, timeout: Any = _DEFAULT
    ) -> list[int]:
        """Store from buffers without copying; per-key status."""
        return (await self.submit("put", keys, buffers, timeout=timeout)).results

    async def remove(
        self, key: str | bytes, force: bool = False, *, timeout: Any = _DEFAULT
    ) -> bool:
        """True if removed, False if absent; raises HasLeaseError under a read lease."""
        res = await self.batch_remove([key], force=force, timeout=timeout)
        if res[0] == OBJECT_NOT_FOUND:
            return False
        self._key_errors([key], res)
        return True

    async def batch_remove(
        self, keys: Sequence[str | bytes], force: bool = False, *, timeout: Any = _DEFAULT
    ) -> list[int]:
        """Per-key status: 0 removed, -704 absent, -706 leased, ..."""
        return (await self.submit("remove", keys, force=force, timeout=timeout)).results

    # ----------------------------------------------------------- lifecycle

    async def aclose(self) -> None:
        """Stop watching the eventfd and close the client (if this object created it)."""
        if self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._loop = None
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()
        self._futures.clear()
        if self._owns:
            # close() joins worker threads: keep the loop responsive meanwhile.
            await asyncio.get_running_loop().run_in_executor(None, self.client.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
