"""Waiting for a state with a deadline; freezing a process of a local cluster (SIGSTOP) and
knowing when it is frozen, or that a killed one is gone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll ``check`` until it is true; AssertionError naming ``what`` after ``timeout`` s.
    Tests wait for the state they assert this way, never sleep for a window and assert."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def gone(pid: int) -> bool:
    """True once ``pid`` has died: no such process, or a zombie not yet reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def thread_states(pid: int) -> list[str]:
    """The scheduler state letter of each thread of ``pid`` (``T``: stopped)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue  # the thread ended meanwhile
    return states


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and return once every thread of it is stopped: kill() only queues
    the stop, and on a loaded machine a thread may still run for a moment after it."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = thread_states(pid)
        if states and all(s in "Tt" for s in states):
            return
        time.sleep(0.002)
    raise AssertionError(f"storage node {pid} did not stop within 10 s: {thread_states(pid)}")


class StoreAway:
    """A process of a local cluster taken away for a ``with`` block: ``fault`` is ``"<role>
    killed"`` (killed, then restarted) or ``"<role> frozen"`` (SIGSTOP, then SIGCONT)."""

    def __init__(self, local: Any, fault: str) -> None:
        self.local, self.fault = local, fault
        self.role = fault.split()[0]
        pid = local.pids[self.role]
        assert pid is not None, f"no {self.role} process"
        self.pid: int = pid

    def __enter__(self) -> None:
        if self.fault.endswith("killed"):
            self.local.kill(self.role)
        else:
            freeze(self.pid)

    def __exit__(self, *exc: object) -> None:
        if self.fault.endswith("killed"):
            self.local.restart(self.role)
        else:
            os.kill(self.pid, signal.SIGCONT)
