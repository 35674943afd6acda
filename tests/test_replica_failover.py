"""Reads that survive a storage node: a dead node's key is read from its live replica.

Three storage nodes, values written with 2 replicas; the node holding the first replica of
the most keys is killed (or frozen).  Mooncake's read takes the first replica the master
lists and fails with TRANSFER_FAIL until the masters' client TTL passes.  The shim chooses
the replica (shim/src/replica_choice.hpp): a read whose transfer failed is tried again on
another replica, and the failed endpoint is avoided by later reads.  Every face must read
every such key back, byte for byte, within its deadline, long before the TTL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from process_helpers import freeze
from test_replica import _role_of_segment, replica_segments

from mooncake_cffi import Client, MooncakeError
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.failover import read_failover_stats
from mooncake_cffi.replica import ReplicateConfig
from mooncake_cffi.store import MooncakeDistributedStore

#: Far longer than the test: the master keeps listing the dead node's replicas.
CLIENT_TTL = 60
OP_TIMEOUT = 5.0
KEYS = 48


@pytest.fixture
def three_nodes(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_cluster("64 MB", storage_nodes=3, client_ttl=CLIENT_TTL).start()


def _doomed(local: LocalCluster, client: Client) -> tuple[dict[str, bytes], str]:
    """Writes KEYS values with 2 replicas; those whose first replica is on the node holding
    the most first replicas, and that node's role."""
    values = {f"fo-{i}": os.urandom(64) * (1024 + 37 * i) for i in range(KEYS)}
    client.batch_put(
        list(values), list(values.values()), replicate_config=ReplicateConfig(replica_num=2)
    )
    placement = {k: replica_segments(local, k) for k in values}
    assert all(len(set(p)) == 2 for p in placement.values()), placement
    firsts: dict[str, int] = {}
    for p in placement.values():
        firsts[p[0]] = firsts.get(p[0], 0) + 1
    seg = max(firsts, key=firsts.__getitem__)
    return {k: v for k, v in values.items() if placement[k][0] == seg}, _role_of_segment(local, seg)


def _check_every_face(client: Client, doomed: dict[str, bytes], limit: float) -> dict[str, Any]:
    """Each face reads every doomed key right; the slowest call of each (seconds)."""
    slowest: dict[str, float] = {}

    def timed(name: str, call: Callable[..., Any], *args: Any) -> Any:
        t0 = time.monotonic()
        out = call(*args)
        slowest[name] = max(slowest.get(name, 0.0), time.monotonic() - t0)
        return out

    for k, v in doomed.items():
        assert timed("get", client.get, k) == v, k
        buf = bytearray(len(v))
        assert timed("get_into", client.get_into, [k], [buf])[0] == len(v), k
        assert bytes(buf) == v, k
    keys = list(doomed)
    assert timed("batch_get", client.batch_get, keys) == list(doomed.values())
    assert all(t < limit for t in slowest.values()), slowest
    return slowest


def test_a_killed_nodes_keys_are_read_from_their_live_replica(three_nodes: LocalCluster) -> None:
    with Client(three_nodes.client_config(), op_timeout=OP_TIMEOUT) as client:
        doomed, role = _doomed(three_nodes, client)
        assert len(doomed) >= 8, doomed
        assert client.get(next(iter(doomed))) is not None  # a read asks the shim's choice
        before = read_failover_stats()
        assert before["active"] and before["seen"], before
        three_nodes.kill(role)
        t0 = time.monotonic()
        slowest = _check_every_face(client, doomed, OP_TIMEOUT)
        took = time.monotonic() - t0
        assert took < CLIENT_TTL / 2, took  # not the master dropping the node
        # the drop-in, on its own client
        store = MooncakeDistributedStore()
        cfg = {
            **three_nodes.client_config(),
            "local_buffer_size": "16 MB",
            "op_timeout": OP_TIMEOUT,
        }
        assert store.setup(cfg) == 0
        try:
            for k, v in doomed.items():
                assert store.get(k) == v, k
                buf = ctypes.create_string_buffer(len(v))
                assert store.get_into(k, ctypes.addressof(buf), len(v)) == len(v), k
                assert buf.raw == v, k
        finally:
            store.close()
    stats = read_failover_stats()
    print(
        f"\n[failover] {len(doomed)} keys first on {role}; read again in {took:.2f} s; "
        f"{slowest}; {stats}"
    )
    assert stats["marked"] > before["marked"] and stats["suspects"] >= 1, stats
    assert stats["fallbacks"] - before["fallbacks"] >= len(doomed), stats  # served elsewhere


def test_a_frozen_nodes_keys_are_read_from_their_live_replica(
    three_nodes: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen node answers nothing: the read that first meets it waits for Mooncake's
    transfer timeout; once that read failed, every read goes to the live replica at once.

    The client no longer shortens that timeout (MC_TCP_STATUS_TIMEOUT_SEC, 30 s: a write
    given up by it can land in another key); this test, which writes nothing while the node
    is frozen, sets it to its deadline itself (read at each transfer) to stay short."""
    monkeypatch.setenv("MC_TCP_STATUS_TIMEOUT_SEC", str(int(OP_TIMEOUT)))
    with Client(three_nodes.client_config(), op_timeout=OP_TIMEOUT) as client:
        doomed, role = _doomed(three_nodes, client)
        pid = three_nodes.pids[role]
        freeze(pid)
        try:
            first = next(iter(doomed))
            deadline = time.monotonic() + 30
            while True:  # until the frozen endpoint has failed a read once
                try:
                    if client.get(first) == doomed[first]:
                        break
                except MooncakeError:
                    pass
                assert time.monotonic() < deadline, "no read of the frozen node's key succeeded"
            _check_every_face(client, doomed, 1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
