"""The processes of a local cluster: spawning them, recognising them later, stopping them.

A process is only ever signalled after it has been recognised as ours, and recognition needs
every piece of evidence to be present and to match (missing data never passes):

* the PID's start time (``/proc/PID/stat``) equals the one recorded when it was spawned;
* it runs as the current user (``/proc/PID/status``);
* its command line starts with the recorded binary and carries its marker (a port flag);
* its environment holds the cluster's secret token (``MCS_CLUSTER_TOKEN``).  The environment
  of a process is readable only by its owner, and the token lives only in the private
  ``state.json``, so a copied or forged state file cannot point ``down`` at someone else's
  processes, nor at processes of ours it did not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _statedir
from ._common import ClusterError

TOKEN_ENV = "MCS_CLUSTER_TOKEN"


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if there is no such pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may contain spaces or parentheses itself.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def _proc_uid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _proc_list(pid: int, name: str) -> list[bytes]:
    try:
        raw = Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return []
    return [part for part in raw.split(b"\0") if part]


def _has_live_thread(pid: int, start_ticks: int) -> bool:
    """True while the process that had ``start_ticks`` still has a live thread.

    A thread-group leader that exits before its other threads shows as a zombie while they
    run on, so a zombie counts as gone only once it has a single task left.
    """
    stat = proc_stat(pid)
    if stat is None or stat[1] != start_ticks:
        return False
    if stat[0] in ("Z", "X"):
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


@dataclass
class Proc:
    """One process of the cluster, as recorded in ``state.json``."""

    role: str
    argv: list[str]
    log: str
    marker: str
    env: dict[str, str] = field(default_factory=dict)
    #: Run before argv (e.g. ``ip netns exec NS``, which execs argv in place: same PID).
    prefix: list[str] = field(default_factory=list)
    pid: int | None = None
    start_ticks: int | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_state(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "argv": list(self.argv),
            "log": self.log,
            "marker": self.marker,
            "env": dict(self.env),
            "prefix": list(self.prefix),
            "pid": self.pid,
            "start_ticks": self.start_ticks,
        }

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> Proc:
        pid, ticks = data.get("pid"), data.get("start_ticks")
        argv = data["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv of {data.get('role')!r} must be a non-empty list of strings")
        return cls(
            role=str(data["role"]),
            argv=argv,
            log=str(data["log"]),
            marker=str(data["marker"]),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            prefix=[str(p) for p in (data.get("prefix") or [])],
            pid=None if pid is None else int(pid),
            start_ticks=None if ticks is None else int(ticks),
        )

    # -- identity --------------------------------------------------------------------------

    def is_ours(self, token: str) -> bool:
        """True if the recorded PID is alive (not a zombie) and provably this process."""
        if self.popen is not None:
            return self.popen.poll() is None  # our child: its PID cannot be reused unreaped
        if self.pid is None or self.start_ticks is None or not token:
            return False
        stat = proc_stat(self.pid)
        if stat is None or stat[0] in ("Z", "X") or stat[1] != self.start_ticks:
            return False
        if _proc_uid(self.pid) != os.getuid():
            return False
        argv = _proc_list(self.pid, "cmdline")
        if not argv or argv[0].decode(errors="replace") != self.argv[0]:
            return False
        if self.marker.encode() not in argv:
            return False
        return f"{TOKEN_ENV}={token}".encode() in _proc_list(self.pid, "environ")

    def _still_same(self) -> bool:
        """True while the process identified before signalling it still has live threads."""
        if self.popen is not None:
            return self.popen.poll() is None
        if self.pid is None or self.start_ticks is None:
            return False
        return _has_live_thread(self.pid, self.start_ticks)

    # -- lifecycle -------------------------------------------------------------------------

    def spawn(self, cwd: Path, token: str) -> None:
        """Start the process, its output going to a fresh private log file."""
        # An inherited LD_PRELOAD (e.g. sanitizer runtimes of a test run) is not passed on:
        # the cluster's processes get only the preload they are given (the loopback one).
        inherited = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env = {**inherited, **self.env, TOKEN_ENV: token}
        fd = _statedir.create_file(Path(self.log))
        try:
            self.popen = subprocess.Popen(
                [*self.prefix, *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(fd)
        self.pid = self.popen.pid
        stat = proc_stat(self.pid)
        self.start_ticks = stat[1] if stat else None

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def kill(self, sig: int = signal.SIGKILL, token: str = "") -> bool:
        """Send ``sig`` if the process is recognised as ours; True if it was sent."""
        if self.pid is None or not self.is_ours(token):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        return True

    def stop(self, token: str, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout`` s; True if it was running and was stopped.

        Raises ClusterError if it survives SIGKILL for 5 s.
        """
        if not self.kill(signal.SIGTERM, token):
            self._reap()
            return False
        if not self._wait_gone(timeout) and self._still_same():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # type: ignore[arg-type]
            if not self._wait_gone(5.0):
                raise ClusterError(f"{self.role} process {self.pid} did not exit after SIGKILL")
        self._reap()
        return True

    def _wait_gone(self, timeout: float) -> bool:
        if self.popen is not None:
            try:
                self.popen.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self._still_same():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _reap(self) -> None:
        if self.popen is not None:
            with contextlib.suppress(Exception):
                self.popen.wait(timeout=0)
