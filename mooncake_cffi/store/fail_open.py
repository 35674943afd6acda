"""The drop-in's default under a stack: a store that stops answering costs a request seconds at
most, once, and never Mooncake's 30 s per call.

A cache tier must never make an engine slower than recomputing. Stacks (vLLM, SGLang,
LMCache) call the drop-in with no deadline of their own, and Mooncake's own waits on a
frozen master or storage node are 30 s per call. So, unless the setup says
``"fail_open": false``:

- every data, lookup and remove call has a deadline of :data:`DEADLINE` seconds (not
  ``get_into_ranges``, the session calls, nor buffer registration, which run as Mooncake's
  do) unless the setup gives an
  ``op_timeout``, and a data call :data:`PER_MIB` seconds more per MiB it moves (a
  transfer of 96 MiB, a 2,048-token prompt's KV on a small model, gets 8 s: a loaded
  machine's slow transfer is not a store that stopped answering): data calls (reads,
  writes) wait for it on a lane, the calls on keys
  alone (exists, size, remove) run on the calling thread as without a deadline, bounded by
  Mooncake's master RPC wait, shortened to the same (``MC_RPC_TIMEOUT_MS``). A transfer
  that outlives its deadline goes on in the shim, which keeps its memory until Mooncake is
  done with it: Mooncake's own transfer waits are left as they are, since a write that
  Mooncake gives up early can land in another key's memory (:doc:`failures`). Over tcp a
  load into the caller's memory reads into the shim's memory first and is copied over only
  while its call still waits (``MCS_FLAG_LAND``): one that outlives its deadline never
  writes the memory a stack reuses once the call has failed;
- a breaker (:mod:`mooncake_cffi._core.breaker`) watches every call: one that fails
  after more than :data:`TRIP_AFTER` seconds (a store that is frozen, partitioned or
  dead, not a missing key), or that finds the master gone (RPC_FAIL, RPC_TIMEOUT), opens
  it. While it is open every data call answers at once with the code of the failure that
  opened it (RPC_FAIL, -900, for a master that is gone; ``b""`` and None for values), so
  the stack recomputes;
- an existence answer of 1 is checked against the storage nodes holding the key
  (:mod:`.live_hits`): a node that does not answer has its keys answered 0 and opens the
  breaker, so a stack is not promised blocks whose load would fail;
- a thread of the breaker asks the master every :data:`PROBE_EVERY` seconds (an existence
  check of one key, on its own) and closes the breaker as soon as an answer comes back
  within :data:`TRIP_AFTER`: reuse resumes by itself, with no restart of the stack.

A request therefore waits at most about :data:`DEADLINE` seconds more than its cold
time when the store goes away (the call that finds out), and nothing more while it stays
away. :class:`FailOpen` is the drop-in's calls (:class:`~.calls.StoreCalls`) with the
breaker in front.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .._capi.binding import ffi
from .._core.breaker import DEADLINE, DOWN, PROBE_EVERY, PROBE_KEY, TRIP_AFTER, Breaker, failed
from ..status import OBJECT_NOT_FOUND, OP_EXISTS, OP_GET, TRANSFER_FAIL
from .live_hits import LiveHits
from .repair import one_refused

_NULL = ffi.NULL
_monotonic = time.monotonic

__all__ = ["DEADLINE", "PER_MIB", "PROBE_EVERY", "TRIP_AFTER", "FailOpen"]

#: Seconds a data call's default deadline grows by per MiB it moves (1 s per 16 MiB: a
#: floor of 16 MiB/s, under which a transfer counts as a store not answering).
PER_MIB = 1 / 16


def _read_probe(calls: Any, key: Any) -> Callable[[], int]:
    """A probe that reads ``key`` again: it answers once the value can be read, or the
    master says the key is gone (a node frozen past the masters' TTL loses its keys)."""

    def probe() -> int:
        if calls.get(key) != b"" or calls.one(OP_EXISTS, key) == 0:
            return 0
        return DOWN

    return probe


def _checked(
    breaker: Breaker, live: LiveHits, keys: list[Any], results: list[int], started: float
) -> list[int]:
    """A batch lookup's answer once it ran (at ``started``): a failure told to the
    breaker, or the hits confirmed while a storage node is not known up."""
    if results and min(results) < 0:
        breaker.observe(started, results)
        return results
    if not live.trusted():
        return live.confirm(keys, results)
    return results


def _checked_one(breaker: Breaker, live: LiveHits, key: Any, result: int, started: float) -> int:
    """``is_exist``'s answer once it ran, as :func:`_checked`'s for one key."""
    if result < 0 and result != OBJECT_NOT_FOUND:
        breaker.observe(started, result)
    elif result == 1 and not live.trusted():
        return live.confirm_one(key)
    return result


def _lookup_one(calls: Any, breaker: Breaker, live: LiveHits, key: Any) -> int:
    """``is_exist`` behind the breaker, in Python."""
    if breaker.open:
        breaker.refused += 1
        return breaker.code
    started = _monotonic()
    return _checked_one(breaker, live, key, calls.one(OP_EXISTS, key), started)


def _lookup(calls: Any, breaker: Breaker, live: LiveHits, keys: list[Any]) -> list[int]:
    """``batch_is_exist`` behind the breaker, in Python."""
    if breaker.open:
        breaker.refused += 1
        return [breaker.code] * len(keys)
    started = _monotonic()
    return _checked(breaker, live, keys, calls.keys(OP_EXISTS, keys), started)


def _lookup_rest(
    calls: Any,
    breaker: Breaker,
    live: LiveHits,
    keys: Any,
    raw: list[int] | tuple[int] | None,
    started: float,
) -> list[int]:
    """What the C lookup (:meth:`~.._capi.runner.Runner.lookups`) leaves of a
    ``batch_is_exist``: a lookup it did not run (``raw`` None), one the shim refused
    (``(status,)``), or the results to check."""
    if raw is None:
        return _lookup(calls, breaker, live, keys)
    results = raw if isinstance(raw, list) else calls.keys_refused(raw[0], OP_EXISTS, keys, 0)
    return _checked(breaker, live, keys, results, started)


def _lookup_one_rest(
    calls: Any,
    breaker: Breaker,
    live: LiveHits,
    key: Any,
    raw: int | tuple[int] | None,
    started: float,
) -> int:
    """As :func:`_lookup_rest`, of an ``is_exist``."""
    if raw is None:
        return _lookup_one(calls, breaker, live, key)
    result = one_refused(raw[0], OP_EXISTS, key.encode()) if isinstance(raw, tuple) else raw
    return _checked_one(breaker, live, key, result, started)


class FailOpen:
    """The drop-in's calls (``calls``, a :class:`~.calls.StoreCalls`) behind a
    :class:`Breaker`: each data call is answered at once while the breaker is open, and
    timed otherwise. Everything else (registration, closing) goes straight through."""

    def __init__(self, calls: Any) -> None:
        self.calls = calls
        self._one = calls.one
        self._keys = calls.keys
        breaker = self.breaker = Breaker(lambda: int(calls.one(OP_EXISTS, PROBE_KEY)))

        def node_silent(key: Any) -> None:
            # A storage node holding ``key`` did not answer a lookup's check in time: as a
            # read from it would have, this opens the breaker until the key reads again.
            # (No reference to self: a store dropped without close() must go at once.)
            breaker.trip(TRANSFER_FAIL, _read_probe(calls, key))

        live = self.live = LiveHits(calls, node_silent)
        # is_exist and batch_is_exist. While the breaker is closed and every node is
        # known up, one C function makes the whole lookup (one master round trip, as
        # Mooncake's class): right after the round trip, checking the breaker and the
        # nodes in Python cost 20-25 us of a 16-key lookup. It and the Python way hold
        # the calls, the breaker and the checks, never this object (no cycle: see
        # node_silent).
        fast = fast_one = None
        if not calls.keys_deadline:
            lookups = partial(calls.runner.lookups, breaker, live, live.health)
            fast = lookups(partial(_lookup_rest, calls, breaker, live))
            fast_one = lookups(partial(_lookup_one_rest, calls, breaker, live), one=True)
        self.exists: Callable[[list[Any]], list[int]] = (
            fast if fast is not None else partial(_lookup, calls, breaker, live)
        )
        self.exists_one: Callable[[Any], int] = (
            fast_one if fast_one is not None else partial(_lookup_one, calls, breaker, live)
        )
        self.staged = calls.staged
        self.copies = calls.copies

    def __getattr__(self, name: str) -> Any:
        # Calls that move no data, or that the breaker does not guard: straight through.
        return getattr(self.calls, name)

    def close(self) -> None:
        self.live.close()
        self.breaker.stop()
        self.calls.close()

    def _read_probe(self, key: Any) -> Callable[[], int]:
        return _read_probe(self.calls, key)

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
        if op == OP_EXISTS:
            return self.exists_one(key)
        breaker = self.breaker
        if breaker.open:
            breaker.refused += 1
            return breaker.code
        started = _monotonic()
        result = self._one(op, key, flags, buf, size)
        if result < 0 and result != OBJECT_NOT_FOUND:
            breaker.observe(started, result, self._read_probe(key) if op == OP_GET else None)
        return result

    def get(self, key: Any) -> Any:
        breaker = self.breaker
        if breaker.open:
            breaker.refused += 1
            return b""
        started = _monotonic()
        value = self.calls.get(key)
        if not value:
            breaker.observe(started, value, self._read_probe(key))
        return value

    def get_into(self, key: Any, ptr: int, size: int) -> Any:
        return self._run(self.calls.get_into, DOWN, key, ptr, size)

    def put_from(self, op: int, key: Any, ptr: int, size: int, config: Any) -> Any:
        return self._run(self.calls.put_from, DOWN, op, key, ptr, size, config)

    def put(self, op: int, key: Any, value: Any, config: Any) -> Any:
        return self._run(self.calls.put, DOWN, op, key, value, config)

    def keys(self, op: int, keys: list[Any], flags: int = 0) -> Any:
        if op == OP_EXISTS:
            return self.exists(keys)
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
        down = [DOWN] * len(keys)
        return self._run(self.calls.addresses, down, op, keys, addrs, sizes, config)

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
