"""mcl2 doctor: green on a healthy cluster, and each check that fails names what is wrong
(a master down or silent, etcd unreachable, a wrong metadata server, a storage node down)
within the connect timeout."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import MCL2, clean_env, cluster_env, console
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_OK

from mooncake_cffi.cluster import LocalCluster

needs_console = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")


# -- doctor --------------------------------------------------------------------------------


def test_doctor_is_green_on_a_healthy_cluster(run) -> None:
    result = run("doctor")
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0].split(None, 1)[1] for line in lines[:-1]] == [
        "master RPC",
        "admin API",
        "metadata server",
        "segments",
        "client setup",
        "round trip",
        "read failover",
        "versions",
    ]
    # Read failover is off (warn) in a process that loaded Mooncake's binding first, as a
    # test process may have; mcl2's own process never does.
    assert all(line.startswith("ok") for line in lines[:-1] if "read failover" not in line)
    assert lines[-1] == "all checks passed"
    report = json.loads(run("doctor", "--json").stdout)
    assert report["ok"] is True and len(report["checks"]) == 8


@needs_console
def test_doctor_says_read_failover_is_on_with_the_checked_wheel(cluster) -> None:
    from mooncake_cffi import wheel

    result = console("--json", "doctor", env=cluster_env(cluster))
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    check = checks["read failover"]
    if wheel.detect().version == "0.3.13.post1":
        assert check["status"] == "ok" and check["detail"].startswith("on ("), check
    else:
        assert check["status"] == "warn" and "replica layout" in check["detail"], check


@needs_console
def test_doctor_with_the_master_down_fails_within_the_connect_timeout(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = console("--master", f"127.0.0.1:{port}", "--connect-timeout", "1", "doctor", env={})
    elapsed = time.monotonic() - started
    assert result.returncode == EXIT_ERROR
    out = result.stdout.decode()
    assert f"FAIL  master RPC: the master's RPC port 127.0.0.1:{port}" in out
    assert "skip  round trip" in out
    assert elapsed < 4.0


@needs_console
def test_doctor_with_a_silent_master_fails_within_the_connect_timeout() -> None:
    """A master host that accepts connections and never answers (a hung process)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        started = time.monotonic()
        result = console(
            "--master",
            f"127.0.0.1:{port}",
            "--admin",
            f"http://127.0.0.1:{port}",
            "--connect-timeout",
            "1",
            "doctor",
            env={},
        )
        elapsed = time.monotonic() - started
    assert result.returncode == EXIT_ERROR
    assert b"FAIL  admin API" in result.stdout
    assert elapsed < 8.0, result.stdout


@needs_console
def test_doctor_on_etcd_masters_checks_etcd_and_never_splits_the_address() -> None:
    """An HA master address is etcd's: the doctor asks each endpoint, and says which."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    master = f"etcd://127.0.0.1:{port};127.0.0.1:{port + 1}"
    started = time.monotonic()
    result = console(
        "--master", master, "--cluster-id", "c1", "--connect-timeout", "1", "doctor", env={}
    )
    assert time.monotonic() - started < 6.0
    assert result.returncode == EXIT_ERROR
    out = result.stdout.decode()
    assert out.startswith(f"FAIL  etcd: etcd 127.0.0.1:{port}: Connection refused; ")
    assert f"etcd 127.0.0.1:{port + 1}" in out
    assert "skip  leader: needs: etcd" in out and "skip  round trip" in out
    assert "Name or service not known" not in out and "master RPC" not in out
    # The admin URL of an etcd:// master is its leader's: without etcd, a clear error.
    ls = console("--master", master, "--cluster-id", "c1", "--connect-timeout", "1", "ls", env={})
    assert ls.returncode == EXIT_ERROR
    assert b"Connection refused" in ls.stderr and b"--admin URL" in ls.stderr


def test_doctor_names_a_wrong_metadata_server(
    cluster: LocalCluster, make_cluster: Callable[..., LocalCluster]
) -> None:
    other = make_cluster(segment_size="64MB").start()
    result = CliRunner().invoke(
        cli,
        [
            "--master",
            cluster.master_addr,
            "--metadata-server",
            other.metadata_server,
            "--admin",
            cluster.metrics_url,
            "doctor",
        ],
        env=clean_env(),
    )
    assert result.exit_code == EXIT_ERROR
    line = next(x for x in result.stdout.splitlines() if "metadata server" in x)
    assert line.startswith("FAIL") and "has no entry for segment" in line


def test_doctor_names_a_storage_node_that_is_down(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(segment_size="64MB").start()
    local.kill("storage")  # SIGKILL, and reaped
    result = CliRunner().invoke(
        cli, ["doctor", "--json"], env=clean_env(MCL2_STATE_DIR=str(local.state_dir))
    )
    assert result.exit_code == EXIT_ERROR, result.output
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    # The master keeps the dead node's segment for ~10 s: the round trip fails meanwhile.
    failed = [name for name, c in checks.items() if c["status"] == "FAIL"]
    assert failed, checks
    assert set(failed) <= {
        "master RPC",
        "local cluster",
        "segments",
        "client setup",
        "round trip",
    }, checks
    # The local cluster check names the dead node and the command that brings it back.
    assert "storage down" in checks["local cluster"]["detail"]
    assert "`mcl2 cluster restart storage`" in checks["local cluster"]["detail"]
    detail = " ".join(checks[name]["detail"] for name in failed)
    assert any(word in detail for word in ("storage node", "segment", "no local cluster"))
