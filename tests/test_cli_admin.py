"""mcl2 ls, info, segments, metrics, bench and shell against real local clusters.

In-process runs use click's CliRunner; the doctor's and bench's exit paths that depend on the
console script (fast exit, signals) run the installed ``mcl2``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import MCL2, clean_env, cluster_env, process_env
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

from mooncake_cffi import Client
from mooncake_cffi.admin import AdminClient
from mooncake_cffi.cluster import LocalCluster, parse_size

needs_console = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.client_config()) as c:
        yield c


@pytest.fixture
def prefix(client: Client, cluster: LocalCluster) -> Iterator[str]:
    p = f"cliadm-{uuid.uuid4().hex[:10]}/"
    yield p
    left = AdminClient(cluster.metrics_url).keys(p)
    if left:
        client.batch_remove(left, force=True)


# -- ls ------------------------------------------------------------------------------------


def test_ls_lists_the_prefix_sorted_and_limits(run, client: Client, prefix: str) -> None:
    keys = [f"{prefix}{name}" for name in ("b", "a", "c/1", "c/0")]
    client.batch_put(keys, [b"12345"] * 4)
    result = run("ls", prefix)
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.splitlines() == sorted(keys)
    limited = run("ls", prefix, "--limit", "2")
    assert limited.stdout.splitlines() == sorted(keys)[:2]
    long = run("ls", "-l", f"{prefix}c/")
    assert long.stdout.splitlines() == [f"{prefix}c/0\t5\t1", f"{prefix}c/1\t5\t1"]


def test_ls_with_nothing_matching_exits_0_and_prints_nothing(run, prefix: str) -> None:
    result = run("ls", f"{prefix}nothing-here")
    assert result.exit_code == EXIT_OK
    assert result.stdout == ""
    as_json = run("ls", "--json", f"{prefix}nothing-here")
    assert json.loads(as_json.stdout) == []


def test_ls_json_parses_with_and_without_long(run, client: Client, prefix: str) -> None:
    client.batch_put([f"{prefix}x", f"{prefix}y"], [b"1", b"22"])
    plain = json.loads(run("ls", "--json", prefix).stdout)
    assert plain == [f"{prefix}x", f"{prefix}y"]
    long = json.loads(run("ls", "-l", "--json", prefix).stdout)
    assert long == [
        {"key": f"{prefix}x", "size": 1, "replicas": 1},
        {"key": f"{prefix}y", "size": 2, "replicas": 1},
    ]


def test_ls_of_a_few_thousand_keys_lists_each_once(run, client: Client, prefix: str) -> None:
    keys = [f"{prefix}{i:06d}" for i in range(3000)]
    for i in range(0, len(keys), 1000):
        client.batch_put(keys[i : i + 1000], [b"v"] * 1000)
    result = run("ls", prefix)
    assert result.stdout.splitlines() == keys
    assert run("ls", "--limit", "0", prefix).stdout == ""
    long = run("ls", "-l", "--limit", "1500", prefix).stdout.splitlines()
    assert len(long) == 1500 and all(line.endswith("\t1\t1") for line in long)


# -- info ----------------------------------------------------------------------------------


def test_info_shows_size_and_replicas_and_exits_3_for_a_missing_key(
    run, client: Client, prefix: str, cluster: LocalCluster
) -> None:
    client.put(f"{prefix}k", b"z" * 2048)
    segment = AdminClient(cluster.metrics_url).segments()[0]
    result = run("info", f"{prefix}k", f"{prefix}missing")
    assert result.exit_code == EXIT_NOT_FOUND
    assert "size      2.0 KiB (2048 bytes)" in result.stdout
    assert f"segment {segment.name}" in result.stdout
    assert f"{prefix}missing: not found" in result.stdout
    as_json = run("info", "--json", f"{prefix}k")
    assert as_json.exit_code == EXIT_OK
    record = json.loads(as_json.stdout)[f"{prefix}k"]
    assert record["status"] == "found" and record["size"] == 2048
    assert record["replicas"][0]["segment"] == segment.name
    assert record["replicas"][0]["status"] == "OK"


def test_info_of_a_key_the_admin_api_cannot_carry_is_an_error_naming_it(run, prefix: str) -> None:
    result = run("info", f"{prefix}with space")
    assert result.exit_code == EXIT_ERROR
    assert "with space" in result.stderr and "cannot carry" in result.stderr


# -- segments and metrics ---------------------------------------------------------------------


def test_segments_table_and_json(run, cluster: LocalCluster) -> None:
    table = run("segments")
    assert table.exit_code == EXIT_OK
    assert table.stdout.splitlines()[0].split() == [
        "NAME",
        "ENDPOINT",
        "PROTOCOL",
        "CAPACITY",
        "USED",
        "USE%",
        "STATUS",
    ]
    (segment,) = json.loads(run("segments", "--json").stdout)
    assert segment["capacity_bytes"] == parse_size(cluster.segment_size)
    assert segment["status"] == "OK"
    assert segment["name"] in table.stdout


def test_metrics_table_raw_and_json(run, client: Client, prefix: str) -> None:
    client.put(f"{prefix}m", b"m" * 100)
    table = run("metrics")
    assert table.exit_code == EXIT_OK
    names = [line.split()[0] for line in table.stdout.splitlines()]
    assert names == [
        "keys",
        "memory",
        "segments",
        "clients",
        "requests",
        "failures",
        "evictions",
        "health",
    ]
    raw = run("metrics", "--raw")
    assert "# TYPE master_key_count" in raw.stdout
    figures = json.loads(run("metrics", "--json").stdout)
    assert figures["keys"] >= 1 and figures["health"]["status"] == "ok"
    assert figures["memory"]["used_bytes"] >= 100
    assert run("metrics", "--raw", "--json").exit_code == EXIT_USAGE


def test_admin_defaults_to_the_local_cluster(cluster: LocalCluster) -> None:
    result = CliRunner().invoke(
        cli, ["segments", "--json"], env=clean_env(MCL2_STATE_DIR=str(cluster.state_dir))
    )
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)[0]["capacity_bytes"] == parse_size(cluster.segment_size)


def test_admin_defaults_to_port_9003_on_the_masters_host(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = CliRunner().invoke(
        cli,
        ["--master", f"127.0.0.1:{port}", "--connect-timeout", "0.5", "metrics"],
        env=clean_env(MCL2_STATE_DIR=str(tmp_path)),
    )
    assert result.exit_code == EXIT_ERROR
    assert "http://127.0.0.1:9003" in result.stderr


def test_admin_commands_without_any_cluster_say_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ls"], env=clean_env(MCL2_STATE_DIR=str(tmp_path)))
    assert result.exit_code == EXIT_ERROR
    assert "mcl2 cluster up" in result.stderr and "--admin" in result.stderr


def test_an_invalid_admin_url_is_a_usage_error(run) -> None:
    result = run("--admin", "ftp://x", "ls")
    assert result.exit_code == EXIT_USAGE
    assert "--admin" in result.stderr


# -- bench ---------------------------------------------------------------------------------


def test_bench_reports_every_op_and_removes_its_keys(run, prefix: str) -> None:
    result = run(
        "bench", "--keys", "300", "--size", "1KiB", "--batch", "16", "-c", "2",
        "--prefix", prefix, "--json",
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.stdout)
    assert [r["op"] for r in report["results"]] == ["put", "get", "exists"]
    for r in report["results"]:
        assert r["keys"] == 300 and r["failed"] == 0
        assert r["ops_per_s"] > 0
        lat = r["latency_us"]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    assert report["results"][0]["mib_per_s"] > 0
    assert report["removed"] == 300 and report["left_behind"] == 0
    assert run("ls", prefix).stdout == ""


def test_bench_repeat_reads_every_key_r_times_after_a_warm_up(run, prefix: str) -> None:
    result = run(
        "bench", "--ops", "put,get,exists", "-n", "32", "-b", "8", "-r", "3", "--size", "512",
        "--prefix", prefix, "--json",
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.stdout)
    assert report["repeat"] == 3
    assert {r["op"]: r["keys"] for r in report["results"]} == {"put": 32, "get": 96, "exists": 96}
    # 32 x 512 B of puts: warmed up with one value of 1 MiB.
    assert report["warmup"] == {
        "keys": 1, "value_size": 1 << 20, "bytes": 1 << 20, "failed": 0, "left_behind": 0,
        "seconds": report["warmup"]["seconds"],
    }  # fmt: skip
    assert report["removed"] == 32 and report["left_behind"] == 0
    assert run("ls", prefix).stdout == ""  # the warm-up keys are gone too


def test_bench_no_warmup_writes_only_the_timed_keys(run, prefix: str) -> None:
    result = run("bench", "--no-warmup", "-n", "10", "--prefix", prefix, "--json")
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.stdout)
    assert report["warmup"] is None and report["removed"] == 10


def test_bench_table_has_one_row_per_chosen_op(run, prefix: str) -> None:
    result = run("bench", "--ops", "get", "-n", "20", "--prefix", prefix)
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.splitlines()[1].startswith("warm-up: put and removed 1 x 1.0 MiB in ")
    rows = [line.split()[0] for line in result.stdout.splitlines()[2:-1]]
    assert rows == ["op", "get"]
    assert result.stdout.splitlines()[-1] == "removed 20 keys"


def test_bench_refuses_a_prefix_that_holds_keys(run, client: Client, prefix: str) -> None:
    client.put(f"{prefix}mine", b"keep me")
    result = run("bench", "-n", "10", "--prefix", prefix)
    assert result.exit_code == EXIT_ERROR
    assert "already exist under the prefix" in result.stderr
    assert client.get(f"{prefix}mine") == b"keep me"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ops", "put,scan"], "unknown operation 'scan'"),
        (["--ops", "get,get"], "named twice"),
        (["--size", "4 parsecs"], "invalid size"),
        (["--keys", "0"], "--keys"),
    ],
)
def test_bench_bad_options_are_usage_errors(run, args: list[str], message: str) -> None:
    result = run("bench", *args)
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr


@needs_console
def test_bench_interrupted_removes_what_it_wrote_and_exits_130(
    cluster: LocalCluster, prefix: str
) -> None:
    env = process_env(**cluster_env(cluster))
    proc = subprocess.Popen(
        [str(MCL2), "bench", "-n", "200000", "--size", "64", "--prefix", prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    admin = AdminClient(cluster.metrics_url)
    deadline = time.monotonic() + 30
    while not admin.keys(prefix.encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"interrupted (SIGINT): removed the" in err
    left = admin.keys(prefix.encode())
    assert left == [], (err.decode(errors="replace"), [admin.query_key(k) for k in left[:3]])


# -- shell ---------------------------------------------------------------------------------


def test_shell_runs_lines_with_one_client(run, prefix: str, tmp_path: Path) -> None:
    value = tmp_path / "v"
    value.write_bytes(b"shell value")
    lines = [
        f"put {prefix}a {value}",
        f"exists {prefix}a {prefix}missing",
        f"ls {prefix}",
        f"'get' {prefix}a",
        "no-such-command",
        'exists "unterminated',
        f"rm --force {prefix}a",
        "-q exists " + prefix + "a",
        "quit",
        "ls never-run",
    ]
    result = run("-v", "shell", input="\n".join(lines) + "\n")
    out = result.stdout
    assert f"{prefix}a\ttrue\n{prefix}missing\tfalse\n" in out
    assert f"{prefix}a\n" in out and "shell value" in out
    assert "No such command 'no-such-command'" in result.stderr
    assert "No closing quotation" in result.stderr
    assert result.stderr.count("registered as") == 1  # one client for every line
    assert result.exit_code == EXIT_NOT_FOUND  # the last command: the key was removed
    assert "never-run" not in out


def test_shell_refuses_values_from_its_own_stdin_and_says_what_to_do(run, prefix: str) -> None:
    lines = [f"put {prefix}x -", f"put {prefix}y", f"exists --keys-from - {prefix}x"]
    result = run("shell", input="\n".join(lines) + "\n")
    assert "the value is empty" not in result.stderr
    assert result.stderr.count("inside mcl2 shell, standard input holds the shell's lines") == 3
    assert "give a FILE" in result.stderr
    assert result.exit_code == EXIT_USAGE
    assert run("exists", f"{prefix}x").exit_code == EXIT_NOT_FOUND  # nothing was stored


def test_shell_takes_json_for_every_line(run, prefix: str, tmp_path: Path) -> None:
    value = tmp_path / "v"
    value.write_bytes(b"12345")
    for where in (["--json", "shell"], ["shell", "--json"]):
        lines = [f"put --overwrite {prefix}j {value}", f"stat {prefix}j"]
        result = run(*where, input="\n".join(lines) + "\n")
        assert result.exit_code == EXIT_OK, result.output
        decoder = json.JSONDecoder()
        text, docs = result.stdout.strip(), []
        while text:
            doc, end = decoder.raw_decode(text)
            docs.append(doc)
            text = text[end:].strip()
        assert docs[0][f"{prefix}j"]["status"] == "stored"
        assert docs[1] == {f"{prefix}j": 5}
