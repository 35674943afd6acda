"""LMCache's own command line with our plugins: ``lmcache bench l2`` and ``lmcache server``.

- ``lmcache bench l2 ... --no-skip-verify`` for both plugin types and LMCache's own
  ``mooncake_store`` type (its documented JSON, verbatim): stores, looks up and loads
  through the adapter and checks the bytes that come back.
- A server smoke test: ``lmcache server`` with MooncakeL2Adapter, or the documented
  ``mooncake_store`` JSON, as its L2 tier; ``lmcache
  bench server`` stores and retrieves through it (CPU, shared memory); ``lmcache kvcache
  clear`` empties L1, and the next retrieve is served from Mooncake.

Each test gets its own cluster, so Mooncake's counters and keys are its alone.  Needs lmcache
(``scripts/install_lmcache.sh``); skipped without it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from lmcache_helpers import spec

pytest.importorskip("lmcache")

pytestmark = pytest.mark.slow

LMCACHE = Path(sys.executable).with_name("lmcache")
ENV = dict(os.environ, LMCACHE_DISABLE_BANNER="1", PYTHONWARNINGS="ignore")
KV_SHAPE = "(2,64,16,2,64):float16:2"  # 2 layers, 64 blocks of 16 tokens: 2 chunks a request


def lmcache(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LMCACHE), *args], capture_output=True, text=True, env=ENV, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mooncake_keys(cluster) -> list[str]:
    with urllib.request.urlopen(cluster.metrics_url + "/get_all_keys", timeout=5) as r:
        return r.read().decode().split()


def mooncake_reads(cluster) -> float:
    """How many values the master has handed out for reading (its ``valid_get_nums_``)."""
    with urllib.request.urlopen(cluster.metrics_url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("valid_get_nums_ "):
                return float(line.split()[1])
    raise AssertionError("the master reports no valid_get_nums_")


@pytest.fixture
def own_cluster(make_cluster):
    return make_cluster().start()


@pytest.mark.parametrize("kind", ["plugin", "native_plugin", "mooncake_store"])
def test_lmcache_bench_l2_verifies_the_data_through_every_adapter_type(own_cluster, kind):
    result = lmcache(
        "bench",
        "l2",
        "--l2-adapter",
        spec(kind, own_cluster.client_config(key_prefix=f"bench-{kind}/")),
        "--num-keys",
        "64",
        "--rounds",
        "3",
        "--data-size-kb",
        "64",
        "--lookup-max-hit-rate",
        "1.0",
        "--no-skip-verify",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "All 64 keys data verified OK" in out, out[-3000:]
    assert re.search(r"\[Load\] Round 4: .*loaded=64/64", out), out[-3000:]
    assert re.search(r"\[Lookup\] Round 4: .*found=64/64", out), out[-3000:]
    assert sum(k.startswith(f"bench-{kind}/") for k in mooncake_keys(own_cluster)) == 256


def wait_http(url: str, server: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"lmcache server exited with {server.returncode}"
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"lmcache server did not answer on {url} within {timeout} s")


@pytest.mark.parametrize("kind", ["plugin", "mooncake_store"])
def test_lmcache_server_stores_to_and_serves_from_mooncake(own_cluster, tmp_path, kind):
    prefix = f"server-{kind}/"
    port, http = free_port(), free_port()
    url = f"http://127.0.0.1:{http}"
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [
            str(LMCACHE),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(http),
            "--l1-size-gb",
            "1",
            "--eviction-policy",
            "LRU",
            "--disable-observability",
            "--l2-adapter",
            spec(kind, own_cluster.client_config(key_prefix=prefix)),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=ENV,
    )
    bench = [
        "bench",
        "server",
        "--rpc-url",
        f"tcp://127.0.0.1:{port}",
        "--url",
        url,
        "--mode",
        "cpu",
        "--transfer-mode",
        "lmcache_driven",
        "--kvcache-shape-spec",
        KV_SHAPE,
        "--start",
        "0",
        "--end",
        "2",
        "--interval",
        "0",
    ]
    try:
        wait_http(url, server)
        described = lmcache("describe", "kvcache", "--url", url, "--format", "json")
        adapters = json.loads(described.stdout)["metrics"]["l2_adapters"]
        shown = "mooncake_cffi" if kind == "plugin" else "LMCacheMooncakeClient"
        assert adapters == [{"type": shown, "health": "OK"}]

        first = lmcache(*bench)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
        assert re.search(r"\[seq 1/cold\] STORE: stored", first.stdout), first.stdout[-3000:]
        # Stores reach L2 asynchronously: wait until both chunks are in Mooncake.
        deadline = time.monotonic() + 30
        while sum(k.startswith(prefix) for k in mooncake_keys(own_cluster)) < 2:
            assert time.monotonic() < deadline, "the chunks never reached Mooncake"
            time.sleep(0.2)
        cold = re.search(r"\[seq 1/cold\] CHECKSUM: (\w+)", first.stdout).group(1)

        cleared = lmcache("kvcache", "clear", "--url", url)
        assert cleared.returncode == 0 and "OK" in cleared.stdout
        reads_before = mooncake_reads(own_cluster)
        second = lmcache(*bench)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
        # L1 is empty, so both chunks of each request can only come from Mooncake.
        assert re.search(r"\[seq 1/cold\] LOOKUP: 2/2 chunks hit", second.stdout)
        assert re.search(r"\[seq 1/cold\] RETRIEVE: retrieved", second.stdout)
        assert mooncake_reads(own_cluster) >= reads_before + 2
        warm = re.search(r"\[seq 1/warm\] CHECKSUM: (\w+)", second.stdout).group(1)
        assert warm == cold
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        log.close()
