"""The drop-in's default under a stack: a store that stops answering costs a request seconds at
most, once, and never Mooncake's 30 s per call.

A cache tier must never make an engine slower than recomputing. Stacks (vLLM, SGLang,
LMCache) call the drop-in with no deadline of their own, and Mooncake's own waits on a
frozen master or storage node are 30 s per call. So, unless the setup says
``"fail_open": false``:

- Mooncake's own waits are shortened to :data:`MOONCAKE_WAIT` seconds at the source
  (``MC_RPC_TIMEOUT_MS`` for a master RPC, ``MC_TCP_STATUS_TIMEOUT_SEC`` for a transfer
  waiting on a silent peer), unless the environment or an ``op_timeout`` sets them;
- a :class:`Breaker` watches every call: one that fails after more than :data:`TRIP_AFTER`
  seconds (a store that is frozen, partitioned or dead, not a missing key), or that finds
  the master gone (RPC_FAIL, RPC_TIMEOUT), opens it. While
  it is open every data call answers at once with the code of the failure that opened it
  (RPC_FAIL, -900, for a master that is gone; ``b""`` and None for values), so the stack
  recomputes;
- a thread of the breaker asks the master every :data:`PROBE_EVERY` seconds (an existence
  check of one key, on its own) and closes the breaker as soon as an answer comes back
  within :data:`TRIP_AFTER`: reuse resumes by itself, with no restart of the stack.

A request therefore waits at most about :data:`MOONCAKE_WAIT` seconds more than its cold
time when the store goes away (the call that finds out), and nothing more while it stays
away. :class:`FailOpen` is the drop-in's calls (:class:`~.calls.StoreCalls`) with the
breaker in front.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..status import OP_EXISTS

__all__ = ["MOONCAKE_WAIT", "PROBE_EVERY", "TRIP_AFTER", "Breaker", "FailOpen"]

#: Seconds Mooncake waits on a master RPC or a silent transfer peer, under this default.
MOONCAKE_WAIT = 2.0
#: A failed call slower than this (seconds) opens the breaker.
TRIP_AFTER = 1.0
#: Seconds between the breaker's probes of the master while it is open.
PROBE_EVERY = 1.0
#: RPC_FAIL: a master that is gone (the breaker's answer when no other code opened it).
DOWN = -900
#: The key the probe asks about (it need not exist: an answer is what counts).
PROBE_KEY = "__mooncake_cffi_fail_open_probe__"


#: Answers that say the master is gone whatever the call took: RPC_FAIL, RPC_TIMEOUT.
UNREACHABLE = frozenset({-900, -901})


def _unreachable(result: Any) -> bool:
    if isinstance(result, int):
        return result in UNREACHABLE
    return isinstance(result, list) and any(r in UNREACHABLE for r in result if type(r) is int)


def _code(result: Any) -> int:
    """The first negative code in a call's answer (RPC_FAIL when it has none)."""
    codes = result if isinstance(result, list) else [result]
    return next((r for r in codes if type(r) is int and r < 0), DOWN)


def _failed(result: Any) -> bool:
    """Whether a call's answer says it failed (a negative code, or no value read)."""
    if isinstance(result, int):
        return result < 0
    if isinstance(result, bytes):
        return not result
    if isinstance(result, list):
        return any(
            r is None or (isinstance(r, int) and r < 0) or (isinstance(r, bytes) and not r)
            for r in result
        )
    return result is None


class Breaker:
    """Open while the store does not answer in time; a probe thread closes it.

    ``probe`` is a call to the master that returns an int (negative: failed); it runs on
    the breaker's own thread only.
    """

    def __init__(self, probe: Callable[[], int]) -> None:
        self._probe = probe
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        #: True while calls are answered at once as failures.
        self.open = False
        #: The code calls answer while it is open: that of the failure that opened it.
        self.code = DOWN
        #: How many times it opened, and the calls it answered while open.
        self.trips = 0
        self.refused = 0

    def observe(self, started: float, result: Any) -> None:
        """After a failed call that started at ``started`` (monotonic) and answered
        ``result``: a slow failure, or a master that did not answer, opens the breaker."""
        if _unreachable(result) or time.monotonic() - started > TRIP_AFTER:
            self.trip(_code(result))

    def trip(self, code: int = DOWN) -> None:
        with self._lock:
            if self.open or self._stopped.is_set():
                return
            self.code = code
            self.open = True
            self.trips += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name="mooncake-fail-open", daemon=True
                )
                self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(PROBE_EVERY):
            started = time.monotonic()
            try:
                answer = self._probe()
            except Exception:
                answer = DOWN
            if answer >= 0 and time.monotonic() - started <= TRIP_AFTER:
                with self._lock:
                    self.open = False
                    self._thread = None
                return

    def stop(self) -> None:
        """No more probes (the store is closing); waits for a probe in progress."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def state(self) -> dict[str, Any]:
        return {"open": self.open, "code": self.code, "trips": self.trips, "refused": self.refused}


class FailOpen:
    """The drop-in's calls (``calls``, a :class:`~.calls.StoreCalls`) behind a
    :class:`Breaker`: each data call is answered at once while the breaker is open, and
    timed otherwise. Everything else (registration, closing) goes straight through."""

    def __init__(self, calls: Any) -> None:
        self.calls = calls
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
        if _failed(result):
            breaker.observe(started, result)
        return result

    # One method per guarded call of StoreCalls, with its answer while the store is away.

    def one(self, op: int, key: Any, flags: int = 0, buf: Any = None, size: int = 0) -> Any:
        if buf is None:
            return self._run(self.calls.one, DOWN, op, key, flags)
        return self._run(self.calls.one, DOWN, op, key, flags, buf, size)

    def get(self, key: Any) -> Any:
        return self._run(self.calls.get, b"", key)

    def get_into(self, key: Any, ptr: int, size: int) -> Any:
        return self._run(self.calls.get_into, DOWN, key, ptr, size)

    def put_from(self, op: int, key: Any, ptr: int, size: int, config: Any) -> Any:
        return self._run(self.calls.put_from, DOWN, op, key, ptr, size, config)

    def put(self, op: int, key: Any, value: Any, config: Any) -> Any:
        return self._run(self.calls.put, DOWN, op, key, value, config)

    def keys(self, op: int, keys: list[Any], flags: int = 0) -> Any:
        return self._run(self.calls.keys, [DOWN] * len(keys), op, keys, flags)

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
