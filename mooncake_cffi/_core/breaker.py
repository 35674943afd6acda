"""A breaker for a store that stops answering: after a call that shows it (a slow failure, or
a master that did not answer), calls are answered at once as failures, until a probe finds
the store answering again.

The faces that stacks drive with no deadline of their own use it by default: the drop-in
(:mod:`mooncake_cffi.store.fail_open`) and the LMCache connector
(:class:`mooncake_cffi.lmcache.MooncakeConnector`). What a face answers while the breaker is
open is the face's; the breaker only keeps the state, the code that opened it and its probe
thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..status import describe

log = logging.getLogger("mooncake_cffi.fail_open")

__all__ = [
    "DOWN",
    "DEADLINE",
    "PROBE_EVERY",
    "TRIP_AFTER",
    "Breaker",
    "failed",
]

#: The deadline of each call (seconds) of a face that fails open and was given none: its
#: data calls wait no longer, and Mooncake's master RPCs are shortened to it.
DEADLINE = 2.0
#: A failed call slower than this (seconds) opens the breaker.
TRIP_AFTER = 1.0
#: Seconds between the breaker's probes while it is open, at first.
PROBE_EVERY = 1.0
#: A breaker that opens again within this many seconds of closing doubles the wait between
#: its probes, up to :data:`PROBE_AT_MOST` (a store that answers the probe but not the
#: calls, e.g. a frozen storage node behind a live master, costs a call its deadline only
#: that often); one that stays closed longer starts again from :data:`PROBE_EVERY`.
FLAPPING = 10.0
PROBE_AT_MOST = 16.0
#: RPC_FAIL: a master that is gone (the breaker's answer when no other code opened it).
DOWN = -900
#: The key a probe asks about (it need not exist: an answer is what counts).
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


def failed(result: Any) -> bool:
    """Whether a call's answer says it failed (a negative code, or no value read)."""
    if isinstance(result, int):
        return result < 0
    if isinstance(result, bytes):
        return not result
    if isinstance(result, list):
        if not result:
            return False
        try:  # per-key ints, the usual answer: one pass in C
            return bool(min(result) < 0)
        except TypeError:  # values (bytes), or None among them
            pass
        return any(
            r is None or (isinstance(r, int) and r < 0) or (isinstance(r, bytes) and not r)
            for r in result
        )
    return result is None


class Breaker:
    """Open while the store does not answer in time; a probe thread closes it.

    ``probe`` is a call to the master that returns an int (negative: failed); it runs on
    the breaker's own thread only. A trip may bring a probe of its own (the read that
    failed, tried again), used instead until the breaker closes.
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
        self._trip_probe: Callable[[], int] | None = None
        self._every = PROBE_EVERY
        self._closed_at = -FLAPPING
        self._opened_at = 0.0

    def observe(self, started: float, result: Any, probe: Callable[[], int] | None = None) -> None:
        """After a failed call that started at ``started`` (monotonic) and answered
        ``result``: a slow failure, or a master that did not answer, opens the breaker
        (``probe``: the call to try again before closing it, else the master's)."""
        if _unreachable(result) or time.monotonic() - started > TRIP_AFTER:
            self.trip(_code(result), probe)

    def trip(self, code: int = DOWN, probe: Callable[[], int] | None = None) -> None:
        with self._lock:
            if self.open or self._stopped.is_set():
                return
            now = time.monotonic()
            flapping = now - self._closed_at < FLAPPING
            self._every = min(self._every * 2, PROBE_AT_MOST) if flapping else PROBE_EVERY
            self._trip_probe = probe
            self.code = code
            self.open = True
            self.trips += 1
            self._opened_at = now
            log.warning(
                "the store did not answer (%s): calls fail at once, and the stack "
                "recomputes, until a probe every %.0f s finds it answering",
                describe(code),
                self._every,
            )
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name="mooncake-fail-open", daemon=True
                )
                self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(self._every):
            started = time.monotonic()
            try:
                answer = (self._trip_probe or self._probe)()
            except Exception:
                answer = DOWN
            if answer >= 0 and time.monotonic() - started <= TRIP_AFTER:
                with self._lock:
                    self.open = False
                    self._closed_at = time.monotonic()
                    log.warning(
                        "the store answers again: calls resume (they failed at once for %.1f s)",
                        self._closed_at - self._opened_at,
                    )
                    self._trip_probe = None
                    self._thread = None
                return

    def stop(self) -> None:
        """No more probes (the store is closing); waits for a probe in progress."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def state(self) -> dict[str, Any]:
        return {
            "open": self.open,
            "code": self.code,
            "trips": self.trips,
            "refused": self.refused,
            "probe_every": self._every,
        }
