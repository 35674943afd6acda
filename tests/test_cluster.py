"""Tests for mooncake_cffi.cluster against real Mooncake processes on 127.0.0.1.

Values go through Mooncake's own Python client (``mooncake.store``), not this package's
client, so these tests only depend on the cluster code and the installed wheel.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import MIB, pid_gone, put_and_get

from mooncake_cffi.admin import AdminClient
from mooncake_cffi.cluster import ClusterError, LocalCluster, find_binary, parse_size

# -- no processes needed -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mooncake_master", "mooncake_client"])
def test_find_binary_returns_the_elf_not_the_python_wrapper(name: str) -> None:
    path = find_binary(name)
    assert path.name == name
    assert os.access(path, os.X_OK)
    assert path.read_bytes()[:4] == b"\x7fELF"


def test_find_binary_missing() -> None:
    with pytest.raises(ClusterError, match="cannot find the no_such_mooncake_tool"):
        find_binary("no_such_mooncake_tool")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 GB", 1 << 30),
        ("64MB", 64 * MIB),
        ("64 mb", 64 * MIB),
        ("1.5 GB", 3 << 29),
        ("2g", 2 << 30),
        ("67108864", 64 * MIB),
        (4096, 4096),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["64 MiB", "bogus", "", "-1", "1 PB"])
def test_parse_size_rejects_what_mooncake_misreads(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_segment_size_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        LocalCluster(tmp_path, segment_size="64 MiB")
    with pytest.raises(ValueError, match="minimum"):
        LocalCluster(tmp_path, segment_size="1 MB")


def test_unstarted_cluster(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path)
    assert not local.is_running()
    assert LocalCluster.load(tmp_path) is None
    status = local.status()
    assert status["running"] is False and status["healthy"] is False
    assert status["errors"] == ["not started"]
    with pytest.raises(ClusterError, match="not been started"):
        local.client_config()
    local.stop()  # nothing to do, no error


def test_load_rejects_a_corrupt_state_file(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(ClusterError, match="cannot read"):
        LocalCluster.load(tmp_path)
    (tmp_path / "state.json").write_text('{"segment_size": "1 GB"}')
    with pytest.raises(ClusterError, match="not a valid cluster state file"):
        LocalCluster.load(tmp_path)
    (tmp_path / "state.json").write_text('{"version": 1, "pids": {"master": 1}}')
    with pytest.raises(ClusterError, match="older mooncake-cffi"):
        LocalCluster.load(tmp_path)


def _forged_state(pids: dict[str, int], ticks: dict[str, int | None], token: str) -> dict:
    """A state.json naming the given PIDs as a one-master, one-node cluster."""
    ports = {"master_rpc": 40001, "metadata_http": 40002, "metrics_http": 40003}
    ports["storage_rpc"] = 40004
    return {
        "version": 2,
        "token": token,
        "shape": {"segment_sizes": ["1 GB"], "ha": False, "masters": 1, "metadata": "http"},
        "processes": [
            {
                "role": role,
                "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
                "log": "/dev/null",
                "marker": "-c",
                "pid": pid,
                "start_ticks": ticks.get(role),
            }
            for role, pid in pids.items()
        ],
        "ports": ports,
    }


def _write_private(path: Path, data: dict) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)


def _start_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2 :].split()[19])


@pytest.mark.parametrize("case", ["null_ticks", "wrong_token", "no_token"])
def test_stop_never_signals_a_process_it_cannot_prove_it_started(tmp_path: Path, case: str) -> None:
    """Missing or unmatched evidence (start time, secret token) never lets stop() kill."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = {} if case == "null_ticks" else {"master": _start_ticks(sleeper.pid)}
        token = "" if case == "no_token" else "0" * 32
        state = _forged_state({"master": sleeper.pid, "storage": os.getpid()}, ticks, token)
        _write_private(tmp_path / "state" / "state.json", state)
        loaded = LocalCluster.load(tmp_path / "state")
        assert loaded is not None
        assert not loaded.is_running()
        assert loaded.status()["running"] is False
        assert loaded.stop(timeout=1) == []
        assert sleeper.poll() is None, "a process we did not start was signalled"
        assert not (tmp_path / "state" / "state.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_state_dir_is_private_and_unsafe_ones_are_refused(tmp_path: Path) -> None:
    from mooncake_cffi.cluster import _statedir

    fresh = tmp_path / "fresh"
    _statedir.ensure_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700

    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(ClusterError, match="writable by group or others"):
        LocalCluster(open_to_all).start()

    link = tmp_path / "link"
    link.symlink_to(fresh)
    with pytest.raises(ClusterError, match="symlink"):
        LocalCluster(link).start()

    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(ClusterError, match="not to you"):
            LocalCluster(foreign).start()
        # A state.json that is not ours is refused, whatever it says.
        _write_private(fresh / "state.json", {"version": 2})
        os.chown(fresh / "state.json", 65534, 65534)
        with pytest.raises(ClusterError, match="not to you"):
            LocalCluster.load(fresh)
        os.unlink(fresh / "state.json")

    (fresh / "state.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ClusterError, match="cannot read"):
        LocalCluster.load(fresh)
    group_writable = tmp_path / "gw.json"
    _write_private(group_writable, {})
    os.unlink(fresh / "state.json")
    _write_private(fresh / "state.json", {"version": 2})
    (fresh / "state.json").chmod(0o620)
    with pytest.raises(ClusterError, match="writable by group or others"):
        LocalCluster.load(fresh)


def test_planted_symlinks_are_never_followed(make_cluster: Callable[..., LocalCluster]) -> None:
    """A master.log symlink is replaced, not written through; state.json stays a real file."""
    local = make_cluster(segment_size="32 MB")
    local.state_dir.mkdir(mode=0o700, parents=True)
    victim = local.state_dir.parent / "victim.txt"
    victim.write_text("precious")
    (local.state_dir / "master.log").symlink_to(victim)
    (local.state_dir / "state.json.tmp").symlink_to(victim)
    with local:
        assert victim.read_text() == "precious"
        log = local.state_dir / "master.log"
        assert not log.is_symlink() and stat.S_IMODE(log.stat().st_mode) == 0o600
        state = local.state_dir / "state.json"
        assert not state.is_symlink() and stat.S_IMODE(state.stat().st_mode) == 0o600
        assert json.loads(state.read_text())["token"]
    assert victim.read_text() == "precious"


def test_status_names_an_admin_port_that_does_not_answer() -> None:
    """Each unreadable figure leaves its field None and its AdminError text in ``errors``."""
    from mooncake_cffi.cluster import _status

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    result: dict[str, Any] = {
        "health": None,
        "key_count": None,
        "active_clients": None,
        "memory": {"total_bytes": None, "used_bytes": None, "segments": {}},
    }
    errors: list[str] = []
    answered = _status.fill(AdminClient(f"http://127.0.0.1:{port}", timeout=1.0), result, errors)
    assert answered is False
    assert len(errors) == 3, errors  # health, metrics, segments
    assert all(e.startswith(f"admin API http://127.0.0.1:{port}") for e in errors), errors
    assert result["health"] is None and result["key_count"] is None
    assert result["memory"] == {"total_bytes": None, "used_bytes": None, "segments": {}}


def test_status_of_a_cluster_whose_master_died(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(segment_size="32 MB")
    with local:
        local.kill("master")
        assert local.leader() is None
        status = local.status()
        assert status["running"] is False and status["healthy"] is False
        assert status["leader"] is None and status["processes"]["master"]["role"] is None
        assert status["errors"] == ["master process is not running", "no master is serving"]
        with pytest.raises(ClusterError, match="admin API http://127.0.0.1:"):
            local.segments()


# -- real clusters -------------------------------------------------------------------------


def test_lifecycle_put_get_and_stop(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(segment_size="64 MB")
    local.start()
    assert local.is_running()
    pids = dict(local.pids)
    assert all(isinstance(pid, int) for pid in pids.values())

    state = json.loads(local.state_path.read_text())
    for key in ("pids", "ports", "logs", "master_addr", "metadata_server", "segment_size"):
        assert key in state
    assert state["pids"] == pids
    assert state["master_addr"] == local.master_addr
    assert local.master_addr == f"127.0.0.1:{local.ports['master_rpc']}"
    assert local.metadata_server == f"http://127.0.0.1:{local.ports['metadata_http']}/metadata"
    assert local.metrics_url == f"http://127.0.0.1:{local.ports['metrics_http']}"
    for port in local.ports.values():
        assert not 12300 <= port <= 14300
    assert Path(state["logs"]["master"]).exists() and Path(state["logs"]["storage"]).exists()

    config = local.client_config(tenant_id="default")
    assert config == {
        "local_hostname": "127.0.0.1",
        "metadata_server": local.metadata_server,
        "master_server_addr": local.master_addr,
        "protocol": "tcp",
        "global_segment_size": "0",
        "tenant_id": "default",
    }

    status = local.status()
    assert status["running"] and status["healthy"], status
    assert status["health"]["status"] == "ok"
    assert status["key_count"] == 0
    assert status["memory"]["total_bytes"] == 64 * MIB
    assert status["memory"]["used_bytes"] == 0
    assert len(status["memory"]["segments"]) == 1
    assert {role: p["pid"] for role, p in status["processes"].items()} == pids
    assert status["pids"] == pids
    assert status["ports"] == local.ports
    assert status["errors"] == []

    # Another handle on the same state directory sees the same cluster, and cannot start
    # a second one over it.
    loaded = LocalCluster.load(local.state_dir)
    assert loaded is not None and loaded.is_running()
    assert loaded.pids == pids and loaded.ports == local.ports
    with pytest.raises(ClusterError, match="already running"):
        LocalCluster(local.state_dir).start()
    assert local.is_running()

    value = os.urandom(100_000)
    assert put_and_get(config, "lifecycle-key", value) == value

    status = local.status()
    assert status["key_count"] == 1
    assert status["memory"]["used_bytes"] >= len(value)
    # The figures are the admin API's: one source per fact.
    admin = AdminClient(local.metrics_url)
    assert status["memory"]["segments"] == {
        s.name: {"total_bytes": s.capacity_bytes, "used_bytes": s.used_bytes}
        for s in admin.segments()
    }
    assert status["memory"]["used_bytes"] == admin.metrics().summary()["memory"]["used_bytes"]

    local.stop()
    assert all(pid_gone(pid) for pid in pids.values())
    assert not local.is_running()
    assert not local.state_path.exists()
    assert LocalCluster.load(local.state_dir) is None
    local.stop()  # idempotent


def test_stop_through_a_loaded_handle(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(segment_size="32 MB")
    with local:
        pids = dict(local.pids)
        loaded = LocalCluster.load(local.state_dir)
        assert loaded is not None
        loaded.stop()
        assert not loaded.is_running()
        assert not local.is_running()
    assert all(pid_gone(pid) for pid in pids.values())


def test_start_failure_cleans_up(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster()
    with pytest.raises(ClusterError) as info:
        local.start(timeout=0.2)
    message = str(info.value)
    assert "timed out" in message
    assert local.log_paths() and all(str(log) in message for log in local.log_paths().values())
    started = [pid for pid in local.pids.values() if pid is not None]
    assert started, "the master should have been spawned"
    assert all(pid_gone(pid) for pid in started)
    assert not local.state_path.exists()


def test_start_retries_when_a_port_was_taken(
    make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master exits silently when its RPC port is taken; start() retries with new ports."""
    import mooncake_cffi.cluster.local as cluster_module

    real_free_ports = cluster_module.free_ports
    calls: list[list[int]] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()

        def free_ports(count: int) -> list[int]:
            ports = real_free_ports(count)
            if not calls:
                ports[0] = squatter.getsockname()[1]  # the master's RPC port
            calls.append(ports)
            return ports

        monkeypatch.setattr(cluster_module, "free_ports", free_ports)
        local = make_cluster(segment_size="32 MB")
        local.start()
        try:
            assert len(calls) == 2
            assert local.ports is not None and local.ports["master_rpc"] == calls[1][0]
            assert local.status()["healthy"]
        finally:
            local.stop()


def test_session_cluster(cluster: LocalCluster, cluster_config: dict[str, Any]) -> None:
    assert cluster.is_running()
    assert cluster_config == cluster.client_config()
    key = f"session-{uuid.uuid4().hex}"
    assert put_and_get(cluster_config, key, b"hello mooncake") == b"hello mooncake"
    status = cluster.status()
    assert status["healthy"], status
    assert status["key_count"] >= 1


def test_the_library_path_a_binary_needs_goes_to_its_process_only(make_cluster, monkeypatch):
    # A wheel whose binaries link a CUDA runtime it does not ship (0.3.12-0.3.13 non-cuda)
    # gets that runtime's directory on LD_LIBRARY_PATH: of the master and storage node,
    # never of this process, whose later loads (and children) it would change for good.
    import os

    from mooncake_cffi import wheel

    extra = "/nonexistent/cudart-dir"
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/users-own")
    monkeypatch.setattr(
        wheel,
        "binary_env",
        lambda binary, base=None: {"LD_LIBRARY_PATH": f"{extra}:/opt/users-own"},
    )
    local = make_cluster("64 MB").start()
    assert os.environ["LD_LIBRARY_PATH"] == "/opt/users-own"
    for role in ("master", "storage"):
        environ = open(f"/proc/{local.pids[role]}/environ", "rb").read().split(b"\0")
        assert f"LD_LIBRARY_PATH={extra}:/opt/users-own".encode() in environ, role
    local.kill("storage")
    local.restart("storage")
    assert os.environ["LD_LIBRARY_PATH"] == "/opt/users-own"
    environ = open(f"/proc/{local.pids['storage']}/environ", "rb").read().split(b"\0")
    assert f"LD_LIBRARY_PATH={extra}:/opt/users-own".encode() in environ
