"""Logging of failed batches for the LMCache connector: once per failure, by error name.

LMCache drops a completion's error text (it logs only "Store task N failed"), so the
connector logs the reason itself: one WARNING per failed batch naming the operation, the
key count and Mooncake's error name.  When the same kind of failure repeats (a storage node
down fails every batch), repeats within ``window`` seconds are counted instead of logged,
and the next warning for that kind says how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["FailureLog", "logger"]

#: The logger of the LMCache integration.
logger = logging.getLogger("mooncake_cffi.lmcache")


class FailureLog:
    """Logs each failure kind at most once per ``window`` seconds, counting the rest."""

    def __init__(self, window: float = 10.0, log: logging.Logger = logger) -> None:
        self._window = window
        self._log = log
        self._lock = threading.Lock()
        # kind -> (time of the last warning, failures held back since)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def report(self, op: str, name: str, detail: str) -> None:
        """Record one failed batch of ``op`` with error ``name``; ``detail`` says more."""
        kind = (op, name)
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(kind, (float("-inf"), 0))
            if now - last < self._window:
                self._seen[kind] = (last, held + 1)
                self._log.debug("Mooncake %s failed: %s: %s", op, name, detail)
                return
            self._seen[kind] = (now, 0)
        more = f" ({held} more {op} failures with {name} in the last {self._window:g} s)"
        self._log.warning("Mooncake %s failed: %s: %s%s", op, name, detail, more if held else "")
