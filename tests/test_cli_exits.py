"""How mcl2 ends when things around it go wrong: a closed output pipe (JSON too), a closed
standard stream, keys that are not UTF-8 or hold a NUL byte, SIGINT and SIGTERM.  Most run
the installed console script (its exit path is the one users meet); the put-under-SIGINT
case runs in-process to land the signal inside the batch.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import MCL2, cluster_env, entry_status, process_env
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)
from mooncake_cffi.cli.interrupts import Terminated, held_signals
from process_helpers import wait_until

from mooncake_cffi import Client
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.metadata import client_keys

needs_console = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")


@pytest.fixture
def key() -> str:
    return f"exits-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.client_config()) as c:
        yield c


def env_for(cluster: LocalCluster) -> dict[str, str]:
    return process_env(**cluster_env(cluster))


# -- a closed output pipe ------------------------------------------------------------------


@needs_console
@pytest.mark.parametrize("command", ["get", "ls"])
def test_a_reader_that_goes_away_makes_the_exit_status_141(
    cluster: LocalCluster, client: Client, key: str, command: str
) -> None:
    """`mcl2 get big | head -c 100000` must not look like success under pipefail."""
    if command == "get":
        client.put(key, os.urandom(20 << 20))
        argv = [str(MCL2), "get", key]
    else:
        keys = [f"{key}/{i:06d}-{'x' * 50}" for i in range(5000)]  # ~300 KB listing
        for i in range(0, len(keys), 1000):
            client.batch_put(keys[i : i + 1000], [b"v"] * 1000)
        argv = [str(MCL2), "ls", key]
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(cluster)
        )
        assert proc.stdout is not None and proc.stderr is not None
        head = proc.stdout.read(100_000)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=30)
        assert len(head) == 100_000
        assert proc.returncode == EXIT_BROKEN_PIPE, err
        assert err == b""  # quiet, like any tool after SIGPIPE: no traceback
    finally:
        client.batch_remove(
            [key] if command == "get" else [f"{key}/{i:06d}-{'x' * 50}" for i in range(5000)],
            force=True,
        )


@needs_console
@pytest.mark.parametrize("command", ["exists", "stat"])
def test_json_into_a_reader_that_goes_away_exits_141(
    cluster: LocalCluster, key: str, command: str, tmp_path: Path
) -> None:
    """The JSON document goes through the same pipe-aware writer as every other result:
    `mcl2 --json exists --keys-from f | head -c 1000` is not a success (it was exit 3)."""
    keys = tmp_path / "keys"
    keys.write_text("".join(f"{key}-{i:05d}-{'x' * 80}\n" for i in range(5000)))  # ~0.5 MB
    proc = subprocess.Popen(
        [str(MCL2), "--json", command, "--keys-from", str(keys)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_for(cluster),
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(1000)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert head.startswith(b"{")
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert err == b""


# -- closed standard streams, keys Mooncake cannot hold --------------------------------------


def shell_line(command: str, cluster: LocalCluster) -> subprocess.CompletedProcess[bytes]:
    """``command`` run by bash, with ``mcl2`` the installed console script."""
    return subprocess.run(
        ["bash", "-c", command.replace("mcl2 ", f"{MCL2} ")],
        capture_output=True,
        env=env_for(cluster),
        timeout=60,
        check=False,
    )


@needs_console
@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("mcl2 exists --keys-from - <&-", b"standard input is closed"),
        ("mcl2 put {key} - <&-", b"standard input is closed"),
        ("mcl2 put {key} <&-", b"standard input is closed"),
        ("mcl2 get {key} >&-", b"standard output is closed"),
        ("mcl2 --json exists {key} >&-", b"standard output is closed"),
    ],
)
def test_a_closed_standard_stream_is_a_usage_error_naming_it(
    cluster: LocalCluster, key: str, command: str, says: bytes
) -> None:
    done = shell_line(command.format(key=key), cluster)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert says in done.stderr
    assert b"Traceback" not in done.stderr and b"AttributeError" not in done.stderr
    assert b"terminal" not in done.stderr


@needs_console
def test_quiet_exists_needs_no_standard_output(cluster: LocalCluster, key: str) -> None:
    assert shell_line(f"mcl2 -q exists {key} >&-", cluster).returncode == EXIT_NOT_FOUND


@needs_console
def test_a_nul_byte_in_a_keys_from_line_is_an_error_for_that_key_only(
    cluster: LocalCluster, client: Client, key: str, tmp_path: Path
) -> None:
    client.put(f"{key}-a", b"aa")
    bad = f"{key}-b\0c"
    keys = tmp_path / "keys"
    keys.write_bytes(f"{key}-a\n{bad}\n".encode())
    env = env_for(cluster)

    def mcl2(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(MCL2), *args], capture_output=True, env=env, timeout=60, check=False
        )

    for command in ("exists", "stat", "rm", "info"):
        force = ["--force"] if command == "rm" else []  # exists and stat left a read lease
        done = mcl2("--json", command, *force, "--keys-from", str(keys))
        assert done.returncode == EXIT_ERROR, (command, done.stderr)
        report = json.loads(done.stdout)
        assert report[bad]["status"] == "error", (command, report)
        assert "NUL" in report[bad]["error"], (command, report)
        assert b"Traceback" not in done.stderr
        if command == "exists":
            assert report[f"{key}-a"] is True  # the other key was asked about
        if command == "stat":
            assert report[f"{key}-a"] == 2
        if command == "rm":
            assert report[f"{key}-a"]["status"] == "removed"
            client.put(f"{key}-a", b"aa")
    text = mcl2("exists", "--keys-from", str(keys))
    assert text.returncode == EXIT_ERROR
    assert text.stdout == f"{key}-a\ttrue\n".encode()
    assert b"holds a NUL byte" in text.stderr

    out = tmp_path / "out"
    got = mcl2("--json", "get", "--keys-from", str(keys), "-d", str(out))
    assert got.returncode == EXIT_ERROR, got.stderr
    report = json.loads(got.stdout)
    assert report[bad]["status"] == "error" and report[f"{key}-a"]["status"] == "written"
    assert (out / f"{key}-a").read_bytes() == b"aa"

    value = tmp_path / "v"
    value.write_bytes(b"vv")
    pairs = tmp_path / "pairs"
    pairs.write_bytes(f"{key}-p\t{value}\n{bad}\t{value}\n".encode())
    put = mcl2("--json", "put", "--keys-from", str(pairs))
    assert put.returncode == EXIT_ERROR, put.stderr
    report = json.loads(put.stdout)
    assert report[bad]["status"] == "error" and report[f"{key}-p"]["status"] == "stored"
    only_bad = tmp_path / "only-bad"
    only_bad.write_bytes(f"{bad}\t{value}\n".encode())
    refused = mcl2("--json", "put", "--keys-from", str(only_bad))
    assert refused.returncode == EXIT_ERROR
    assert json.loads(refused.stdout)[bad]["status"] == "error"
    client.batch_remove([f"{key}-a", f"{key}-p"], force=True)


# -- keys that are not UTF-8 ---------------------------------------------------------------


@needs_console
def test_a_key_that_is_not_utf8_is_stored_and_found_as_its_bytes(
    cluster: LocalCluster, client: Client, key: str, tmp_path: Path
) -> None:
    raw = key.encode() + b"-caf\xe9"
    env = env_for(cluster)
    put = subprocess.run(
        [str(MCL2), "put", raw, "-"], input=b"hello", capture_output=True, env=env, timeout=60
    )
    assert put.returncode == EXIT_OK, put.stderr
    assert client.get(raw) == b"hello"  # Mooncake holds exactly the bytes given
    exists = subprocess.run([str(MCL2), "exists", raw], capture_output=True, env=env, timeout=60)
    assert exists.returncode == EXIT_OK, exists.stderr
    assert exists.stdout == raw + b"\ttrue\n"
    listing = subprocess.run([str(MCL2), "ls", key], capture_output=True, env=env, timeout=60)
    assert listing.stdout == raw + b"\n"
    info = subprocess.run([str(MCL2), "info", raw], capture_output=True, env=env, timeout=60)
    assert info.returncode == EXIT_OK, info.stderr
    keys_file = tmp_path / "keys"
    keys_file.write_bytes(raw + b"\n" + key.encode() + b"-missing\n")
    from_file = subprocess.run(
        [str(MCL2), "stat", "--keys-from", str(keys_file)], capture_output=True, env=env, timeout=60
    )
    assert from_file.returncode == EXIT_NOT_FOUND
    assert from_file.stdout.splitlines() == [raw + b"\t5", key.encode() + b"-missing\t-"]
    assert b"Traceback" not in from_file.stderr
    rm = subprocess.run(
        [str(MCL2), "rm", "--force", "--keys-from", str(keys_file)],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert rm.returncode == EXIT_OK, rm.stderr
    assert not client.exists(raw)


# -- SIGINT and SIGTERM --------------------------------------------------------------------


def _wait_registered(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """The host:port the console script registered as (read from its -v output)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            seen += chunk
            match = re.search(rb"registered as (\S+)", seen)
            if match:
                return match.group(1).decode()
    raise AssertionError(f"never registered: {seen[-2000:]!r}")


