"""The topology helper: hosts as network namespaces whose links tests cut, make lossy or slow,
and a cluster spread over them (client here, master and storage nodes on hosts of their own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from process_helpers import wait_until

from mooncake_cffi import topology
from mooncake_cffi.topology import Topology, TopologyUnavailable

SERVER = """
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001))
s.listen()
while True:
    c, _ = s.accept()
    n = 0
    while True:
        d = c.recv(1 << 16)
        if not d:
            break
        n += len(d)
    c.sendall(str(n).encode())
    c.close()
"""
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5001), timeout=2)
s.sendall(b"x" * int(sys.argv[2]))
s.shutdown(socket.SHUT_WR)
print(s.recv(100).decode())
"""


needs_root = pytest.mark.usefixtures("netns")


@pytest.fixture
def hosts(netns: None) -> Iterator[Topology]:
    with Topology(hosts=["a", "b"]) as t:
        for host in ("a", "b"):
            t.run_in(host, [sys.executable, "-c", SERVER])
        for host in ("a", "b"):
            wait_until(f"the server on {host} to listen", lambda h=host: _listening(t, h))
        yield t


def _listening(t: Topology, host: str) -> bool:
    """True once something listens on TCP port 5001 in ``host``'s namespace."""
    argv = [*t.prefix(host), "ss", "-Htln", "sport = :5001"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return result.returncode == 0 and bool(result.stdout.strip())


def _send(t: Topology, src: str, dst: str, nbytes: int = 10) -> bool:
    """True if ``src`` delivered ``nbytes`` to ``dst``'s server (and heard back) within 2 s."""
    argv = [*t.prefix(src), sys.executable, "-c", CLIENT, t.ip(dst), str(nbytes)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return result.returncode == 0 and result.stdout.strip() == str(nbytes)


def test_without_root_it_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topology.os, "geteuid", lambda: 1000)
    with pytest.raises(TopologyUnavailable, match="need root"), Topology(hosts=["a"]):
        pass


def test_bad_host_names_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct"):
        Topology(hosts=["a", "a"])
    with pytest.raises(ValueError, match="distinct"):
        Topology(hosts=["local"])


@needs_root
def test_links_are_cut_healed_made_lossy_and_slowed(hosts: Topology) -> None:
    t = hosts
    assert _send(t, "a", "b") and _send(t, "b", "a") and _send(t, "local", "a")
    t.cut("a", "b")
    assert not _send(t, "a", "b") and not _send(t, "b", "a")
    assert _send(t, "local", "a") and _send(t, "local", "b")
    t.cut("local", "a")
    assert not _send(t, "local", "a")
    t.heal()
    assert _send(t, "a", "b") and _send(t, "local", "a")
    t.loss("a", 100)
    assert not _send(t, "a", "b")
    t.heal()
    t.rate("b", 50)
    start = time.monotonic()
    assert _send(t, "a", "b", 6_250_000)  # 50 Mbit: one second of traffic
    assert time.monotonic() - start > 0.7
    t.heal()
    with pytest.raises(KeyError, match="unknown host"):
        t.ip("nowhere")


@needs_root
def test_everything_is_removed_on_exit() -> None:
    with Topology(hosts=["x"]) as t:
        ns, bridge = t.netns("x"), t.bridge
        proc = t.run_in("x", [sys.executable, "-c", "import time; time.sleep(60)"])
    assert proc.poll() is not None
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert bridge not in links


HOSTED_CLIENT = """
import json, os, sys, time
from mooncake_cffi import Client
from mooncake_cffi.errors import MooncakeError
client = Client(json.loads(sys.argv[1]))
values = {f"topo-{i}": bytes([i]) * 200_000 for i in range(8)}
client.batch_put(list(values), list(values.values()))
assert client.batch_get(list(values)) == list(values.values())
print("stored", flush=True)
sys.stdin.readline()  # links cut
start = time.monotonic()
try:
    client.get("topo-0")
    print("unexpected-success", flush=True)
except MooncakeError as exc:
    print(exc.name, time.monotonic() - start, flush=True)
sys.stdin.readline()  # healed
start = time.monotonic()
while True:
    try:
        assert client.get("topo-0") == values["topo-0"]
        break
    except MooncakeError:
        if time.monotonic() - start > 15:
            raise
        time.sleep(0.2)
print("recovered", time.monotonic() - start, flush=True)
client.close_for_exit()
os._exit(0)
"""


@needs_root
def test_a_cluster_on_separate_hosts(tmp_path: Path, make_cluster: Callable[..., Any]) -> None:
    """Client here, master and metadata on m0, storage nodes on s0 and s1: data crosses real
    links; cutting the client off the storage nodes gives a typed error in time (with
    Mooncake's TCP status timeout at 2 s), healing recovers."""
    with Topology(hosts=["m0", "s0", "s1"]) as t:
        place = t.placement({"metadata": "m0", "master": "m0", "storage": "s0", "storage1": "s1"})
        local = make_cluster("32 MB", storage_nodes=2, placement=place, client_host=t.local_ip)
        try:
            local.start()
            segments = local.segments()
            assert {s.rsplit(":", 1)[0] for s in segments} == {t.ip("s0"), t.ip("s1")}
            # Without MC_TCP_STATUS_TIMEOUT_SEC, Mooncake's get waits 30 s on a silent link.
            env = {
                **os.environ,
                **local.client_env(),
                "MC_TCP_STATUS_TIMEOUT_SEC": "2",
            }
            config = json.dumps(local.client_config())
            client = subprocess.Popen(
                [sys.executable, "-c", HOSTED_CLIENT, config],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp_path,  # not the source tree: import the installed package
            )
            try:
                assert client.stdout is not None
                assert client.stdout.readline().strip() == "stored"
                t.cut("local", "s0")
                t.cut("local", "s1")
                assert client.stdin is not None
                client.stdin.write("\n")
                client.stdin.flush()
                name, took = client.stdout.readline().split()
                assert name == "TRANSFER_FAIL" and float(took) < 5.0, (name, took)
                t.heal()
                out, _ = client.communicate("\n", timeout=60)
                assert out.startswith("recovered"), out
                assert float(out.split()[1]) < 15.0
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
        finally:
            local.stop()
