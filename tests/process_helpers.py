"""Freezing a process of a local cluster (SIGSTOP) and knowing when it is frozen."""

from __future__ import annotations

import os
import signal
import time


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