def _reading_stdin(pid: int) -> bool:
    """True while the main thread of ``pid`` waits in read(0, ...) (/proc/PID/syscall: the
    syscall number, 0 on x86-64, then its first argument)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return fields[:2] == ["0", "0x0"]


@needs_console
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_exits_128_plus_its_number_and_cleans_up_the_client(
    cluster: LocalCluster, key: str, signum: int, status: int
) -> None:
    proc = subprocess.Popen(
        [str(MCL2), "-v", "put", key, "-"],
        stdin=subprocess.PIPE,  # kept open: put waits for the value
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_for(cluster),
    )
    try:
        hostname = _wait_registered(proc)
        wait_until("mcl2 to read the value from stdin", lambda: _reading_stdin(proc.pid))
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    word = "interrupted (SIGINT)" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert f"Error: {word}: stored 0 of 1 key (0 B); 1 not sent".encode() in err
    assert b"Traceback" not in err
    # The same cleanup as a normal exit: the client's metadata entries are gone.
    statuses = [entry_status(cluster.metadata_server, k) for k in client_keys(hostname)]
    assert statuses == [404, 404]


def test_sigint_during_a_put_lets_the_batch_finish_and_says_it_was_stored(
    cluster: LocalCluster, client: Client, key: str, tmp_path: Path, monkeypatch
) -> None:
    from mooncake_cffi.cli import transfer

    real_put = transfer.Transfer.put

    def put_then_interrupted(self, keys, values, overwrite):  # Ctrl-C while the batch runs
        os.kill(os.getpid(), signal.SIGINT)
        return real_put(self, keys, values, overwrite)

    monkeypatch.setattr(transfer.Transfer, "put", put_then_interrupted)
    files = []
    for i in range(300):  # two batches of at most 256 keys
        path = tmp_path / f"v{i}"
        path.write_bytes(b"%d" % i)
        files.append(f"{key}-{i:03d}={path}")
    env = {k: None for k in os.environ if k.startswith("MCL2_")}
    result = CliRunner().invoke(
        cli,
        ["--master", cluster.master_addr, "--metadata-server", cluster.metadata_server, "put"]
        + files,
        env=env,
    )
    assert result.exit_code == 130, result.output
    assert "interrupted (SIGINT): stored 256 of 300 keys" in result.stderr
    assert "44 not sent" in result.stderr
    present = client.batch_exists([f"{key}-{i:03d}" for i in range(300)])
    assert present == [True] * 256 + [False] * 44
    client.batch_remove([f"{key}-{i:03d}" for i in range(256)], force=True)


def test_held_signals_defers_sigint_and_sigterm_until_check() -> None:
    with held_signals() as held:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs: no exception inside the block
    with pytest.raises(KeyboardInterrupt):
        held.check()
    held.check()  # raised once only
    with held_signals() as held:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    with pytest.raises(Terminated):
        held.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
