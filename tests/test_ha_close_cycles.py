"""Opening and closing HA clients in one process holds a fixed number of threads and fds.

Mooncake's teardown of an HA client cannot end before its leader monitor's 30 s wait does,
so a closed HA client used to keep Mooncake's whole client (about 21 threads and 11 fds)
alive for up to 30 s: 30 open/close cycles held 603 threads.  The shim now keeps the
Mooncake client of a closed HA client that contributes no memory and hands it to the next
client of the same configuration.  One process opens and closes 100 clients (each writing
and reading a value) and the threads and fds it holds must stay under a ceiling set after
the first cycle; the process must then exit at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from mooncake_cffi.cluster import LocalCluster

pytestmark = pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")

CYCLES = 100
#: Threads and fds a cycle may add over the first cycle's peak (noise: Python's own).
SLACK = 8


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(
        tmp_path_factory.mktemp("ha-cycles"), "64 MB", ha=True, masters=3, client_ttl=2
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


# In a process of its own: Mooncake keeps one etcd connection per process.
_CYCLES_CHILD = r"""
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
from mooncake_cffi import Client
cfg, cycles = json.loads(sys.argv[1]), int(sys.argv[2])
def counts():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))
out = {"threads": [], "fds": [], "close_s": [], "ok": 0}
for i in range(cycles):
    c = Client(cfg)
    c.put(f"cycle-{i}", b"v" * 4096)
    out["ok"] += c.get(f"cycle-{i}") == b"v" * 4096 and c.get("cycle-0") == b"v" * 4096
    t0 = time.monotonic()
    c.close()
    out["close_s"].append(time.monotonic() - t0)
    t, f = counts()
    out["threads"].append(t)
    out["fds"].append(f)
print(json.dumps(out), flush=True)
"""


def test_100_ha_clients_opened_and_closed_hold_a_fixed_number_of_threads_and_fds(
    ha_cluster: LocalCluster,
) -> None:
    cfg = ha_cluster.client_config()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _CYCLES_CHILD, json.dumps(cfg), str(CYCLES)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **ha_cluster.client_env()},
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    threads, fds = out["threads"], out["fds"]
    print(
        f"\n[ha-cycles] {CYCLES} cycles in {wall:.1f} s: threads {threads[0]}..{max(threads)}, "
        f"fds {fds[0]}..{max(fds)}, slowest close {max(out['close_s']):.3f} s"
    )
    assert out["ok"] == CYCLES
    assert max(threads) <= threads[0] + SLACK, threads
    assert max(fds) <= fds[0] + SLACK, fds
    assert max(out["close_s"]) <= 2.0
    assert wall < 120, wall  # and the exit did not wait for Mooncake's 30 s teardown


# Opens clients (and puts through each) under a low fd limit until something fails.
_FDS_CHILD = r"""
import json, resource, sys, warnings
warnings.simplefilter("ignore")
cfg, limit = json.loads(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
from mooncake_cffi import Client, MooncakeError
clients = []
for i in range(200):
    try:
        c = Client(cfg)
        clients.append(c)
        c.put(f"fds-{limit}-{i}", b"f" * 4096)
    except MooncakeError as exc:
        print(json.dumps({"at": i, "name": exc.name, "message": str(exc)}), flush=True)
        break
else:
    print(json.dumps({"at": None}), flush=True)
"""


@pytest.mark.parametrize("limit", [90, 97, 103])
def test_running_out_of_fds_is_said_so_not_reported_as_a_dead_node(
    cluster: LocalCluster, limit: int
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FDS_CHILD, json.dumps(cluster.client_config()), str(limit)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n[fds] limit {limit}: {out}")
    assert out["at"] is not None, out  # the limit was reached
    assert "free file descriptors" in out["message"], out
    assert f"limit {limit}" in out["message"], out
    assert "unreachable" not in out["message"], out
