"""The installed mcl2 console script: its fast exit (close_for_exit + os._exit), quiet and
with the documented codes, failing fast on a bad master, and leaving no metadata entries."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import (
    MCL2,
    blob,
    clean_env,
    entry_status,
    free_port,
    process_env,
)
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

from mooncake_cffi.cluster import LocalCluster

# -- the console script (fast exit) ------------------------------------------------------------


def console(*args: str, cluster: LocalCluster, input: bytes | None = None) -> Any:
    env = process_env(MCL2_MASTER=cluster.master_addr, MCL2_METADATA_SERVER=cluster.metadata_server)
    return subprocess.run(
        [str(MCL2), *args], input=input, capture_output=True, env=env, timeout=60, check=False
    )


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_console_script_is_quiet_and_exits_with_the_documented_codes(
    cluster: LocalCluster, key: str
) -> None:
    data = blob(100_000)
    put = console("put", key, cluster=cluster, input=data)
    assert put.returncode == EXIT_OK, put.stderr
    assert put.stderr.decode() == f"{key}: stored (97.7 KiB)\n"
    got = console("get", key, cluster=cluster)
    assert got.returncode == EXIT_OK
    assert got.stdout == data
    assert got.stderr == b""  # no Mooncake log line
    missing = console("exists", f"{key}-missing", cluster=cluster)
    assert missing.returncode == EXIT_NOT_FOUND
    assert missing.stderr == b""


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_console_script_fails_fast_for_an_unreachable_master(cluster: LocalCluster) -> None:
    port = free_port()
    env = process_env()
    started = time.monotonic()
    result = subprocess.run(
        [
            str(MCL2),
            "--master",
            f"127.0.0.1:{port}",
            "--metadata-server",
            cluster.metadata_server,
            "get",
            "k",
        ],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert time.monotonic() - started < 5.0
    assert result.returncode == EXIT_ERROR
    assert f"127.0.0.1:{port}".encode() in result.stderr


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_console_script_gives_up_on_a_master_that_never_answers(cluster: LocalCluster) -> None:
    """A port that accepts connections but never answers: Mooncake would retry for ~90 s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        env = process_env()
        started = time.monotonic()
        result = subprocess.run(
            [
                str(MCL2),
                "--master",
                f"127.0.0.1:{port}",
                "--metadata-server",
                cluster.metadata_server,
                "exists",
                "k",
            ],
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == EXIT_ERROR
    assert f"127.0.0.1:{port}".encode() in result.stderr
    assert elapsed < 5.0


def test_a_port_in_local_hostname_is_a_usage_error(cluster: LocalCluster) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "--master",
            cluster.master_addr,
            "--metadata-server",
            cluster.metadata_server,
            "--hostname",
            "127.0.0.1:5000",
            "exists",
            "k",
        ],
        env=clean_env(),
    )
    assert result.exit_code == EXIT_USAGE
    assert "duplicate registration" in result.stderr


# -- what a fast exit leaves behind -----------------------------------------------------------

_UNCLEAN_CLIENT = """
import os, sys
from mooncake_cffi import Client
client = Client(dict(local_hostname="127.0.0.1", metadata_server=sys.argv[1],
                     master_server_addr=sys.argv[2], protocol="tcp", global_segment_size="0"))
print(client.hostname, flush=True)
os._exit(0)
"""


def test_forget_client_deletes_what_a_client_registered(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    from mooncake_cffi.metadata import client_keys, forget_client

    proc = subprocess.run(
        [sys.executable, "-c", _UNCLEAN_CLIENT, cluster.metadata_server, cluster.master_addr],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    hostname = proc.stdout.decode().strip()
    keys = client_keys(hostname)
    assert [k.split("/")[1] for k in keys] == ["ram", "rpc_meta"]
    assert [entry_status(cluster.metadata_server, k) for k in keys] == [200, 200]

    assert forget_client(cluster.metadata_server, hostname) == keys
    assert [entry_status(cluster.metadata_server, k) for k in keys] == [404, 404]
    assert forget_client(cluster.metadata_server, hostname) == []  # idempotent
    assert forget_client("http://127.0.0.1:1/metadata", hostname) == []  # never raises


def test_key_prefix_follows_the_metadata_cluster_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from mooncake_cffi.metadata import client_keys, key_prefix

    monkeypatch.delenv("MC_METADATA_CLUSTER_ID", raising=False)
    assert key_prefix() == "mooncake/"
    monkeypatch.setenv("MC_METADATA_CLUSTER_ID", "abc")
    assert client_keys("h:1") == ["mooncake/abc/ram/h:1", "mooncake/abc/rpc_meta/h:1"]


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_console_script_leaves_no_metadata_entries(cluster: LocalCluster, key: str) -> None:
    """mcl2 exits without Mooncake's teardown; its own entries must still be gone."""
    env = process_env(MCL2_MASTER=cluster.master_addr, MCL2_METADATA_SERVER=cluster.metadata_server)
    result = subprocess.run(
        [str(MCL2), "-vv", "exists", key], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == EXIT_NOT_FOUND
    match = re.search(rb"registered as (\S+)", result.stderr)
    assert match, result.stderr[-2000:]
    hostname = match.group(1).decode()
    from mooncake_cffi.metadata import client_keys

    assert [entry_status(cluster.metadata_server, k) for k in client_keys(hostname)] == [
        404,
        404,
    ]
