"""The mcl2 command line, run in-process with click's CliRunner against a real local cluster.

Every test uses keys of its own (the session cluster is shared).  The console script's fast
exit (close_for_exit + os._exit) only happens in a separate process: the tests at the end run
the installed ``mcl2`` for that.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

from mooncake_cffi.cluster import LocalCluster

REPO = Path(__file__).resolve().parent.parent
MAN_PAGE = REPO / "man" / "mcl2.1"
MCL2 = Path(sys.executable).with_name("mcl2")
ENV_VARS = (
    "MCL2_MASTER",
    "MCL2_METADATA_SERVER",
    "MCL2_PROTOCOL",
    "MCL2_HOSTNAME",
    "MCL2_CONFIG",
    "MCL2_L1_SIZE",
    "MCL2_CONNECT_TIMEOUT",
    "MCL2_STATE_DIR",
    "MCL2_ADMIN",
)


# -- helpers -------------------------------------------------------------------------------


def clean_env(**values: str) -> dict[str, str | None]:
    """An environment for CliRunner: every MCL2_* variable unset unless given."""
    env: dict[str, str | None] = {name: None for name in ENV_VARS}
    env.update(values)
    return env


@pytest.fixture
def run(cluster: LocalCluster, tmp_path: Path):
    """Invoke mcl2 in-process against the session cluster (through MCL2_* variables)."""
    runner = CliRunner()
    env = clean_env(
        MCL2_MASTER=cluster.master_addr,
        MCL2_METADATA_SERVER=cluster.metadata_server,
        MCL2_STATE_DIR=str(tmp_path / "no-state"),
    )

    def invoke(*args: str, input: bytes | str | None = None, **extra_env: str) -> Result:
        return runner.invoke(cli, list(args), input=input, env={**env, **extra_env})

    return invoke


@pytest.fixture
def key() -> Iterator[str]:
    """A fresh key prefix for one test."""
    yield f"cli-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def blob(n: int) -> bytes:
    """Binary data with every byte value, CR/LF and NULs included."""
    return (bytes(range(256)) * (n // 256 + 1))[:n] + os.urandom(17)


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = (*prefix, name)
        yield path
        if isinstance(command, click.Group):
            yield from command_paths(command, path)


def command_for(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found
    return command


# -- put / get round trips -------------------------------------------------------------------


def test_put_file_then_get_to_stdout_is_byte_exact(run, key: str, tmp_path: Path) -> None:
    data = blob(1 << 20)
    src = tmp_path / "src.bin"
    src.write_bytes(data)

    put = run("put", key, str(src))
    assert put.exit_code == EXIT_OK, put.output
    assert f"{key}: stored" in put.stderr

    got = run("get", key)
    assert got.exit_code == EXIT_OK, got.stderr
    assert got.stdout_bytes == data


def test_stdin_to_stdout_round_trip(run, key: str) -> None:
    data = b"\x00\r\n\xffline\n" * 1000
    assert run("put", key, input=data).exit_code == EXIT_OK
    assert run("put", f"{key}-dash", "-", input=data).exit_code == EXIT_OK
    assert run("get", key).stdout_bytes == data
    assert run("get", f"{key}-dash", "-o", "-").stdout_bytes == data


def test_get_to_file_writes_the_value(run, key: str, tmp_path: Path) -> None:
    data = blob(4096)
    assert run("put", key, input=data).exit_code == EXIT_OK
    out = tmp_path / "out.bin"
    result = run("get", key, "-o", str(out))
    assert result.exit_code == EXIT_OK, result.output
    assert out.read_bytes() == data


def test_existing_key_is_reported_and_kept(run, key: str) -> None:
    assert run("put", key, input=b"first").exit_code == EXIT_OK
    again = run("put", key, input=b"second")
    assert again.exit_code == EXIT_OK
    assert f"{key}: exists, kept (use --overwrite to replace)" in again.stderr
    assert run("get", key).stdout_bytes == b"first"


def test_overwrite_replaces_the_value(run, key: str) -> None:
    assert run("put", key, input=b"first").exit_code == EXIT_OK
    result = run("put", "--overwrite", key, input=b"second, longer")
    assert result.exit_code == EXIT_OK, result.output
    assert run("get", key).stdout_bytes == b"second, longer"


def test_several_pairs_go_as_one_batch_and_get_into_a_directory(
    run, key: str, tmp_path: Path
) -> None:
    files = {}
    for i in range(3):
        path = tmp_path / f"f{i}"
        path.write_bytes(blob(1000 + i))
        files[f"{key}-{i}"] = path
    result = run("put", *[f"{k}={p}" for k, p in files.items()])
    assert result.exit_code == EXIT_OK, result.output
    assert "stored 3 of 3 keys" in result.stderr

    out = tmp_path / "out"
    got = run("get", *files, "-d", str(out))
    assert got.exit_code == EXIT_OK, got.output
    for k, path in files.items():
        assert (out / k).read_bytes() == path.read_bytes()


def test_put_dir_with_prefix(run, key: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"A")
    (src / "b").write_bytes(b"BB")
    (src / "sub").mkdir()  # not a regular file: skipped
    result = run("put", "--dir", str(src), "--prefix", f"{key}/")
    assert result.exit_code == EXIT_OK, result.output
    assert run("get", f"{key}/b").stdout_bytes == b"BB"
    assert run("exists", f"{key}/sub").exit_code == EXIT_NOT_FOUND


def test_keys_from_stdin_for_a_large_batch(run, key: str, tmp_path: Path) -> None:
    n = 600  # more than two batches of 256
    lines = []
    for i in range(n):
        path = tmp_path / f"v{i}"
        path.write_bytes(f"value {i}".encode())
        sep = "\t" if i % 2 else "="
        lines.append(f"{key}-{i}{sep}{path}")
    put = run("put", "--keys-from", "-", input="\n".join(lines) + "\n")
    assert put.exit_code == EXIT_OK, put.output
    assert f"stored {n} of {n} keys" in put.stderr

    keys = "".join(f"{key}-{i}\n" for i in range(n))
    exists = run("exists", "--keys-from", "-", input=keys)
    assert exists.exit_code == EXIT_OK
    assert exists.stdout.count("\ttrue\n") == n

    out = tmp_path / "out"
    got = run("get", "--keys-from", "-", "-d", str(out), input=keys)
    assert got.exit_code == EXIT_OK, got.output
    assert (out / f"{key}-599").read_bytes() == b"value 599"
    assert len(list(out.iterdir())) == n

    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(keys)
    rm = run("rm", "--force", "--keys-from", str(keys_file))
    assert rm.exit_code == EXIT_OK, rm.output
    assert f"removed {n} of {n} keys" in rm.stderr


def test_l1_staging_round_trips_and_splits_batches(run, key: str, tmp_path: Path) -> None:
    """--l1-size stages transfers through registered memory (what rdma needs), over tcp."""
    files = {}
    for i in range(6):
        path = tmp_path / f"s{i}"
        path.write_bytes(blob(700_000 + i))
        files[f"{key}-{i}"] = path
    put = run("--l1-size", "1MB", "put", *[f"{k}={p}" for k, p in files.items()])
    assert put.exit_code == EXIT_OK, put.output
    out = tmp_path / "out"
    got = run("get", *files, "-d", str(out), "--l1-size", "2MB")
    assert got.exit_code == EXIT_OK, got.output
    for k, path in files.items():
        assert (out / k).read_bytes() == path.read_bytes()
    single = run("--l1-size", "1MB", "get", f"{key}-0")
    assert single.stdout_bytes == files[f"{key}-0"].read_bytes()

    too_small = run("--l1-size", "512KB", "get", f"{key}-0")
    assert too_small.exit_code == EXIT_ERROR
    assert "--l1-size" in too_small.stderr


def test_empty_input_file_is_refused(run, key: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    result = run("put", key, str(empty))
    assert result.exit_code == EXIT_USAGE
    assert "cannot store 0 bytes" in result.stderr


# -- exists / stat / missing keys --------------------------------------------------------------


def test_exists_prints_one_line_per_key_and_exits_3_for_a_missing_one(run, key: str) -> None:
    assert run("put", key, input=b"x").exit_code == EXIT_OK
    present = run("exists", key)
    assert present.exit_code == EXIT_OK
    assert present.stdout == f"{key}\ttrue\n"

    mixed = run("exists", key, f"{key}-missing")
    assert mixed.exit_code == EXIT_NOT_FOUND
    assert mixed.stdout == f"{key}\ttrue\n{key}-missing\tfalse\n"

    quiet = run("-q", "exists", f"{key}-missing")
    assert quiet.exit_code == EXIT_NOT_FOUND
    assert quiet.stdout == ""


def test_get_of_a_missing_key_exits_3(run, key: str, tmp_path: Path) -> None:
    result = run("get", f"{key}-missing")
    assert result.exit_code == EXIT_NOT_FOUND
    assert "not found" in result.stderr
    assert result.stdout_bytes == b""

    out = tmp_path / "never"
    assert run("get", f"{key}-missing", "-o", str(out)).exit_code == EXIT_NOT_FOUND
    assert not out.exists()


def test_get_several_keys_writes_the_others_and_exits_3(run, key: str, tmp_path: Path) -> None:
    assert run("put", key, input=b"here").exit_code == EXIT_OK
    out = tmp_path / "out"
    result = run("get", key, f"{key}-missing", "-d", str(out))
    assert result.exit_code == EXIT_NOT_FOUND
    assert (out / key).read_bytes() == b"here"
    assert f"{key}-missing: not found" in result.stderr


def test_stat_prints_sizes(run, key: str) -> None:
    assert run("put", key, input=b"12345").exit_code == EXIT_OK
    result = run("stat", key, f"{key}-missing")
    assert result.exit_code == EXIT_NOT_FOUND
    assert result.stdout == f"{key}\t5\n{key}-missing\t-\n"


def test_get_refuses_keys_that_are_not_file_names(run, key: str, tmp_path: Path) -> None:
    result = run("get", f"{key}/x", "..", "-d", str(tmp_path / "out"))
    assert result.exit_code == EXIT_ERROR
    assert "cannot be used as a file name" in result.stderr


# -- rm ----------------------------------------------------------------------------------------


def test_rm_under_a_read_lease_explains_and_force_removes(run, key: str) -> None:
    assert run("put", key, input=b"leased").exit_code == EXIT_OK
    assert run("get", key).exit_code == EXIT_OK  # the read takes a ~10 s lease

    refused = run("rm", key)
    assert refused.exit_code == EXIT_ERROR
    assert "OBJECT_HAS_LEASE" in refused.stderr
    assert "--force" in refused.stderr
    assert run("exists", key).exit_code == EXIT_OK

    forced = run("rm", "--force", key)
    assert forced.exit_code == EXIT_OK, forced.output
    assert f"{key}: removed" in forced.stderr
    assert run("exists", key).exit_code == EXIT_NOT_FOUND


def test_rm_of_a_missing_key_is_fine_unless_strict(run, key: str) -> None:
    relaxed = run("rm", f"{key}-missing")
    assert relaxed.exit_code == EXIT_OK
    assert "absent" in relaxed.stderr
    assert run("rm", "--strict", f"{key}-missing").exit_code == EXIT_NOT_FOUND


# -- --json ------------------------------------------------------------------------------------


def test_json_output_parses(run, key: str, tmp_path: Path) -> None:
    assert run("put", key, input=b"abc").exit_code == EXIT_OK
    put = run("put", "--json", key, input=b"abc")
    assert json.loads(put.stdout) == {key: {"status": "exists", "bytes": 3}}

    exists = run("--json", "exists", key, f"{key}-missing")
    assert exists.exit_code == EXIT_NOT_FOUND
    assert json.loads(exists.stdout) == {key: True, f"{key}-missing": False}

    got = run("get", key, "-d", str(tmp_path), "--json")
    record = json.loads(got.stdout)[key]
    assert record["status"] == "written" and record["bytes"] == 3

    rm = run("rm", "--force", "--json", key, f"{key}-missing")
    assert json.loads(rm.stdout) == {
        key: {"status": "removed"},
        f"{key}-missing": {"status": "absent"},
    }


def test_json_rm_reports_a_lease(run, key: str) -> None:
    assert run("put", key, input=b"abc").exit_code == EXIT_OK
    assert run("exists", key).exit_code == EXIT_OK  # renews the lease
    assert run("get", key).exit_code == EXIT_OK
    rm = run("rm", "--json", key)
    assert rm.exit_code == EXIT_ERROR
    assert json.loads(rm.stdout)[key]["error"] == "OBJECT_HAS_LEASE"
    assert run("rm", "-f", key).exit_code == EXIT_OK


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
        ["cluster", "up", "--segment-size", "64 MiB"],
        ["--l1-size", "lots", "exists", "k"],
    ],
)
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, args, env=clean_env(MCL2_STATE_DIR=str(tmp_path)))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


def test_put_without_file_on_a_terminal_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    main_module = importlib.import_module("mooncake_cffi.cli.put_cmd")
    monkeypatch.setattr(main_module, "_stdin_is_terminal", lambda: True)
    result = CliRunner().invoke(cli, ["put", "k"], env=clean_env())
    assert result.exit_code == EXIT_USAGE
    assert "stdin is a terminal" in result.stderr


# -- the local cluster ---------------------------------------------------------------------------


def test_cluster_up_status_down(tmp_path: Path) -> None:
    runner = CliRunner()
    env = clean_env(MCL2_STATE_DIR=str(tmp_path / "state"))
    try:
        up = runner.invoke(cli, ["cluster", "up", "--segment-size", "64MB"], env=env)
        assert up.exit_code == EXIT_OK, up.output
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        assert state["segment_size"] == "64MB"

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


# -- help and the man page ------------------------------------------------------------------------


def test_every_command_has_help_and_is_in_the_man_page() -> None:
    man = MAN_PAGE.read_text()
    runner = CliRunner()
    paths = list(command_paths(cli))
    assert ("put",) in paths and ("cluster", "up") in paths
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"], env=clean_env())
        assert result.exit_code == EXIT_OK, (path, result.output)
        assert "Usage: " in result.stdout
        command = command_for(path)
        assert command.help, f"{' '.join(path)} has no help text"
        # "cluster up" appears as ".B cluster up", "put" as ".B put" / ".BI \"put \"".
        pattern = r"\b" + r"\s+".join(re.escape(p) for p in path) + r"\b"
        assert re.search(pattern, man), f"{' '.join(path)} is not in {MAN_PAGE}"


def test_every_option_and_environment_variable_is_in_the_man_page() -> None:
    man = MAN_PAGE.read_text().replace("\\-", "-")
    for path in [(), *command_paths(cli)]:
        command = command_for(path)
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            for opt in param.opts + param.secondary_opts:
                assert opt in man, f"{opt} ({' '.join(path) or 'mcl2'}) is not in the man page"
            if param.envvar:
                assert param.envvar in man
    for name in ENV_VARS:
        assert name in man
    for code in ("0", "1", "2", "3", "130", "141"):
        assert f".B {code}\n" in MAN_PAGE.read_text()


def test_the_man_page_renders(tmp_path: Path) -> None:
    groff = "/usr/bin/groff"
    if not Path(groff).exists():
        pytest.skip("groff is not installed")
    result = subprocess.run(
        [groff, "-man", "-ww", "-z", str(MAN_PAGE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stderr == ""


# -- the console script (fast exit) ------------------------------------------------------------


def console(*args: str, cluster: LocalCluster, input: bytes | None = None) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
    env.update(MCL2_MASTER=cluster.master_addr, MCL2_METADATA_SERVER=cluster.metadata_server)
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
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
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
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


def _entry_status(metadata_server: str, key: str) -> int:
    import urllib.error
    import urllib.request

    from mooncake_cffi._metadata import entry_url

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(entry_url(metadata_server, key), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_forget_client_deletes_what_a_client_registered(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    from mooncake_cffi._metadata import client_keys, forget_client

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
    assert [_entry_status(cluster.metadata_server, k) for k in keys] == [200, 200]

    assert forget_client(cluster.metadata_server, hostname) == keys
    assert [_entry_status(cluster.metadata_server, k) for k in keys] == [404, 404]
    assert forget_client(cluster.metadata_server, hostname) == []  # idempotent
    assert forget_client("http://127.0.0.1:1/metadata", hostname) == []  # never raises


def test_key_prefix_follows_the_metadata_cluster_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from mooncake_cffi._metadata import client_keys, key_prefix

    monkeypatch.delenv("MC_METADATA_CLUSTER_ID", raising=False)
    assert key_prefix() == "mooncake/"
    monkeypatch.setenv("MC_METADATA_CLUSTER_ID", "abc")
    assert client_keys("h:1") == ["mooncake/abc/ram/h:1", "mooncake/abc/rpc_meta/h:1"]


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_console_script_leaves_no_metadata_entries(cluster: LocalCluster, key: str) -> None:
    """mcl2 exits without Mooncake's teardown; its own entries must still be gone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
    env.update(MCL2_MASTER=cluster.master_addr, MCL2_METADATA_SERVER=cluster.metadata_server)
    result = subprocess.run(
        [str(MCL2), "-vv", "exists", key], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == EXIT_NOT_FOUND
    match = re.search(rb"registered as (\S+)", result.stderr)
    assert match, result.stderr[-2000:]
    hostname = match.group(1).decode()
    from mooncake_cffi._metadata import client_keys

    assert [_entry_status(cluster.metadata_server, k) for k in client_keys(hostname)] == [
        404,
        404,
    ]
