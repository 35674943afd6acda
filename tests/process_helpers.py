"""The tests' view of processes: whether one is gone, freezing one (SIGSTOP) until every
thread of it is stopped, and waiting for a forked child with a bound.  ``/proc`` is read
through the cluster package's own :func:`~mooncake_cffi.cluster._procs.proc_stat`."""

from __future__ import annotations

import os
import signal
import time

import pytest

from mooncake_cffi.cluster._procs import proc_stat


def pid_gone(pid: int) -> bool:
    """True if ``pid`` has exited (no such process, or a zombie not yet reaped)."""
    stat = proc_stat(pid)
    return stat is None or stat[0] in "ZX"


def thread_states(pid: int) -> list[str]:
    """The scheduler state letter of each thread of ``pid`` (``T``: stopped)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        stat = proc_stat(int(task))  # a thread id has its /proc entry too
        if stat is not None:  # else the thread ended meanwhile
            states.append(stat[0])
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


def wait_child(pid: int, what: str, seconds: float = 20) -> int:
    """The wait status of the forked child ``pid``; if it has not exited within ``seconds``
    it is killed and reaped, and the test fails saying ``what`` hung."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"{what} hung")
