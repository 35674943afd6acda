"""mcl2's options and configs, where it finds the cluster, its usage errors and
``cluster up/status/down``, run in-process with click's CliRunner."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest
from cli_helpers import (
    clean_env,
    free_port,
)
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

from mooncake_cffi.cluster import LocalCluster

# -- where the cluster is -----------------------------------------------------------------------


def test_options_after_the_command_override_the_environment(
    cluster: LocalCluster, key: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    env = clean_env(
        MCL2_MASTER="127.0.0.1:1",  # wrong on purpose
        MCL2_METADATA_SERVER=cluster.metadata_server,
        MCL2_STATE_DIR=str(tmp_path),
    )
    result = runner.invoke(cli, ["exists", key, "--master", cluster.master_addr], env=env)
    assert result.exit_code == EXIT_NOT_FOUND, result.output


def test_config_accepts_lmcache_adapter_json_inline_and_from_a_file(
    cluster: LocalCluster, key: str, tmp_path: Path
) -> None:
    adapter = {
        "type": "mooncake_store",
        "num_workers": 2,
        "per_op_workers": {"lookup": 1, "retrieve": 1, "store": 1},
        "local_hostname": "127.0.0.1",
        "metadata_server": cluster.metadata_server,
        "master_server_addr": cluster.master_addr,
        "protocol": "tcp",
        "global_segment_size": "3221225472",
        "local_buffer_size": 16777216,
    }
    runner = CliRunner()
    env = clean_env(MCL2_STATE_DIR=str(tmp_path))
    inline = runner.invoke(cli, ["--config", json.dumps(adapter), "put", key], input=b"v", env=env)
    assert inline.exit_code == EXIT_OK, inline.output

    path = tmp_path / "l2.json"
    path.write_text(json.dumps([{"type": "other"}, adapter]))
    from_file = runner.invoke(cli, ["--config", str(path), "exists", key], env=env)
    assert from_file.exit_code == EXIT_OK, from_file.output

    from_env = runner.invoke(cli, ["exists", key], env={**env, "MCL2_CONFIG": str(path)})
    assert from_env.exit_code == EXIT_OK, from_env.output


def test_config_warns_about_a_misspelled_key(cluster: LocalCluster, key: str) -> None:
    config = {
        "local_hostname": "127.0.0.1",
        "metadata_server": cluster.metadata_server,
        "master_server_addr": cluster.master_addr,
        "master_server_address": "127.0.0.1:9",
    }
    result = CliRunner().invoke(
        cli, ["--config", json.dumps(config), "exists", key], env=clean_env()
    )
    assert result.exit_code == EXIT_NOT_FOUND, result.output
    assert "did you mean 'master_server_addr'" in result.stderr


def test_invalid_config_is_a_usage_error() -> None:
    runner = CliRunner()
    bad_json = runner.invoke(cli, ["--config", "{nope", "exists", "k"], env=clean_env())
    assert bad_json.exit_code == EXIT_USAGE
    assert "invalid JSON" in bad_json.stderr
    no_file = runner.invoke(cli, ["--config", "/no/such/file", "exists", "k"], env=clean_env())
    assert no_file.exit_code == EXIT_USAGE
    bad_value = runner.invoke(
        cli, ["--config", '{"num_workers": 0}', "exists", "k"], env=clean_env()
    )
    assert bad_value.exit_code == EXIT_USAGE
    assert "num_workers must be a positive integer" in bad_value.stderr


def test_without_a_cluster_the_message_says_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["exists", "k"], env=clean_env(MCL2_STATE_DIR=str(tmp_path / "empty"))
    )
    assert result.exit_code == EXIT_ERROR
    assert "no local cluster" in result.stderr
    assert "mcl2 cluster up" in result.stderr


def test_unreachable_master_fails_fast_naming_the_address(cluster: LocalCluster) -> None:
    port = free_port()
    started = time.monotonic()
    result = CliRunner().invoke(
        cli,
        [
            "--master",
            f"127.0.0.1:{port}",
            "--metadata-server",
            cluster.metadata_server,
            "exists",
            "k",
        ],
        env=clean_env(),
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == EXIT_ERROR
    assert f"127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.output
    assert elapsed < 5.0


def test_unreachable_metadata_server_fails_fast_naming_it(cluster: LocalCluster) -> None:
    port = free_port()
    result = CliRunner().invoke(
        cli,
        [
            "--master",
            cluster.master_addr,
            "--metadata-server",
            f"http://127.0.0.1:{port}/metadata",
            "exists",
            "k",
        ],
        env=clean_env(),
    )
    assert result.exit_code == EXIT_ERROR
    assert f"127.0.0.1:{port}" in result.stderr


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--no-such-option"],
        ["nosuchcommand"],
        ["get"],
        ["get", "a", "b"],
        ["get", "a", "-o", "x", "-d", "y"],
        ["get", "a", "--json"],
        ["exists"],
        ["rm"],
        ["put", "a=x", "a=y"],
        ["--connect-timeout", "soon", "exists", "k"],
        ["cluster", "up", "--segment-size", "64 MiBs"],
        ["cluster", "up", "--segment-size", "0"],
        ["cluster", "up", "--timeout", "30"],
        ["cluster", "up", "--wait", "nan"],
        ["--l1-size", "lots", "exists", "k"],
        ["--timeout", "nan", "exists", "k"],
        ["--timeout", "inf", "exists", "k"],
        ["exists", "k", "--connect-timeout", "nan"],
    ],
)
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, args, env=clean_env(MCL2_STATE_DIR=str(tmp_path)))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


def test_size_options_take_the_same_units_everywhere(tmp_path: Path) -> None:
    from mooncake_cffi.cli.cluster_cmd import mooncake_size
    from mooncake_cffi.cli.options import SIZE

    env = clean_env(MCL2_STATE_DIR=str(tmp_path))
    for text, size in [("64KiB", 64 << 10), ("1 GB", 1 << 30), ("512MiB", 512 << 20)]:
        assert SIZE.convert(text, None, None) == size
        for command in (["--l1-size", text, "exists", "k"], ["bench", "--size", text]):
            result = CliRunner().invoke(cli, command, env=env)
            # Past the parsing: what stops it is that no cluster runs.
            assert result.exit_code == EXIT_ERROR, (command, result.output)
            assert "no local cluster" in result.stderr
    assert mooncake_size("512MiB") == str(512 << 20)  # Mooncake reads MiB as 0
    assert mooncake_size("1 GB") == "1 GB"  # Mooncake's own form goes as it is


def test_cluster_up_timeout_is_refused_pointing_to_wait(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["cluster", "up", "--timeout", "30"], env=clean_env(MCL2_STATE_DIR=str(tmp_path))
    )
    assert result.exit_code == EXIT_USAGE
    assert "--wait SECONDS" in result.stderr and "deadline of each store operation" in result.stderr
    assert not (tmp_path / "state.json").exists()


def test_put_without_file_on_a_terminal_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    main_module = importlib.import_module("mooncake_cffi.cli.put_cmd")
    monkeypatch.setattr(main_module, "stdin_is_terminal", lambda: True)
    result = CliRunner().invoke(cli, ["put", "k"], env=clean_env())
    assert result.exit_code == EXIT_USAGE
    assert "stdin is a terminal" in result.stderr


# -- the local cluster ---------------------------------------------------------------------------


@pytest.mark.own_cluster  # `mcl2 cluster up`: no fixture marks it
def test_cluster_up_status_down(tmp_path: Path) -> None:
    runner = CliRunner()
    env = clean_env(MCL2_STATE_DIR=str(tmp_path / "state"))
    try:
        # 64MiB, which Mooncake would read as 0, reaches it in bytes.
        up = runner.invoke(
            cli, ["cluster", "up", "--segment-size", "64MiB", "--wait", "60"], env=env
        )
        assert up.exit_code == EXIT_OK, up.output
        assert "segment 64.0 MiB" in up.stdout
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        assert state["segment_size"] == str(64 << 20)

        again = runner.invoke(cli, ["cluster", "up"], env=env)
        assert again.exit_code == EXIT_OK
        assert "already running" in again.stdout

        status = runner.invoke(cli, ["cluster", "status", "--json"], env=env)
        assert status.exit_code == EXIT_OK, status.output
        info = json.loads(status.stdout)
        assert info["healthy"] is True
        assert info["memory"]["total_bytes"] == 64 << 20
        assert info["pids"] == state["pids"]

        human = runner.invoke(cli, ["cluster", "status"], env=env)
        assert "healthy" in human.stdout and "keys" in human.stdout

        # With no connection options the data commands use this cluster.
        put = runner.invoke(cli, ["put", "local-key"], input=b"local", env=env)
        assert put.exit_code == EXIT_OK, put.output
        assert runner.invoke(cli, ["get", "local-key"], env=env).stdout_bytes == b"local"
    finally:
        down = runner.invoke(cli, ["cluster", "down"], env=env)
    assert down.exit_code == EXIT_OK, down.output
    assert "stopped" in down.stdout
    for pid in state["pids"].values():
        assert not _alive(pid)
    gone = runner.invoke(cli, ["cluster", "status"], env=env)
    assert gone.exit_code == EXIT_ERROR
    assert runner.invoke(cli, ["cluster", "down"], env=env).exit_code == EXIT_OK


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"
