"""A throw-away Mooncake cluster on 127.0.0.1, run from the installed Mooncake wheel.

:class:`LocalCluster` starts one ``mooncake_master`` (with its embedded HTTP metadata server)
and one storage node (``mooncake_client``, which contributes the memory segment that holds the
data), waits until the segment is mounted, and records what it started in ``state.json`` so
that another process can query or stop it later (:meth:`LocalCluster.load`).

It only ever signals the PIDs it started, and before signalling it re-checks through ``/proc``
that each PID still runs the Mooncake binary with the ports it was given and the start time it
had, so a recycled PID is never touched.  HTTP goes only to 127.0.0.1, without any proxy.

Observed with wheel 0.3.13.post1: the console scripts ``mooncake_master`` / ``mooncake_client``
are Python wrappers that ``execv`` the ELF binaries shipped inside the ``mooncake`` package, so
the PID is kept.  The master exits with status 1 and no error line when its RPC port is taken;
the storage node treats a size it cannot parse (``"64 MiB"``) as 0 and mounts nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ClusterError", "LocalCluster", "find_binary", "parse_size"]

HOST = "127.0.0.1"
STATE_FILE = "state.json"
MASTER_LOG = "master.log"
STORAGE_LOG = "storage.log"
MASTER_BINARY = "mooncake_master"
STORAGE_BINARY = "mooncake_client"

#: Mooncake clients bind their own ports in this range; never hand one of these out.
_CLIENT_PORT_RANGE = range(12300, 14301)
#: Smallest segment the storage node accepts (it aborts below this).
_MIN_SEGMENT_BYTES = 16 * 1024 * 1024
_STATE_VERSION = 1
_LOG_TAIL_LINES = 20
_LOG_LINE_CHARS = 400
_HTTP_TIMEOUT = 2.0
_POLL_INTERVAL = 0.1
_START_ATTEMPTS = 3

# No proxy, whatever the environment says: every request goes to 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ClusterError(RuntimeError):
    """The local cluster could not be started, queried or stopped."""


def parse_size(size: str | int) -> int:
    """Bytes in a Mooncake size string, read the way Mooncake reads it (``"1 GB"`` = 2**30).

    Only the forms Mooncake understands are accepted: a number with an optional ``K``/``M``/
    ``G``/``T`` unit, optionally followed by ``B``, any case.  Mooncake reads ``"64 MiB"`` as 0,
    so it is rejected here.
    """
    if isinstance(size, bool):
        raise ValueError(f"invalid size {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"invalid size {size!r}: negative")
        return size
    match = _SIZE_RE.match(size)
    if not match:
        raise ValueError(
            f"invalid size {size!r}: Mooncake understands forms like '1 GB', '512MB' or "
            "'1073741824' (units K, M, G, T are powers of 1024; 'MiB' is read as 0)"
        )
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def find_binary(name: str) -> Path:
    """Locate a Mooncake executable (``mooncake_master`` or ``mooncake_client``).

    Looks, in order, for the console script beside ``sys.executable`` (the one that belongs to
    this interpreter's environment), on ``PATH``, and inside the installed ``mooncake``
    package (the ELF binary the console script execs).
    """
    candidates: list[Path] = [Path(sys.executable).parent / name]
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    spec = importlib.util.find_spec("mooncake")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) / name for p in spec.submodule_search_locations)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise ClusterError(
        f"cannot find the {name} executable (tried {tried}); install "
        "mooncake-transfer-engine-non-cuda (or mooncake-transfer-engine)"
    )


def _free_ports(count: int, wildcard: frozenset[int] = frozenset()) -> list[int]:
    """Pick ``count`` distinct free TCP ports on 127.0.0.1 by binding port 0.

    The ports at the indices in ``wildcard`` must also be free on 0.0.0.0 (the master's
    metadata server binds there whatever it is told).  Ports in Mooncake's client range are
    never returned.
    """
    for _ in range(50):
        held: list[socket.socket] = []
        ports: list[int] = []
        try:
            while len(ports) < count and len(held) < count + 100:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.bind((HOST, 0))
                port = sock.getsockname()[1]
                if port not in _CLIENT_PORT_RANGE:
                    ports.append(port)
        finally:
            for sock in held:
                sock.close()
        if len(ports) == count and all(_bindable_everywhere(ports[i]) for i in wildcard):
            return ports
    raise ClusterError("could not find enough free TCP ports on 127.0.0.1")


def _bindable_everywhere(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


# -- /proc helpers ------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if there is no such pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may contain spaces or parentheses itself.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def _running(pid: int, start_ticks: int) -> bool:
    """True while the process that had ``start_ticks`` still has a live thread.

    A thread-group leader that exits before its other threads shows as a zombie while they
    run on, so a zombie counts as gone only once it has a single task left.
    """
    stat = _proc_stat(pid)
    if stat is None or stat[1] != start_ticks:
        return False
    if stat[0] in ("Z", "X"):
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_ours(pid: int, binary_name: str, marker: str, start_ticks: int | None) -> bool:
    """True if ``pid`` is alive (not a zombie) and is the Mooncake process we started.

    It must run ``binary_name`` (as the ELF, or still as the console-script wrapper that
    is about to exec it), carry ``marker`` (a flag with one of our ports) in its command
    line and, when known, have the recorded start time.
    """
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    if start_ticks is not None and stat[1] != start_ticks:
        return False
    argv = _proc_cmdline(pid)
    names = {os.path.basename(arg) for arg in argv[:3]}
    return binary_name in names and marker in argv


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    kept = text.splitlines()[-lines:]
    shortened = [
        line if len(line) <= _LOG_LINE_CHARS else line[:_LOG_LINE_CHARS] + " [...]" for line in kept
    ]
    return "\n".join(shortened) if shortened else "(empty)"


def _parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples of a Prometheus text exposition, by metric name: [(labels, value), ...]."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    line_re = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
    label_re = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = line_re.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(label_re.findall(match.group(2) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


def _scalar(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> int | None:
    for labels, value in samples.get(name, []):
        if not labels:
            return int(value)
    return None


_SUMMARY_MEM_RE = re.compile(r"Mem Storage: ([\d.]+ \w+) / ([\d.]+ \w+)")
_SUMMARY_KEYS_RE = re.compile(r"Keys: (\d+)")
_HUMAN_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _human_bytes(text: str) -> int | None:
    number, _, unit = text.partition(" ")
    factor = _HUMAN_UNITS.get(unit.upper())
    return None if factor is None else int(float(number) * factor)


class LocalCluster:
    """One master and one storage node on 127.0.0.1, with their state in ``state_dir``.

    Use :meth:`start` / :meth:`stop`, or the instance as a context manager.  Clients connect
    with :meth:`client_config`.
    """

    def __init__(self, state_dir: Path | str, segment_size: str = "1 GB") -> None:
        self.state_dir = Path(state_dir).absolute()
        size_bytes = parse_size(segment_size)
        if size_bytes < _MIN_SEGMENT_BYTES:
            raise ValueError(f"segment_size {segment_size!r} is below Mooncake's minimum of 16 MB")
        self.segment_size = str(segment_size)
        self.segment_bytes = size_bytes
        self.ports: dict[str, int] | None = None
        self.pids: dict[str, int | None] = {"master": None, "storage": None}
        self.binaries: dict[str, str] = {}
        self.started_at: float | None = None
        self._start_ticks: dict[str, int | None] = {"master": None, "storage": None}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths and addresses -------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def master_log(self) -> Path:
        return self.state_dir / MASTER_LOG

    @property
    def storage_log(self) -> Path:
        return self.state_dir / STORAGE_LOG

    def _port(self, name: str) -> int:
        if self.ports is None:
            raise ClusterError(f"the cluster in {self.state_dir} has not been started")
        return self.ports[name]

    @property
    def master_addr(self) -> str:
        """``127.0.0.1:P``, the master's RPC address (Mooncake's ``master_server_addr``)."""
        return f"{HOST}:{self._port('master_rpc')}"

    @property
    def metadata_server(self) -> str:
        """URL of the master's embedded HTTP metadata server."""
        return f"http://{HOST}:{self._port('metadata_http')}/metadata"

    @property
    def metrics_url(self) -> str:
        """Base URL of the master's admin/metrics HTTP server (``/health``, ``/metrics``...)."""
        return f"http://{HOST}:{self._port('metrics_http')}"

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Mooncake setup keys for a client of this cluster that contributes no memory."""
        config: dict[str, Any] = {
            "local_hostname": HOST,
            "metadata_server": self.metadata_server,
            "master_server_addr": self.master_addr,
            "protocol": "tcp",
            "global_segment_size": "0",
        }
        config.update(extra)
        return config

    # -- process identity ------------------------------------------------------------------

    def _markers(self) -> dict[str, tuple[str, str]]:
        return {
            "master": (MASTER_BINARY, f"-metrics_port={self._port('metrics_http')}"),
            "storage": (STORAGE_BINARY, f"-port={self._port('storage_rpc')}"),
        }

    def _alive(self, role: str) -> bool:
        pid = self.pids.get(role)
        if pid is None or self.ports is None:
            return False
        proc = self._procs.get(role)
        if proc is not None:
            # Our own child: its PID cannot be reused before we reap it.
            return proc.poll() is None
        binary_name, marker = self._markers()[role]
        return _is_ours(pid, binary_name, marker, self._start_ticks.get(role))

    def is_running(self) -> bool:
        """True while both processes we started are alive."""
        return self._alive("master") and self._alive("storage")

    # -- state file ----------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "pids": dict(self.pids),
            "start_ticks": dict(self._start_ticks),
            "ports": dict(self.ports or {}),
            "logs": {"master": str(self.master_log), "storage": str(self.storage_log)},
            "binaries": dict(self.binaries),
            "master_addr": self.master_addr,
            "metadata_server": self.metadata_server,
            "metrics_url": self.metrics_url,
            "segment_size": self.segment_size,
            "started_at": self.started_at,
        }

    def _write_state(self) -> None:
        tmp = self.state_path.with_name(STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self._state(), indent=2) + "\n")
        os.replace(tmp, self.state_path)

    @classmethod
    def load(cls, state_dir: Path | str) -> LocalCluster | None:
        """The cluster recorded in ``state_dir/state.json``, or None if there is none.

        The returned object can report :meth:`status` and :meth:`stop` the processes even
        though this process did not start them.
        """
        path = Path(state_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from exc
        try:
            cluster = cls(state_dir, state["segment_size"])
            cluster.ports = {str(k): int(v) for k, v in state["ports"].items()}
            cluster.pids = {
                role: (None if state["pids"].get(role) is None else int(state["pids"][role]))
                for role in ("master", "storage")
            }
            ticks = state.get("start_ticks") or {}
            cluster._start_ticks = {
                role: (None if ticks.get(role) is None else int(ticks[role]))
                for role in ("master", "storage")
            }
            cluster.binaries = dict(state.get("binaries") or {})
            cluster.started_at = state.get("started_at")
            cluster._markers()  # all four ports must be present
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ClusterError(f"{path} is not a valid cluster state file: {exc!r}") from exc
        return cluster

    # -- HTTP to the master's admin port --------------------------------------------------

    def _get(self, path: str, timeout: float = _HTTP_TIMEOUT) -> tuple[int, str]:
        """(HTTP status, body) of a GET on the master's admin port."""
        url = self.metrics_url + path
        try:
            with _HTTP.open(url, timeout=timeout) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode(errors="replace")

    def _healthy(self) -> bool:
        try:
            code, body = self._get("/health", timeout=1.0)
        except OSError:
            return False
        if code != 200:
            return False
        try:
            health = json.loads(body)
        except ValueError:
            return True  # answered 200; a future version may not speak JSON
        return bool(health.get("service_ready", True)) if isinstance(health, dict) else True

    def _segments(self) -> list[str]:
        """Names of the segments mounted in the master (from ``/get_all_segments``)."""
        code, body = self._get("/get_all_segments")
        if code == 404:  # older masters: fall back to the per-segment metrics
            code, body = self._get("/metrics")
            if code != 200:
                raise ClusterError(f"/metrics answered HTTP {code}")
            samples = _parse_prometheus(body).get("segment_total_capacity_bytes", [])
            return [labels["segment"] for labels, _ in samples if "segment" in labels]
        if code != 200:
            raise ClusterError(f"/get_all_segments answered HTTP {code}")
        return [line.strip() for line in body.splitlines() if line.strip()]

    # -- start ---------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start the master and the storage node; return once the segment is mounted.

        Raises ClusterError (after stopping whatever was started) if they do not come up
        within ``timeout`` seconds.
        """
        if self._alive("master") or self._alive("storage"):
            raise ClusterError(f"this cluster in {self.state_dir} is already running")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        previous = LocalCluster.load(self.state_dir)
        if previous is not None:
            if previous._alive("master") or previous._alive("storage"):
                raise ClusterError(
                    f"a cluster is already running in {self.state_dir} "
                    f"(pids {previous.pids}); stop it first"
                )
            self.state_path.unlink(missing_ok=True)

        self.binaries = {
            "master": str(find_binary(MASTER_BINARY)),
            "storage": str(find_binary(STORAGE_BINARY)),
        }
        deadline = time.monotonic() + timeout
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(deadline)
                return self
            except _EarlyExit as exc:
                self.stop()
                # A port picked a moment ago may have been taken meanwhile, and the master
                # then exits without saying why: try again with fresh ports.
                if attempt == _START_ATTEMPTS or time.monotonic() >= deadline:
                    raise self._failure(str(exc)) from None
            except ClusterError as exc:
                self.stop()
                raise self._failure(str(exc)) from None
            except OSError as exc:  # could not spawn a process, write a log or state.json
                self.stop()
                raise self._failure(f"cannot start the cluster: {exc}") from exc
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _failure(self, reason: str) -> ClusterError:
        return ClusterError(
            f"{reason}\n--- last lines of {self.master_log} ---\n{_tail(self.master_log)}"
            f"\n--- last lines of {self.storage_log} ---\n{_tail(self.storage_log)}"
        )

    def _spawn(self, role: str, argv: list[str], log: Path) -> None:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
                close_fds=True,
            )
        self._procs[role] = proc
        self.pids[role] = proc.pid
        stat = _proc_stat(proc.pid)
        self._start_ticks[role] = stat[1] if stat else None
        self._write_state()

    def _start_once(self, deadline: float) -> None:
        rpc, metadata, metrics, storage = _free_ports(4, wildcard=frozenset({1}))
        self.ports = {
            "master_rpc": rpc,
            "metadata_http": metadata,
            "metrics_http": metrics,
            "storage_rpc": storage,
        }
        self.started_at = time.time()
        self._spawn(
            "master",
            [
                self.binaries["master"],
                f"-rpc_address={HOST}",
                f"-rpc_port={rpc}",
                "-enable_http_metadata_server=true",
                f"-http_metadata_server_host={HOST}",
                f"-http_metadata_server_port={metadata}",
                f"-metrics_host={HOST}",
                f"-metrics_port={metrics}",
            ],
            self.master_log,
        )
        self._wait("master's /health", self._healthy, deadline)
        self._spawn(
            "storage",
            [
                self.binaries["storage"],
                f"-host={HOST}",
                f"-global_segment_size={self.segment_size}",
                f"-master_server_address={self.master_addr}",
                f"-metadata_server={self.metadata_server}",
                f"-port={storage}",
                "-protocol=tcp",
            ],
            self.storage_log,
        )
        self._wait("the storage node's segment", lambda: bool(self._segments()), deadline)
        for role in ("master", "storage"):
            if not self._alive(role):
                raise _EarlyExit(self._exit_reason(role))

    def _exit_reason(self, role: str) -> str:
        proc = self._procs.get(role)
        code = proc.poll() if proc is not None else None
        what = "mooncake_master" if role == "master" else "the storage node (mooncake_client)"
        status = f" with status {code}" if code is not None else ""
        return f"{what} exited during startup{status}"

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float) -> None:
        while True:
            for role in self._procs:
                if not self._alive(role):
                    raise _EarlyExit(self._exit_reason(role))
            try:
                if ready():
                    return
            except (OSError, ClusterError):
                pass
            if time.monotonic() >= deadline:
                hint = ""
                if "segment size is 0" in _tail(self.storage_log, 200):
                    hint = f" (the storage node read segment size {self.segment_size!r} as 0)"
                raise ClusterError(f"timed out waiting for {what}{hint}")
            time.sleep(_POLL_INTERVAL)

    # -- stop ----------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the processes we started (storage node first), then remove ``state.json``.

        Each gets SIGTERM, then SIGKILL if still alive after ``timeout`` seconds.  A PID that
        no longer runs our Mooncake process is left alone.  Safe to call more than once.
        """
        for role in ("storage", "master"):
            self._stop_one(role, timeout)
        for proc in self._procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=0)
        self._procs.clear()
        self.state_path.unlink(missing_ok=True)

    def _stop_one(self, role: str, timeout: float) -> None:
        pid = self.pids.get(role)
        # Identity is checked in full (binary, ports, start time) before the first signal.
        if pid is None or not self._alive(role):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if self._wait_gone(role, timeout):
            return
        if not self._still_same(role):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._wait_gone(role, 5.0):
            raise ClusterError(f"{role} process {pid} did not exit after SIGKILL")

    def _still_same(self, role: str) -> bool:
        """True while the process identified before signalling it still has live threads."""
        proc = self._procs.get(role)
        if proc is not None:
            return proc.poll() is None
        pid, ticks = self.pids.get(role), self._start_ticks.get(role)
        if pid is None:
            return False
        if ticks is None:
            return self._alive(role)
        return _running(pid, ticks)

    def _wait_gone(self, role: str, timeout: float) -> bool:
        proc = self._procs.get(role)
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self._still_same(role):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    # -- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Liveness, health, key count and memory use of the cluster, as plain data.

        Never raises for an unreachable master: fields that could not be read are None and
        the reasons are listed under ``errors``.
        """
        errors: list[str] = []
        result: dict[str, Any] = {
            "state_dir": str(self.state_dir),
            "running": False,
            "healthy": False,
            "processes": {},
            "pids": dict(self.pids),
            "ports": dict(self.ports or {}),
            "master_addr": None,
            "metadata_server": None,
            "metrics_url": None,
            "segment_size": self.segment_size,
            "started_at": self.started_at,
            "health": None,
            "key_count": None,
            "active_clients": None,
            "memory": {"total_bytes": None, "used_bytes": None, "segments": {}},
            "logs": {"master": str(self.master_log), "storage": str(self.storage_log)},
            "errors": errors,
        }
        if self.ports is None:
            errors.append("not started")
            return result
        result.update(
            master_addr=self.master_addr,
            metadata_server=self.metadata_server,
            metrics_url=self.metrics_url,
        )
        for role in ("master", "storage"):
            result["processes"][role] = {"pid": self.pids.get(role), "alive": self._alive(role)}
        result["running"] = all(p["alive"] for p in result["processes"].values())
        if not result["processes"]["master"]["alive"]:
            errors.append("master process is not running")
            return result

        self._status_health(result, errors)
        samples = self._status_metrics(result, errors)
        if result["key_count"] is None or result["memory"]["total_bytes"] is None:
            self._status_summary(result, errors)
        if result["key_count"] is None:
            self._status_all_keys(result, errors)
        if samples is None or not result["memory"]["segments"]:
            with contextlib.suppress(OSError, ClusterError):
                for name in self._segments():
                    result["memory"]["segments"].setdefault(
                        name, {"total_bytes": None, "used_bytes": None}
                    )
        result["healthy"] = bool(
            result["running"]
            and result["health"] is not None
            and (result["health"].get("status", "ok") == "ok")
        )
        return result

    def _status_get(
        self, path: str, errors: list[str], timeout: float = _HTTP_TIMEOUT
    ) -> tuple[int, str] | None:
        """A GET for status(): None if it failed; failures and non-200 go to ``errors``."""
        try:
            code, body = self._get(path, timeout=timeout)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            return None
        if code != 200:
            errors.append(f"{path}: HTTP {code}")
        return code, body

    def _status_health(self, result: dict[str, Any], errors: list[str]) -> None:
        got = self._status_get("/health", errors)
        if got is None:
            return
        body = got[1]  # parsed whatever the status: it says why
        try:
            health = json.loads(body)
        except ValueError:
            health = {"status": body.strip()}
        result["health"] = health if isinstance(health, dict) else {"status": health}

    def _status_metrics(
        self, result: dict[str, Any], errors: list[str]
    ) -> dict[str, list[tuple[dict[str, str], float]]] | None:
        got = self._status_get("/metrics", errors)
        if got is None or got[0] != 200:
            return None
        body = got[1]
        samples = _parse_prometheus(body)
        memory = result["memory"]
        result["key_count"] = _scalar(samples, "master_key_count")
        result["active_clients"] = _scalar(samples, "master_active_clients")
        memory["total_bytes"] = _scalar(samples, "master_total_capacity_bytes")
        memory["used_bytes"] = _scalar(samples, "master_allocated_bytes")
        segments = memory["segments"]
        for metric, field in (
            ("segment_total_capacity_bytes", "total_bytes"),
            ("segment_allocated_bytes", "used_bytes"),
        ):
            for labels, value in samples.get(metric, []):
                if "segment" in labels:
                    entry = segments.setdefault(
                        labels["segment"], {"total_bytes": None, "used_bytes": None}
                    )
                    entry[field] = int(value)
        return samples

    def _status_summary(self, result: dict[str, Any], errors: list[str]) -> None:
        got = self._status_get("/metrics/summary", errors)
        if got is None or got[0] != 200:
            return
        body = got[1]
        keys = _SUMMARY_KEYS_RE.search(body)
        if keys and result["key_count"] is None:
            result["key_count"] = int(keys.group(1))
        mem = _SUMMARY_MEM_RE.search(body)
        if mem and result["memory"]["total_bytes"] is None:
            # The summary rounds to two decimals: approximate figures.
            result["memory"]["used_bytes"] = _human_bytes(mem.group(1))
            result["memory"]["total_bytes"] = _human_bytes(mem.group(2))

    def _status_all_keys(self, result: dict[str, Any], errors: list[str]) -> None:
        got = self._status_get("/get_all_keys", errors, timeout=5.0)
        if got is not None and got[0] == 200:
            result["key_count"] = sum(1 for line in got[1].splitlines() if line.strip())

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = self.master_addr if self.ports else "not started"
        return f"<LocalCluster {state} {where} in {self.state_dir}>"

    def log_paths(self) -> dict[str, Path]:
        """The log files, by role (``master``, ``storage``)."""
        return {"master": self.master_log, "storage": self.storage_log}


class _EarlyExit(ClusterError):
    """A process we started exited before the cluster was up."""
