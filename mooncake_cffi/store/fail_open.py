"""The drop-in's default under a stack: a store that stops answering costs a request seconds at
most, once, and never Mooncake's 30 s per call.

A cache tier must never make an engine slower than recomputing. Stacks (vLLM, SGLang,
LMCache) call the drop-in with no deadline of their own, and Mooncake's own waits on a
frozen master or storage node are 30 s per call. So, unless the setup says
``"fail_open": false``:

- Mooncake's own waits are shortened to :data:`MOONCAKE_WAIT` seconds at the source
  (``MC_RPC_TIMEOUT_MS`` for a master RPC, ``MC_TCP_STATUS_TIMEOUT_SEC`` for a transfer
  waiting on a silent peer), unless the environment or an ``op_timeout`` sets them;
- a breaker (:mod:`mooncake_cffi._core.breaker`) watches every call: one that fails
  after more than :data:`TRIP_AFTER` seconds (a store that is frozen, partitioned or
  dead, not a missing key), or that finds the master gone (RPC_FAIL, RPC_TIMEOUT), opens
  it. While it is open every data call answers at once with the code of the failure that
  opened it (RPC_FAIL, -900, for a master that is gone; ``b""`` and None for values), so
  the stack recomputes;
- a thread of the breaker asks the master every :data:`PROBE_EVERY` seconds (an existence
  check of one key, on its own) and closes the breaker as soon as an answer comes back
  within :data:`TRIP_AFTER`: reuse resumes by itself, with no restart of the stack.

A request therefore waits at most about :data:`MOONCAKE_WAIT` seconds more than its cold
time when the store goes away (the call that finds out), and nothing more while it stays
away. :class:`FailOpen` is the drop-in's calls (:class:`~.calls.StoreCalls`) with the
breaker in front.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._capi.binding import ffi
from .._core.breaker import DOWN, MOONCAKE_WAIT, PROBE_EVERY, PROBE_KEY, TRIP_AFTER, Breaker, failed
from ..status import OBJECT_NOT_FOUND, OP_EXISTS

_NULL = ffi.NULL
_monotonic = time.monotonic

__all__ = ["MOONCAKE_WAIT", "PROBE_EVERY", "TRIP_AFTER", "FailOpen"]


class FailOpen:
    """The drop-in's calls (``calls``, a :class:`~.calls.StoreCalls`) behind a
    :class:`Breaker`: each data call is answered at once while the breaker is open, and
    timed otherwise. Everything else (registration, closing) goes straight through."""

    def __init__(self, calls: Any) -> None:
        self.calls = calls
        self._one = calls.one
        self._keys = calls.keys
        self.breaker = Breaker(lambda: int(calls.one(OP_EXISTS, PROBE_KEY)))
        self.staged = calls.staged
        self.copies = calls.copies

    def __getattr__(self, name: str) -> Any:
        # Calls that move no data, or that the breaker does not guard: straight through.
        return getattr(self.calls, name)

    def close(self) -> None:
        self.breaker.stop()
        self.calls.close()

    def _run(self, call: Callable[..., Any], down: Any, *args: Any) -> Any:
        breaker = self.breaker
        if breaker.open:
            breaker.refused += 1
            if down == DOWN:
                return breaker.code
            if isinstance(down, list) and down and down[0] == DOWN:
                return [breaker.code] * len(down)
            return down
        started = time.monotonic()
        result = call(*args)
        if failed(result):
            breaker.observe(started, result)
        return result

    # One method per guarded call of StoreCalls, with its answer while the store is away.

    def one(self, op: int, key: Any, flags: int = 0, buf: Any = _NULL, size: int = 0) -> Any:
        # The drop-in's most frequent call: written out, with no frame in between.
        breaker = self.breaker
        if breaker.open:
            breaker.refused += 1
            return breaker.code
        started = _monotonic()
        result = self._one(op, key, flags, buf, size)
        if result < 0 and result != OBJECT_NOT_FOUND:
            breaker.observe(started, result)
        return result

    def get(self, key: Any) -> Any:
        return self._run(self.calls.get, b"", key)

    def get_into(self, key: Any, ptr: int, size: int) -> Any:
        return self._run(self.calls.get_into, DOWN, key, ptr, size)

    def put_from(self, op: int, key: Any, ptr: int, size: int, config: Any) -> Any:
        return self._run(self.calls.put_from, DOWN, op, key, ptr, size, config)

    def put(self, op: int, key: Any, value: Any, config: Any) -> Any:
        return self._run(self.calls.put, DOWN, op, key, value, config)

    def keys(self, op: int, keys: list[Any], flags: int = 0) -> Any:
        breaker = self.breaker
        if breaker.open:
            breaker.refused += 1
            return [breaker.code] * len(keys)
        started = _monotonic()
        results = self._keys(op, keys, flags)
        if results and min(results) < 0:
            breaker.observe(started, results)
        return results

    def addresses(self, op: int, keys: list[Any], addrs: Any, sizes: Any, config: Any) -> Any:
        return self._run(self.calls.addresses, [DOWN] * len(keys), op, keys, addrs, sizes, config)

    def address_parts(
        self, op: int, keys: list[Any], all_addrs: Any, all_sizes: Any, config: Any
    ) -> Any:
        return self._run(
            self.calls.address_parts, [DOWN] * len(keys), op, keys, all_addrs, all_sizes, config
        )

    def put_values(self, op: int, keys: list[Any], values: Any, config: Any) -> Any:
        return self._run(self.calls.put_values, DOWN, op, keys, values, config)

    def put_parts(self, op: int, key: Any, parts: Any, config: Any) -> Any:
        return self._run(self.calls.put_parts, DOWN, op, key, parts, config)

    def put_parts_many(self, op: int, keys: list[Any], parts: Any, config: Any) -> Any:
        return self._run(self.calls.put_parts_many, [DOWN] * len(keys), op, keys, parts, config)

    def get_values(self, keys: list[Any]) -> Any:
        return self._run(self.calls.get_values, [b""] * len(keys), keys)

    def get_handles(self, keys: list[Any]) -> Any:
        return self._run(self.calls.get_handles, [None] * len(keys), keys)
