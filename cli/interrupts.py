"""How mcl2 reacts to SIGINT (Ctrl-C) and SIGTERM.

Both end the command the same way: the exception unwinds through the command, its client is
closed as on a normal exit (so its metadata entries are removed), and mcl2 exits with
``128 + signal number`` (130 for SIGINT, 143 for SIGTERM), saying ``interrupted`` or
``terminated`` on stderr.

SIGTERM is turned into :class:`Terminated`, a :class:`KeyboardInterrupt`, by :func:`install`
(the console script calls it), so every ``except KeyboardInterrupt`` cleanup also runs for it.

While a batch that changes the store is in flight, :class:`held_signals` defers both signals
until the batch returns: Mooncake cannot abandon a transfer half way, so the command first
records what the batch did, then stops and says what was stored or removed.

Threads started while the client is set up (Mooncake's, the shim's lanes) are started under
:func:`threads_without_signals`, so they inherit a mask that blocks both signals: the kernel
delivers them to the main thread only, and no Mooncake call is cut short (EINTR) by one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = [
    "Terminated",
    "describe",
    "exit_status",
    "held_signals",
    "install",
    "threads_without_signals",
]

_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Terminated(KeyboardInterrupt):
    """SIGTERM (or another terminating signal), raised in the main thread."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def install() -> None:
    """Turn SIGTERM into :class:`Terminated` (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def signal_number(exc: BaseException) -> int:
    return int(getattr(exc, "signum", signal.SIGINT))


def exit_status(exc: BaseException) -> int:
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signal_number(exc)


def describe(exc: BaseException) -> str:
    """``interrupted (SIGINT)`` or ``terminated (SIGTERM)``."""
    signum = signal_number(exc)
    name = signal.Signals(signum).name
    return f"interrupted ({name})" if signum == signal.SIGINT else f"terminated ({name})"


@contextmanager
def threads_without_signals() -> Iterator[None]:
    """Block SIGINT and SIGTERM in the calling thread for the block, so that every thread
    started inside it keeps them blocked; a signal that arrives meanwhile is delivered when
    the block ends.  Main thread only (elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class held_signals:
    """Defer SIGINT and SIGTERM while the block runs; :meth:`check` raises them afterwards.

    A second SIGINT inside the block raises at once (for a batch that takes too long: what
    it did is then unknown).  Outside the main thread this does nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> held_signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # ignored (a background job, nohup): stays ignored
                self._saved[signum] = signal.signal(signum, self._defer)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._saved.clear()

    def check(self) -> None:
        """Raise the signal that arrived during the block, if one did."""
        signum, self.signum = self.signum, None
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum is not None:
            raise Terminated(signum)
