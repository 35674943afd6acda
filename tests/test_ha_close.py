"""Closing a client of HA masters is bounded: ``close()`` within 2 s, a clean exit after it.

Mooncake's teardown of an HA client joins its leader monitor, which waits up to 30 s for a
master view change (``EtcdLeaderCoordinator::WaitForViewChange``) and cannot be woken.  The
shim does everything observable first (no call can start, every batch has ended, L1 is
unregistered), waits for Mooncake's teardown at most 1 s and leaves the rest to a thread of
its own (``mcs_teardowns_pending``).  These tests measure ``close()`` on a real 3-master
cluster, use a new client in the same process right after, and exit interpreters right after
closing (and without closing): the exit must be clean and keep its status; a process whose
client contributed a segment must not leave the master listing it (the next process's
writes would fail with TRANSFER_FAIL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mooncake_cffi.cluster import LocalCluster

pytestmark = pytest.mark.usefixtures("etcd")

CLOSE_LIMIT = 2.0


@pytest.fixture(scope="module")
def ha_cluster(etcd: str, make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("64 MB", ha=True, masters=3, client_ttl=2).start()


# In a process of its own: Mooncake keeps one etcd connection per process, so a client of
# this module's cluster in the test process would refuse the other HA tests' clusters.
_CLOSE_CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from mooncake_cffi import Client, ClosedError
from mooncake_cffi.capi import lib
cfg, segment = json.loads(sys.argv[1]), sys.argv[2]
out = {}
l1 = bytearray(4 << 20)
client = Client(cfg, l1=l1, register_l1=True)
client.put(f"close-{segment}", b"v" * 1000)
out["read"] = client.get(f"close-{segment}") == b"v" * 1000
out["l1_before"] = client.l1_registered
t0 = time.monotonic()
client.close()
out["close_s"] = time.monotonic() - t0
out["pending"] = int(lib.mcs_teardowns_pending())
out["closed"], out["l1_after"] = client.closed, client.l1_registered
try:
    client.get(f"close-{segment}")
    out["after_close"] = "answered"
except ClosedError:
    out["after_close"] = "ClosedError"
l1[:16] = bytes(16)  # the buffer is the caller's again
# A new client of the same cluster works while the old teardown goes on.
again = Client(cfg)
again.put(f"close-again-{segment}", b"w")
out["again"] = (again.get(f"close-{segment}") == b"v" * 1000
                and again.get(f"close-again-{segment}") == b"w")
t0 = time.monotonic()
again.close()
out["again_close_s"] = time.monotonic() - t0
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("segment", ["0", "16 MB"])
def test_an_ha_client_closes_within_2_s_with_everything_observable_done(
    ha_cluster: LocalCluster, segment: str
) -> None:
    cfg = ha_cluster.client_config(global_segment_size=segment)
    proc = subprocess.run(
        [sys.executable, "-c", _CLOSE_CHILD, json.dumps(cfg), segment],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ha_cluster.client_env()},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n[ha-close] segment={segment}: close {out['close_s']:.3f} s, pending {out['pending']}")
    assert out["read"] and out["l1_before"]
    assert out["close_s"] <= CLOSE_LIMIT
    assert out["closed"] and not out["l1_after"]
    assert out["after_close"] == "ClosedError"
    assert out["again"]
    assert out["again_close_s"] <= CLOSE_LIMIT


_CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from mooncake_cffi import Client
cfg, mode, key = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
client = Client(cfg)
client.put(key, b"written before the exit")
assert client.get(key) == b"written before the exit"
if mode != "no-close":
    t0 = time.monotonic()
    client.close()
    print(json.dumps({"close_s": time.monotonic() - t0}), flush=True)
sys.exit(7 if mode == "close-exit-7" else 0)
"""


def _run_child(local: LocalCluster, cfg: dict[str, Any], mode: str, key: str) -> Any:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cfg), mode, key],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **local.client_env()},
        cwd=Path(__file__).resolve().parent.parent.parent,
    )
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["close", "no-close", "close-exit-7"])
def test_the_interpreter_exits_at_once_after_an_ha_close(
    ha_cluster: LocalCluster, mode: str
) -> None:
    cfg = ha_cluster.client_config()
    proc, wall = _run_child(ha_cluster, cfg, mode, f"exit-{mode}")
    print(f"\n[ha-exit] {mode}: rc {proc.returncode}, process {wall:.2f} s, {proc.stdout.strip()}")
    assert proc.returncode == (7 if mode == "close-exit-7" else 0), proc.stderr[-2000:]
    assert "Segmentation" not in proc.stderr and "core dumped" not in proc.stderr
    assert wall < 15.0  # start, setup and the bounded close: not Mooncake's 30 s wait
    if mode != "no-close":
        assert json.loads(proc.stdout.strip().splitlines()[-1])["close_s"] <= CLOSE_LIMIT


@pytest.mark.slow
def test_a_process_that_contributed_a_segment_leaves_none_behind(
    ha_cluster: LocalCluster,
) -> None:
    """Its exit waits for the background unmount, so the next process's writes work."""
    cfg = ha_cluster.client_config(global_segment_size="16 MB")
    for i in range(2):
        proc, wall = _run_child(ha_cluster, cfg, "close", f"segment-exit-{i}")
        print(f"\n[ha-exit] segment process {i}: rc {proc.returncode}, {wall:.1f} s")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["close_s"] <= CLOSE_LIMIT
