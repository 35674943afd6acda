"""Faults, overload and integrity under load, against real Mooncake processes.

Each test that kills something uses its own cluster (``make_cluster``), so the
session cluster stays healthy for the rest of the suite.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time
import uuid

import pytest
from process_helpers import gone, wait_until

import mooncake_cffi as mc
from mooncake_cffi import Client

MiB = 1 << 20


def unique(prefix: str = "f") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ------------------------------------------------------------------ faults


def test_storage_node_killed_during_a_batch(make_cluster):
    cluster = make_cluster(segment_size="512 MB").start()
    with Client(cluster.client_config()) as client:
        keys = [unique() for _ in range(48)]
        values = [os.urandom(MiB) for _ in keys]
        batch = client.submit("put", keys, values)
        time.sleep(0.02)
        os.kill(cluster.pids["storage"], signal.SIGKILL)
        t0 = time.monotonic()
        done = []
        while not done and time.monotonic() - t0 < 30:
            client.wait(1.0)
            done = client.drain()
        assert [c.id for c in done] == [batch]  # exactly one completion, no hang
        statuses = done[0].results
        assert all(s == 0 or s < 0 for s in statuses)
        # After the kill every transfer fails with an error per key, promptly.
        probe = [unique() for _ in range(4)]
        t0 = time.monotonic()
        results = client.batch_put(probe, [b"x" * 4096] * 4)
        assert time.monotonic() - t0 < 10
        assert all(r < 0 for r in results), results
        assert {mc.error_name(r) for r in results} <= {
            "TRANSFER_FAIL",
            "NO_AVAILABLE_HANDLE",
            "RPC_FAIL",
            "SEGMENT_NOT_FOUND",
            "INTERNAL_ERROR",
            "REPLICA_IS_NOT_READY",
            "INVALID_REPLICA",
            "WRITE_FAIL",
        }
        # reads of data that lived on the dead node fail per key, no crash
        got = client.get_into(keys[:2], [bytearray(MiB), bytearray(MiB)])
        assert all(g < 0 or g == MiB for g in got)
        assert isinstance(client.exists(keys[0]), bool)  # metadata still answers
    assert client.closed


def test_master_killed_calls_fail_within_5s_and_restarted_master_serves(make_cluster):
    cluster = make_cluster(segment_size="256 MB").start()
    client = Client(cluster.client_config())
    key = unique()
    client.put(key, b"before the crash")
    os.kill(cluster.pids["master"], signal.SIGKILL)
    wait_until("the killed master to be gone", lambda: gone(cluster.pids["master"]))
    for call in (
        lambda: client.exists(key),
        lambda: client.get(key),
        lambda: client.put(unique(), b"v"),
        lambda: client.remove(key, force=True),
    ):
        t0 = time.monotonic()
        with pytest.raises(mc.MooncakeError) as info:
            call()
        assert time.monotonic() - t0 < 5.0, info.value
        assert isinstance(info.value, mc.TransportError) or info.value.name in (
            "RPC_FAIL",
            "RPC_TIMEOUT",
            "INTERNAL_ERROR",
            "TRANSFER_FAIL",
        ), info.value
    t0 = time.monotonic()
    client.close()
    assert time.monotonic() - t0 < 15
    cluster.stop()
    cluster.start()
    with Client(cluster.client_config()) as fresh:
        fresh.put(key, b"after the restart")
        assert fresh.get(key) == b"after the restart"


# ---------------------------------------------------------------- overload


def test_full_lane_fails_fast_when_configured(cluster):
    cfg = cluster.client_config(per_op_workers={"store": 1})
    with Client(cfg, queue_capacity=2, queue_timeout=0) as client:
        value = os.urandom(2 * MiB)
        accepted, refused = [], 0
        for _ in range(40):
            try:
                accepted.append(client.submit("put", [unique()], [value]))
            except mc.QueueFullError as exc:
                refused += 1
                assert "queue full" in str(exc) and exc.name == "MCS_E_QUEUE_FULL"
        assert refused > 0 and len(accepted) >= 2
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < len(accepted) and time.monotonic() < deadline:
            client.wait(1.0)
            seen.update(c.id for c in client.drain())
        assert seen == set(accepted)
        assert client.stats()["store"]["rejected"] == refused


def test_full_lane_waits_when_configured(cluster):
    cfg = cluster.client_config(per_op_workers={"store": 1})
    with Client(cfg, queue_capacity=1, queue_timeout=None) as client:
        value = os.urandom(MiB)
        ids = [client.submit("put", [unique()], [value]) for _ in range(6)]  # each waits for room
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < len(ids) and time.monotonic() < deadline:
            client.wait(1.0)
            seen.update(c.id for c in client.drain())
        assert seen == set(ids)
        assert client.stats()["store"]["rejected"] == 0


@pytest.mark.slow
def test_memory_stays_bounded_under_a_submit_storm(cluster):
    cfg = cluster.client_config(per_op_workers={"lookup": 1})
    with Client(cfg, queue_capacity=64, queue_timeout=None) as client:
        keys = [unique() for _ in range(8)]
        stop = threading.Event()
        drained = [0]

        def drainer() -> None:
            while not stop.is_set() or client.pending:
                client.wait(0.2)
                drained[0] += len(client.drain())

        t = threading.Thread(target=drainer)
        t.start()
        for _ in range(500):  # warm up allocators
            client.submit("exists", keys)
        base = _rss_bytes()
        n = 6000
        for _ in range(n):
            client.submit("exists", keys)
            assert client.stats()["lookup"]["pending"] <= 64
        grown = _rss_bytes() - base
        stop.set()
        t.join(60)
        assert drained[0] == n + 500
        assert grown < 64 * MiB, f"RSS grew by {grown / MiB:.1f} MiB"


def test_put_larger_than_the_cluster_reports_no_space_with_sizes(make_cluster):
    cluster = make_cluster(segment_size="32 MB").start()
    with Client(cluster.client_config()) as client:
        big = bytearray(48 * MiB)
        with pytest.raises(mc.NoSpaceError) as info:
            client.put(unique(), big)
        msg = str(info.value)
        assert "NO_AVAILABLE_HANDLE" in msg and str(48 * MiB) in msg
        assert "global_segment_size" in msg
        results = client.batch_put([unique(), unique()], [b"small", big])
        assert results[0] == 0 and results[1] == -200


# ------------------------------------------------------- integrity under load


@pytest.mark.slow
def test_integrity_under_mixed_load(cluster, capsys):
    """4 threads x mixed put/get/exists/remove with random values; every read verified."""
    sizes = [1, 17, 4096, 65536, 300_000, MiB, 4 * MiB]
    duration = float(os.environ.get("MCS_INTEGRITY_SECONDS", "15"))
    budget = 400 * MiB  # of the 1 GB session segment, shared by the threads
    counts = {"put": 0, "get": 0, "exists": 0, "remove": 0, "batch": 0}
    errors: list[str] = []
    lock = threading.Lock()

    def worker(seed: int, client: Client) -> None:
        rng = random.Random(seed)
        model: dict[str, tuple[int, str]] = {}  # acknowledged writes: size, sha256
        used = 0
        local = dict.fromkeys(counts, 0)
        deadline = time.monotonic() + duration
        try:
            while time.monotonic() < deadline:
                op = rng.random()
                if op < 0.35 and used < budget // 4:
                    size = rng.choice(sizes)
                    key = f"int-{seed}-{uuid.uuid4().hex[:10]}"
                    value = rng.randbytes(size)
                    client.put(key, value)
                    model[key] = (size, hashlib.sha256(value).hexdigest())
                    used += size
                    local["put"] += 1
                elif op < 0.6 and model:
                    key = rng.choice(list(model))
                    got = client.get(key)
                    size, digest = model[key]
                    if got is None or len(got) != size or hashlib.sha256(got).hexdigest() != digest:
                        errors.append(f"mismatch on {key}")
                    local["get"] += 1
                elif op < 0.7 and model:
                    keys = rng.sample(list(model), min(len(model), 8))
                    bufs = [bytearray(model[k][0]) for k in keys]
                    res = client.get_into(keys, bufs)
                    for k, b, r in zip(keys, bufs, res):
                        if r != model[k][0] or hashlib.sha256(b).hexdigest() != model[k][1]:
                            errors.append(f"batch mismatch on {k}: {r}")
                    local["batch"] += 1
                elif op < 0.85:
                    missing = f"int-{seed}-missing-{uuid.uuid4().hex[:6]}"
                    keys = list(model)[:4] + [missing]
                    if client.batch_exists(keys) != [True] * (len(keys) - 1) + [False]:
                        errors.append("exists disagrees with acknowledged writes")
                    local["exists"] += 1
                elif model:
                    key = rng.choice(list(model))
                    assert client.remove(key, force=True)
                    used -= model.pop(key)[0]
                    if client.exists(key):
                        errors.append(f"{key} exists after remove")
                    local["remove"] += 1
            # finally every acknowledged write must still be there, intact
            for key, (_size, digest) in model.items():
                got = client.get(key)
                if got is None or hashlib.sha256(got).hexdigest() != digest:
                    errors.append(f"acknowledged write {key} lost or corrupted")
            client.batch_remove(list(model), force=True) if model else None
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {seed}: {exc!r}")
        with lock:
            for k, v in local.items():
                counts[k] += v

    cfg = cluster.client_config(per_op_workers={"lookup": 1, "retrieve": 2, "store": 2})
    with Client(cfg) as client:
        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, args=(s, client)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(duration + 120)
            assert not t.is_alive(), "a worker thread hung"
        elapsed = time.monotonic() - t0
    total = sum(counts.values())
    with capsys.disabled():
        print(f"\n[integrity] {total} ops in {elapsed:.1f} s ({counts}); mismatches: {len(errors)}")
    assert not errors, errors[:10]
    assert counts["get"] > 0 and counts["put"] > 0 and counts["remove"] > 0
