"""asyncio front end: :class:`AsyncClient` awaits the shim's completion eventfd.

No polling thread and no thread per request: batches are submitted to the
lanes from the event loop, and ``loop.add_reader`` on the client's eventfd
drains finished batches and resolves their futures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from .client import _OP_NAMES, EXISTED, Client, Completion, _batch_get_plan
from .config import StoreConfig
from .errors import INVALID_PARAMS, OBJECT_NOT_FOUND, QueueFullError, error_for

__all__ = ["AsyncClient"]


class AsyncClient:
    """Awaitable operations over a :class:`Client`.

    ``AsyncClient(config, **client_kwargs)`` creates its own client (with
    ``queue_timeout=0``: a full lane makes a coroutine wait for a completion
    instead of blocking the loop); ``AsyncClient(client)`` wraps an existing
    one.  Use it from one event loop; ``async with`` or ``await aclose()``.
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

    async def submit(
        self, op: str, keys: Sequence[Any], buffers: Any = None, **kw: Any
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
        return await fut

    # ---------------------------------------------------------- operations

    async def exists(self, key: str | bytes) -> bool:
        """True if ``key`` exists."""
        return (await self.batch_exists([key]))[0]

    async def batch_exists(self, keys: Sequence[str | bytes]) -> list[bool]:
        """Whether each key exists."""
        comp = await self.submit("exists", keys)
        self.client._raise_key_errors(keys, comp.results, ())
        return [r == 1 for r in comp.results]

    async def get(self, key: str | bytes, size_hint: int = 16384) -> bytes | None:
        """The value of ``key``, or None if it does not exist.

        A value of at most ``size_hint`` bytes is read in one round trip; a larger
        one is sized first, then read.
        """
        if size_hint > 0:
            buf = bytearray(size_hint)
            r = (await self.submit("get", [key], [buf])).results[0]
            if r >= 0:
                return bytes(memoryview(buf)[:r])
            if r == OBJECT_NOT_FOUND:
                return None
            if r != INVALID_PARAMS:
                raise error_for(r, f"key {key!r}")
        return (await self.batch_get([key]))[0]

    async def batch_get(self, keys: Sequence[str | bytes]) -> list[bytes | None]:
        """Values of the keys (None where missing)."""
        plan = _batch_get_plan(list(keys), self.client._raise_key_errors)
        op, ks, bufs = next(plan)
        while True:
            results = (await self.submit(_OP_NAMES[op], ks, bufs)).results
            try:
                op, ks, bufs = plan.send(results)
            except StopIteration as done:
                return done.value

    async def get_into(
        self,
        keys: Sequence[str | bytes],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
    ) -> list[int]:
        """Read into writable buffers; per key bytes read or a negative code."""
        return (await self.submit("get", keys, buffers, sizes=sizes)).results

    async def put(self, key: str | bytes, value: Any) -> None:
        """Store ``value`` (first writer wins, as :meth:`Client.put`)."""
        res = await self.batch_put([key], [value])
        self.client._raise_key_errors([key], res, (), [self.client._nbytes(value)])

    async def upsert(self, key: str | bytes, value: Any) -> None:
        """Store ``value``, replacing any existing one."""
        comp = await self.submit("upsert", [key], [value])
        self.client._raise_key_errors([key], comp.results, (), [self.client._nbytes(value)])

    async def batch_put(
        self, keys: Sequence[str | bytes], values: Sequence[Any], *, skip_existing: bool = False
    ) -> list[int]:
        """Per-key status: 0 stored, :data:`EXISTED` with ``skip_existing``, <0 error."""
        comp = await self.submit("put", keys, values, skip_existing=skip_existing)
        return comp.results

    async def put_from(self, keys: Sequence[str | bytes], buffers: Sequence[Any]) -> list[int]:
        """Store from buffers without copying; per-key status."""
        return (await self.submit("put", keys, buffers)).results

    async def remove(self, key: str | bytes, force: bool = False) -> bool:
        """True if removed, False if absent; raises HasLeaseError under a read lease."""
        res = await self.batch_remove([key], force=force)
        if res[0] == OBJECT_NOT_FOUND:
            return False
        self.client._raise_key_errors([key], res, ())
        return True

    async def batch_remove(self, keys: Sequence[str | bytes], force: bool = False) -> list[int]:
        """Per-key status: 0 removed, -704 absent, -706 leased, ..."""
        return (await self.submit("remove", keys, force=force)).results

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


__all__ += ["EXISTED"]
