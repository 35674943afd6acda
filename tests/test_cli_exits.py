"""How mcl2 ends when things around it go wrong: a closed output pipe, keys that are not
UTF-8, SIGINT and SIGTERM.  Most run the installed console script (its exit path is the one
users meet); the put-under-SIGINT case runs in-process to land the signal inside the batch.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_BROKEN_PIPE, EXIT_NOT_FOUND, EXIT_OK
from mooncake_cffi.cli.interrupts import Terminated, held_signals

from mooncake_cffi import Client
from mooncake_cffi._metadata import client_keys, entry_url
from mooncake_cffi.cluster import LocalCluster

MCL2 = Path(sys.executable).with_name("mcl2")
needs_console = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")


@pytest.fixture
def key() -> str:
    return f"exits-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.client_config()) as c:
        yield c


def env_for(cluster: LocalCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
    env.update(
        MCL2_MASTER=cluster.master_addr,
        MCL2_METADATA_SERVER=cluster.metadata_server,
        MCL2_ADMIN=cluster.metrics_url,
    )
    return env


def entry_status(metadata_server: str, key: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(entry_url(metadata_server, key), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


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
        time.sleep(0.5)  # on to reading the value from stdin
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
