"""Tests for mooncake_cffi.cluster against real Mooncake processes on 127.0.0.1.

Values go through Mooncake's own Python client (``mooncake.store``), not this package's
client, so these tests only depend on the cluster code and the installed wheel.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mooncake_cffi.cluster import ClusterError, LocalCluster, find_binary, parse_size

MIB = 1 << 20


def put_and_get(config: dict[str, Any], key: str, value: bytes) -> bytes:
    """Store ``value`` under ``key`` with Mooncake's Python client and read it back."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup({**config, "local_buffer_size": str(16 * MIB)})
    assert rc == 0, f"MooncakeDistributedStore.setup returned {rc}"
    try:
        assert store.put(key, value) == 0
        return store.get(key)
    finally:
        store.close()


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return state[state.rfind(")") + 2] in "ZX"


# -- no processes needed -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mooncake_master", "mooncake_client"])
def test_find_binary(name: str) -> None:
    path = find_binary(name)
    assert path.name == name
    assert os.access(path, os.X_OK)


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


def test_stop_never_signals_a_foreign_pid(tmp_path: Path) -> None:
    """A state.json whose PIDs now belong to other processes must not get them killed."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "version": 1,
            "pids": {"master": sleeper.pid, "storage": os.getpid()},
            "start_ticks": {"master": None, "storage": None},
            "ports": {
                "master_rpc": 40001,
                "metadata_http": 40002,
                "metrics_http": 40003,
                "storage_rpc": 40004,
            },
            "segment_size": "1 GB",
            "started_at": 0.0,
        }
        (tmp_path / "state.json").write_text(json.dumps(state))
        loaded = LocalCluster.load(tmp_path)
        assert loaded is not None
        assert not loaded.is_running()
        assert loaded.status()["running"] is False
        loaded.stop(timeout=1)
        assert sleeper.poll() is None, "a process we did not start was signalled"
        assert not (tmp_path / "state.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


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
    assert str(local.master_log) in message
    started = [pid for pid in local.pids.values() if pid is not None]
    assert started, "the master should have been spawned"
    assert all(pid_gone(pid) for pid in started)
    assert not local.state_path.exists()


def test_start_retries_when_a_port_was_taken(
    make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master exits silently when its RPC port is taken; start() retries with new ports."""
    import mooncake_cffi.cluster as cluster_module

    real_free_ports = cluster_module._free_ports
    calls: list[list[int]] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()

        def free_ports(count: int, wildcard: frozenset[int] = frozenset()) -> list[int]:
            ports = real_free_ports(count, wildcard)
            if not calls:
                ports[0] = squatter.getsockname()[1]  # the master's RPC port
            calls.append(ports)
            return ports

        monkeypatch.setattr(cluster_module, "_free_ports", free_ports)
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
