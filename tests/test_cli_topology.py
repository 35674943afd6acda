"""mcl2 against production-shaped clusters: ``put --replicas N`` on several storage nodes,
and ``--cluster-id`` for HA masters on etcd.

Every run is the installed console script against real Mooncake processes; replica
placement is read back with ``mcl2 info --json`` and the master's admin API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from mooncake_cffi.cli.settings import Settings

from mooncake_cffi.admin import AdminClient
from mooncake_cffi.cluster import LocalCluster

MCL2 = Path(sys.executable).with_name("mcl2")
pytestmark = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")
needs_etcd = pytest.mark.usefixtures("etcd")


def mcl2(
    *args: str, env: dict[str, str], stdin: bytes = b"value"
) -> subprocess.CompletedProcess[bytes]:
    """The console script with only the given MCL2_* / MC_STORE_* settings."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MCL2_", "MC_STORE_"))}
    full.update(env)
    return subprocess.run(
        [str(MCL2), *args], input=stdin, capture_output=True, env=full, timeout=60, check=False
    )


def memory_segments(admin: AdminClient, key: str) -> list[str | None]:
    info = admin.query_key(key)
    assert info is not None, f"{key} is not stored"
    return [r.segment or r.endpoint for r in info.replicas if r.kind == "memory"]


# -- put --replicas ---------------------------------------------------------------------------


def test_put_replicas_writes_each_copy_on_its_own_storage_node(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    local = make_cluster("32 MB", storage_nodes=2).start()
    env = {"MCL2_STATE_DIR": str(local.state_dir)}
    admin = AdminClient(local.metrics_url)

    done = mcl2("put", "--replicas", "2", "two", env=env)
    assert done.returncode == EXIT_OK, done.stderr.decode()
    info = mcl2("--json", "info", "two", env=env)
    assert info.returncode == EXIT_OK, info.stderr.decode()
    replicas = json.loads(info.stdout)["two"]["replicas"]
    segments = [r["segment"] for r in replicas if r["kind"] == "memory"]
    assert len(segments) == 2 and len(set(segments)) == 2, replicas
    assert set(segments) == set(local.segments())

    # Without the option: Mooncake's default, one copy.
    assert mcl2("put", "one", env=env).returncode == EXIT_OK
    assert len(memory_segments(admin, "one")) == 1

    # A batch, and a batch staged through registered L1 memory (put_from), both with copies
    # reported per key in --json.
    for extra, keys in (([], ["b1", "b2"]), (["--l1-size", "16MB"], ["s1", "s2"])):
        pairs = []
        for key in keys:
            path = tmp_path / key
            path.write_bytes(key.encode() * 100)
            pairs.append(f"{key}={path}")
        done = mcl2(*extra, "--json", "put", "--replicas", "2", *pairs, env=env)
        assert done.returncode == EXIT_OK, done.stderr.decode()
        records = json.loads(done.stdout)
        assert {k: (r["status"], r["replicas"]) for k, r in records.items()} == {
            k: ("stored", 2) for k in keys
        }
        for key in keys:
            assert len(set(memory_segments(admin, key))) == 2

    # More copies than nodes: Mooncake stores what fits without an error; mcl2 says so.
    short = mcl2("--json", "put", "--replicas", "3", "three", env=env)
    assert short.returncode == EXIT_OK, short.stderr.decode()
    assert json.loads(short.stdout)["three"]["replicas"] == 2
    assert b"three: stored with 2 of 3 replicas (fewer storage nodes" in short.stderr

    # An --overwrite of a value of the same size keeps its copies (rewritten in place);
    # mcl2 says so instead of claiming two.
    same = mcl2("put", "--overwrite", "--replicas", "2", "one", env=env)
    assert same.returncode == EXIT_OK
    assert b"one: stored with 1 of 2 replicas" in same.stderr
    assert b"replaced a value of the same size" in same.stderr
    assert len(memory_segments(admin, "one")) == 1

    bad = mcl2("put", "--replicas", "0", "zero", env=env)
    assert bad.returncode == EXIT_USAGE
    assert b"'--replicas'" in bad.stderr and b"0 is not in the range" in bad.stderr
    assert admin.query_key("zero") is None


def test_put_replicas_in_the_shell_applies_to_that_put_only(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """The copies go with each call, so one shell client serves both kinds of put."""
    local = make_cluster("32 MB", storage_nodes=2).start()
    value = tmp_path / "value"
    value.write_bytes(b"shell value")
    lines = f"put --replicas 2 copied {value}\nput plain {value}\n".encode()
    done = mcl2("shell", env={"MCL2_STATE_DIR": str(local.state_dir)}, stdin=lines)
    assert done.returncode == EXIT_OK, done.stderr.decode()
    admin = AdminClient(local.metrics_url)
    assert len(set(memory_segments(admin, "copied"))) == 2
    assert len(memory_segments(admin, "plain")) == 1


# -- --cluster-id ---------------------------------------------------------------------------


def test_cluster_id_option_becomes_the_config_key_and_overrides_the_config() -> None:
    settings = Settings(
        master="etcd://127.0.0.1:2379",
        metadata_server="http://127.0.0.1:8080/metadata",
        config='{"cluster_id": "from-json"}',
        cluster_id="from-option",
    )
    assert settings.store_config().setup_config["cluster_id"] == "from-option"
    settings.cluster_id = None
    assert settings.store_config().setup_config["cluster_id"] == "from-json"


@pytest.mark.parametrize("value", ["", "  ", "two words", "tab\there"])
def test_a_cluster_id_that_cannot_be_one_is_a_usage_error(value: str) -> None:
    result = CliRunner().invoke(cli, ["--cluster-id", value, "exists", "k"])
    assert result.exit_code == EXIT_USAGE
    assert "Invalid value for '--cluster-id'" in result.output
    assert "is not a cluster id" in result.output


@needs_etcd
def test_cluster_id_option_reaches_an_ha_master_without_an_environment_variable(
    make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    local = make_cluster("32 MB", ha=True, masters=1, client_ttl=2).start()
    assert local.master_addr.startswith("etcd://127.0.0.1:")
    cluster_id = str(local.cluster_id)
    where = ["--master", local.master_addr, "--metadata-server", local.metadata_server]
    env = {"MCL2_STATE_DIR": str(tmp_path / "no-local-cluster")}

    done = mcl2(*where, "--cluster-id", cluster_id, "put", "ha-key", env=env, stdin=b"via etcd")
    assert done.returncode == EXIT_OK, done.stderr.decode()
    got = mcl2(*where, "get", "ha-key", env={**env, "MCL2_CLUSTER_ID": cluster_id})
    assert got.returncode == EXIT_OK and got.stdout == b"via etcd", got.stderr.decode()

    # Without it Mooncake's setup fails (INTERNAL_ERROR); the message says what is missing.
    missing = mcl2(*where, "exists", "ha-key", env=env)
    assert missing.returncode == EXIT_ERROR
    assert b"--cluster-id ID or MCL2_CLUSTER_ID" in missing.stderr, missing.stderr
    wrong = mcl2(*where, "--cluster-id", "not-this-one", "exists", "ha-key", env=env)
    assert wrong.returncode == EXIT_ERROR
    assert b"cluster id 'not-this-one': is it the -cluster_id" in wrong.stderr, wrong.stderr
