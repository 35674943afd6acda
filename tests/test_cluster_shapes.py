"""LocalCluster's shapes against real Mooncake processes on 127.0.0.1: several storage
nodes, each metadata server, every listener on loopback, and the shapes it refuses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import MIB, pid_gone, put_and_get

from mooncake_cffi.cluster import LocalCluster

# -- shapes: several nodes, metadata servers, loopback only ----------------------------------


def wildcard_listeners(pids: set[int]) -> list[str]:
    """``ss -ltnp`` lines of listening sockets of ``pids`` that are not on 127.0.0.1."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10).stdout
    bad = []
    for line in out.splitlines():
        fields = line.split()
        if not any(f"pid={pid}," in line for pid in pids):
            continue
        local = fields[3]
        if not (local.startswith("127.0.0.1:") or local.startswith("[::ffff:127.0.0.1]:")):
            bad.append(line)
    return bad


CLIENT_SCRIPT = """
import json, sys, time
from mooncake.store import MooncakeDistributedStore
store = MooncakeDistributedStore()
assert store.setup(**json.loads(sys.argv[1])) == 0
assert store.put("loopback-key", b"v" * 4096) == 0
assert store.get("loopback-key") == b"v" * 4096
print("ready", flush=True)
sys.stdin.readline()
store.close()
"""


def test_storage_nodes_each_mount_their_own_segment_on_loopback_only(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(segment_size=["32 MB", "48 MB"])
    local.start()
    status = local.status()
    assert status["healthy"], status
    assert sorted(s["total_bytes"] for s in status["memory"]["segments"].values()) == [
        32 * MIB,
        48 * MIB,
    ]
    assert set(status["processes"]) == {"metadata", "master", "storage", "storage1"}
    assert status["leader"] == "master"
    assert status["loopback_confined"] is True

    # A client process started with client_env() is confined too.
    config = local.client_config(local_buffer_size=str(16 * MIB))
    setup = {
        "local_hostname": config["local_hostname"],
        "metadata_server": config["metadata_server"],
        "global_segment_size": 0,
        "local_buffer_size": 16 * MIB,
        "protocol": "tcp",
        "rdma_devices": "",
        "master_server_addr": config["master_server_addr"],
    }
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT_SCRIPT, json.dumps(setup)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **local.client_env()},
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        pids = {pid for pid in local.pids.values() if pid} | {client.pid}
        assert wildcard_listeners(pids) == []
    finally:
        client.communicate("\n", timeout=30)
    assert client.returncode == 0

    # One node crashes: status() still reads the master, and names the dead process.
    crashed = local.pids["storage1"]
    local.kill("storage1")
    assert not local.is_running() and local.any_alive()
    status = local.status()
    assert status["healthy"] is False and status["down"] == ["storage1"]
    assert status["running"] is True and status["serving"] is True  # degraded, still serving
    assert status["leader"] == "master" and status["health"]["status"] == "ok"
    assert status["errors"] == ["storage1 process is not running"]

    # stop() stops the rest and reports what it stopped.
    assert sorted(local.stop()) == ["master", "metadata", "storage"]
    assert pid_gone(crashed) and all(pid_gone(p) for p in local.pids.values() if p)


@pytest.mark.parametrize("metadata", [pytest.param("etcd", marks=pytest.mark.ha), "p2p", "master"])
def test_each_metadata_server_serves_puts_and_gets(
    make_cluster: Callable[..., LocalCluster], metadata: str
) -> None:
    if metadata == "etcd" and not shutil.which("etcd"):
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    local = LocalCluster(
        make_cluster().state_dir.parent / f"md-{metadata}", "32 MB", metadata=metadata
    )
    try:
        local.start()
        assert local.metadata_server.startswith(
            {"etcd": "etcd://", "p2p": "P2PHANDSHAKE", "master": "http://"}[metadata]
        )
        value = os.urandom(10_000)
        assert put_and_get(local.client_config(), f"md-{metadata}", value) == value
        assert wildcard_listeners({pid for pid in local.pids.values() if pid}) == []
    finally:
        local.stop()
    assert not (local.state_dir / "etcd-data").exists()


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"segment_size": ["32 MB", "32 MB"], "storage_nodes": 3}, "2 segment sizes given for 3"),
        ({"storage_nodes": 0}, "storage_nodes must be at least 1"),
        ({"masters": 2}, "2 masters need HA mode"),
        ({"ha": True, "masters": 0}, "masters must be a positive integer"),
        ({"metadata": "redis"}, "unknown metadata server 'redis'"),
        ({"ha": True, "metadata": "master"}, "HA masters have no shared built-in"),
        ({"client_ttl": 0}, "client_ttl must be a positive number"),
    ],
)
def test_impossible_shapes_are_named(tmp_path: Path, shape: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalCluster(tmp_path, **shape)
