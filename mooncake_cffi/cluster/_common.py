"""Pieces every part of the local cluster shares: errors, binaries, ports, HTTP, logs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
MASTER_BINARY = "mooncake_master"
STORAGE_BINARY = "mooncake_client"

#: Mooncake clients bind their own ports in this range; never hand one of these out.
CLIENT_PORT_RANGE = range(12300, 14301)
#: Smallest segment the storage node accepts (it aborts below this).
MIN_SEGMENT_BYTES = 16 * 1024 * 1024
HTTP_TIMEOUT = 2.0
_LOG_TAIL_LINES = 20
_LOG_LINE_CHARS = 400

# No proxy, whatever the environment says: every request goes to 127.0.0.1.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClusterError(RuntimeError):
    """The local cluster could not be started, queried or stopped."""


def find_binary(name: str) -> Path:
    """Locate a Mooncake executable (``mooncake_master`` or ``mooncake_client``).

    The ELF binary inside the installed ``mooncake`` package comes first: the console
    scripts of the same name are Python wrappers that, on some wheel versions, fork instead
    of exec and leave orphans.  Then the script beside ``sys.executable``, then ``PATH``.
    """
    candidates: list[Path] = []
    spec = importlib.util.find_spec("mooncake")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) / name for p in spec.submodule_search_locations)
    candidates.append(Path(sys.executable).parent / name)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise ClusterError(
        f"cannot find the {name} executable (tried {tried}); install "
        "mooncake-transfer-engine-non-cuda (or mooncake-transfer-engine)"
    )


def find_etcd() -> Path:
    """The ``etcd`` server executable (Debian's ``etcd-server`` package), or ClusterError."""
    found = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/sbin:/usr/local/bin")
    if not found:
        raise ClusterError(
            "cannot find the etcd executable, needed for --ha and --metadata etcd; install "
            "it with `apt-get install etcd-server` (scripts/test.sh does)"
        )
    return Path(found)


def free_ports(count: int) -> list[int]:
    """Pick ``count`` distinct TCP ports free on 127.0.0.1 and on 0.0.0.0, by binding port 0.

    Ports in Mooncake's client range are never returned.
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
                if port not in CLIENT_PORT_RANGE:
                    ports.append(port)
        finally:
            for sock in held:
                sock.close()
        if len(ports) == count and all(_bindable_everywhere(p) for p in ports):
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


def http_get(url: str, timeout: float = HTTP_TIMEOUT) -> tuple[int, str]:
    """(HTTP status, body) of a GET on ``url``, never through a proxy."""
    try:
        with _HTTP.open(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace")


def tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, long lines shortened; never follows a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    with os.fdopen(fd, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 256 * 1024))
        text = fh.read().decode(errors="replace")
    kept = text.splitlines()[-lines:]
    shortened = [
        line if len(line) <= _LOG_LINE_CHARS else line[:_LOG_LINE_CHARS] + " [...]" for line in kept
    ]
    return "\n".join(shortened) if shortened else "(empty)"
