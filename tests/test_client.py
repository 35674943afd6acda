"""Integration tests of the Python Client against a real local Mooncake cluster."""

from __future__ import annotations

import mmap
import os
import time
import uuid

import numpy as np
import pytest

import mooncake_cffi as mc
from mooncake_cffi import Client, StoreConfig


def unique(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster.client_config(num_workers=2)) as c:
        yield c


@pytest.fixture(scope="module")
def mooncake_store(cluster):
    """Mooncake's own Python client on the same cluster."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(
        "127.0.0.1", cluster.metadata_server, 0, 16 * 1024 * 1024, "tcp", "", cluster.master_addr
    )
    assert rc == 0
    yield store
    store.close()


SIZES = [1, 2, 255, 4096, 65537, 1 << 20, 4 << 20]


def _torn_reads() -> bool:
    """Wheels before 0.3.12 sometimes return a large value read right after its put with a
    wrong tail (reproduced with Mooncake's own client: scripts/torn_read_repro.py); a second
    read is right.  Newer wheels must be right the first time."""
    return (mc.wheel.detect().version_tuple or (9,)) < (0, 3, 12, 0)


def _same(got: list[bytes | None], values: list[bytes]) -> None:
    """Fails naming the first value that differs, without pytest's diff of megabytes (which
    takes minutes on a 4 MiB value)."""
    for i, (g, v) in enumerate(zip(got, values, strict=True)):
        if g != v:
            at = next((j for j, (a, b) in enumerate(zip(g or b"", v)) if a != b), None)
            pytest.fail(
                f"value #{i}: {None if g is None else len(g)} bytes read back, {len(v)} "
                f"written, first differing byte at {at}"
            )


@pytest.mark.parametrize("size", SIZES)
def test_single_round_trip_of_binary_values(client, size):
    key = unique()
    value = os.urandom(size)
    client.put(key, value)
    got = client.get(key)
    if got != value and _torn_reads():
        got = client.get(key)
    _same([got], [value])
    assert client.size(key) == size
    assert client.exists(key)


def test_batch_round_trip_of_mixed_sizes(client):
    keys = [unique() for _ in SIZES]
    values = [os.urandom(s) for s in SIZES]
    assert client.batch_put(keys, values) == [0] * len(keys)
    got = client.batch_get(keys)
    if got != values and _torn_reads():
        got = client.batch_get(keys)
    _same(got, values)


def test_values_may_be_any_bytes_like(client):
    keys = [unique() for _ in range(4)]
    arr = np.arange(1000, dtype=np.uint32)
    values = [bytearray(b"abc"), memoryview(b"defg"), arr, b"\x00\xff"]
    assert client.batch_put(keys, values) == [0] * 4
    got = client.batch_get(keys)
    assert got[0] == b"abc" and got[1] == b"defg" and got[3] == b"\x00\xff"
    assert np.array_equal(np.frombuffer(got[2], dtype=np.uint32), arr)


def test_mixed_present_and_missing_batch(client):
    present = [unique() for _ in range(3)]
    missing = [unique("missing") for _ in range(2)]
    client.batch_put(present, [b"p0", b"p1", b"p2"])
    keys = [present[0], missing[0], present[1], missing[1], present[2]]
    assert client.batch_exists(keys) == [True, False, True, False, True]
    assert client.batch_get(keys) == [b"p0", None, b"p1", None, b"p2"]
    assert client.get(missing[0]) is None
    assert client.size(missing[0]) is None


def test_remove_then_exists_and_remove_of_missing(client):
    key = unique()
    client.put(key, b"v")
    assert client.remove(key, force=True) is True
    assert client.exists(key) is False
    assert client.remove(key) is False
    assert client.batch_remove([key, unique("never")]) == [-704, -704]


def test_remove_under_read_lease_needs_force(client):
    key = unique()
    client.put(key, b"leased")
    assert client.get(key) == b"leased"  # takes a read lease
    with pytest.raises(mc.HasLeaseError) as info:
        client.remove(key)
    assert info.value.name == "OBJECT_HAS_LEASE" and info.value.code == -706
    assert client.exists(key)
    assert client.remove(key, force=True)
    assert not client.exists(key)


def test_put_keeps_first_value_and_upsert_overwrites(client):
    key = unique()
    client.put(key, b"first")
    client.put(key, b"second")
    assert client.get(key) == b"first"
    assert client.put_if_absent(key, b"third") is False
    assert client.put_if_absent(unique(), b"x") is True
    client.upsert(key, b"a longer replacement value")
    assert client.get(key) == b"a longer replacement value"
    k2 = unique()
    assert client.batch_put([key, k2], [b"x", b"y"], skip_existing=True) == [mc.EXISTED, 0]
    assert client.batch_upsert([key, k2], [b"X", b"Y"]) == [0, 0]
    assert client.batch_get([key, k2]) == [b"X", b"Y"]


def test_zero_copy_put_from_and_get_into(client):
    keys = [unique() for _ in range(3)]
    src_np = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
    src_ba = bytearray(os.urandom(5000))
    src_mm = mmap.mmap(-1, 8192)
    src_mm.write(os.urandom(8192))
    assert client.put_from(keys, [src_np, src_ba, src_mm]) == [0, 0, 0]
    dst_np = np.zeros(1 << 20, dtype=np.uint8)
    dst_ba = bytearray(6000)
    dst_mm = mmap.mmap(-1, 8192)
    assert client.get_into(keys, [dst_np, dst_ba, dst_mm]) == [1 << 20, 5000, 8192]
    assert np.array_equal(src_np, dst_np)
    assert dst_ba[:5000] == src_ba
    assert dst_mm[:] == src_mm[:]
    # a too-small buffer and a missing key are per-key results
    small = bytearray(10)
    assert client.get_into([keys[0], unique("none")], [small, bytearray(10)]) == [-600, -704]
    # a prefix of a buffer
    k = unique()
    assert client.put_from([k], [src_ba], sizes=[100]) == [0]
    assert client.get(k) == bytes(src_ba[:100])


def test_zero_copy_upsert(client):
    k = unique()
    assert client.put_from([k], [b"old"]) == [0]
    assert client.put_from([k], [b"new!"], upsert=True) == [0]
    assert client.get(k) == b"new!"


def test_readonly_buffer_is_refused_for_get_into(client):
    with pytest.raises(TypeError, match="writable"):
        client.get_into([unique()], [b"read-only bytes"])


@pytest.mark.parametrize(
    "per_op",
    [
        None,
        {"lookup": 1},
        {"store": 2, "retrieve": 1},
        {"lookup": 1, "retrieve": 1, "store": 1, "delete": 1},
    ],
)
def test_partial_lane_layouts_route_each_op_to_its_lane(cluster, per_op):
    cfg = cluster.client_config(num_workers=3)
    if per_op:
        cfg["per_op_workers"] = per_op
    with Client(cfg) as c:
        k = unique()
        c.put(k, b"v")
        c.get(k)
        c.exists(k)
        c.remove(k, force=True)
        st = c.stats()
    per_op = per_op or {}
    for lane in ("lookup", "retrieve", "store", "delete"):
        if lane in per_op:
            assert st[lane]["workers"] == per_op[lane]
            assert st[lane]["completed"] >= 1
        else:
            # served by the shared pool, yet its operations still count here
            assert st[lane]["workers"] == 0 and st[lane]["served_by"] == "shared"
            assert st[lane]["completed"] >= 1
    if len(per_op) == 4:
        assert st["shared"]["workers"] == 0  # no shared pool when every lane is configured
    else:
        assert st["shared"]["workers"] == 3 and st["shared"]["completed"] >= 1


def test_l1_region_with_forced_small_blocks(cluster):
    block = 64 * 1024
    l1 = np.zeros(4 * block, dtype=np.uint8)
    with Client(cluster.client_config(), l1=l1, register_l1=True, l1_block_size=block) as c:
        assert c.l1_registered and c.l1_blocks == 4
        data = np.frombuffer(os.urandom(block), dtype=np.uint8)
        l1[block : 2 * block] = data
        k = unique()
        assert c.put_from([k], [l1[block : 2 * block]]) == [0]
        l1[:] = 0
        assert c.get_into([k], [l1[2 * block : 3 * block]]) == [block]
        assert np.array_equal(l1[2 * block : 3 * block], data)
        # crossing a block boundary, and outside the region, are refused by name
        with pytest.raises(mc.L1Error, match="not inside one registered L1 block"):
            c.put_from([unique()], [l1[block // 2 : block + 100]])
        with pytest.raises(mc.L1Error):
            c.put_from([unique()], [np.zeros(100, dtype=np.uint8)])
        # bytes APIs copy through the L1 staging area instead of refusing
        k2 = unique()
        c.put(k2, b"staged through L1")
        assert c.get(k2) == b"staged through L1"
        assert c.batch_get([k2, unique()]) == [b"staged through L1", None]
    assert not c.l1_registered


def test_tcp_does_not_register_l1_by_default(cluster):
    l1 = bytearray(1 << 20)
    with Client(cluster.client_config(), l1=l1) as c:
        assert c.l1_registered is False
        c.put(unique(), b"ok")


def test_rdma_without_l1_is_refused_before_any_network_traffic():
    cfg = {
        "local_hostname": "127.0.0.1",
        "metadata_server": "http://127.0.0.1:9/metadata",
        "master_server_addr": "127.0.0.1:9",
        "protocol": "rdma",
    }
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="RDMA protocol is enabled, but no L1 memory"):
        Client(cfg)
    with pytest.raises(ValueError, match="invalid L1 memory descriptor"):
        Client(cfg, l1=bytearray())
    with pytest.raises(ValueError, match="invalid L1 memory descriptor"):
        Client(cfg, l1=b"read-only")
    assert time.monotonic() - t0 < 1.0


def test_unreachable_master_fails_fast_naming_the_address(cluster):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cfg = cluster.client_config()
    cfg["master_server_addr"] = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(mc.TransportError, match=f"127.0.0.1:{port}"):
        Client(cfg)
    assert time.monotonic() - t0 < 5.0


def test_local_hostname_with_port_is_rejected(cluster):
    cfg = cluster.client_config()
    cfg["local_hostname"] = "127.0.0.1:12345"
    with pytest.raises(ValueError, match="port"):
        Client(cfg)


def test_every_call_after_close_raises_closed(cluster):
    c = Client(cluster.client_config())
    c.close()
    c.close()  # idempotent
    k = unique()
    calls = [
        lambda: c.put(k, b"v"),
        lambda: c.get(k),
        lambda: c.exists(k),
        lambda: c.remove(k),
        lambda: c.upsert(k, b"v"),
        lambda: c.size(k),
        lambda: c.batch_put([k], [b"v"]),
        lambda: c.batch_get([k]),
        lambda: c.batch_exists([k]),
        lambda: c.batch_remove([k]),
        lambda: c.put_from([k], [b"v"]),
        lambda: c.get_into([k], [bytearray(1)]),
        lambda: c.submit("exists", [k]),
    ]
    for call in calls:
        with pytest.raises(mc.ClosedError):
            call()
    assert c.closed


def test_bad_keys_and_batches_get_clear_errors(client):
    with pytest.raises(mc.InvalidArgumentError, match="empty"):
        client.put("", b"v")
    with pytest.raises(mc.InvalidArgumentError, match="NUL"):
        client.put("a\0b", b"v")
    with pytest.raises(mc.InvalidArgumentError, match="more than once"):
        client.batch_put(["dup", "dup"], [b"1", b"2"])
    with pytest.raises(mc.InvalidArgumentError, match="pair up"):
        client.batch_put(["a", "b"], [b"1"])
    for empty_batch in (client.batch_exists, client.batch_size, client.batch_remove):
        with pytest.raises(mc.InvalidArgumentError, match="empty batch"):
            empty_batch([])
    with pytest.raises(mc.InvalidArgumentError, match="zero"):
        client.put(unique(), b"")
    with pytest.raises(TypeError):
        client.put(123, b"v")
    with pytest.raises(TypeError):
        client.batch_exists("not-a-list")


def test_non_ascii_and_long_keys_round_trip(client):
    keys = ["ключ-" + uuid.uuid4().hex, "キー/" + uuid.uuid4().hex, "x" * 1000 + uuid.uuid4().hex]
    values = [b"1", b"2", b"3"]
    assert client.batch_put(keys, values) == [0, 0, 0]
    assert client.batch_get(keys) == values
    assert client.batch_exists(keys) == [True, True, True]


def test_error_objects_carry_code_and_name():
    err = mc.errors.error_for(-706, "x")
    assert isinstance(err, mc.HasLeaseError) and err.name == "OBJECT_HAS_LEASE"
    assert isinstance(mc.errors.error_for(-704), LookupError)
    assert isinstance(mc.errors.error_for(-10003), mc.ClosedError)
    assert mc.error_name(-200) == "NO_AVAILABLE_HANDLE"
    assert mc.error_name(-12345) == "UNKNOWN_ERROR"


def test_written_by_us_read_by_mooncake_and_back(client, mooncake_store):
    ours, theirs = unique("ours"), unique("theirs")
    v1, v2 = os.urandom(300_000), os.urandom(70_000)
    client.put(ours, v1)
    assert mooncake_store.is_exist(ours) == 1
    assert mooncake_store.get(ours) == v1
    assert mooncake_store.put(theirs, v2) == 0
    assert client.exists(theirs)
    assert client.get(theirs) == v2


def test_replicate_config_is_handed_over_and_type_checked(client):
    from mooncake.store import ReplicateConfig

    rc = ReplicateConfig()
    rc.replica_num = 1
    k = unique()
    client.put(k, b"with config", replicate_config=rc)
    assert client.get(k) == b"with config"
    with pytest.raises(TypeError, match="ReplicateConfig"):
        client.put(unique(), b"v", replicate_config=object())


def test_async_submit_drain_and_eventfd(client):
    import select

    keys = [unique() for _ in range(5)]
    bufs = [os.urandom(1000) for _ in keys]
    ids = [client.submit("put", [k], [b]) for k, b in zip(keys, bufs)]
    id_exists = client.submit("exists", keys + [unique("nope")])
    seen = {}
    deadline = time.monotonic() + 10
    fd = client.fileno()
    while len(seen) < 6 and time.monotonic() < deadline:
        select.select([fd], [], [], 1.0)
        for comp in client.drain():
            assert comp.id not in seen  # exactly one completion per batch
            seen[comp.id] = comp
    assert set(seen) == set(ids) | {id_exists}
    assert all(seen[i].ok and seen[i].results == [0] for i in ids)
    # the exists batch may have run before or after the puts finished
    assert seen[id_exists].results[-1] == 0
    assert client.drain() == []
    r, _, _ = select.select([fd], [], [], 0)
    assert r == []  # eventfd reset once drained


def test_async_client_gathers_many_gets(cluster):
    import asyncio

    async def main():
        async with mc.AsyncClient(cluster.client_config()) as ac:
            keys = [unique() for _ in range(50)]
            vals = [os.urandom(4096) for _ in keys]
            await asyncio.gather(*(ac.put(k, v) for k, v in zip(keys, vals)))
            got = await asyncio.gather(*(ac.get(k) for k in keys))
            assert got == vals
            assert await ac.exists(keys[0])
            assert await ac.get(unique("missing")) is None
            assert await ac.remove(keys[1], force=True)

    asyncio.run(main())


def test_use_in_forked_child_is_refused(client):
    k = unique()
    client.put(k, b"parent")
    pid = os.fork()
    if pid == 0:  # child: must get ForkedError, not hang or crash
        code = 1
        try:
            client.get(k)
        except mc.ForkedError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert client.get(k) == b"parent"  # parent unaffected


def test_store_config_objects_and_json_are_accepted(cluster):
    import json

    cfg = StoreConfig.from_dict(cluster.client_config(type="mooncake_store", num_workers=1))
    with Client(cfg) as c:
        c.put(unique(), b"1")
    with Client(json.dumps(cluster.client_config())) as c:
        assert c.exists(unique()) is False


def test_queued_small_gets_are_merged_and_each_gets_its_own_result(cluster):
    cfg = cluster.client_config(per_op_workers={"retrieve": 1})
    with Client(cfg) as c:
        keys = [unique() for _ in range(200)]
        values = [os.urandom(100 + i) for i in range(200)]
        assert c.batch_put(keys, values) == [0] * 200
        bufs = [bytearray(512) for _ in keys]
        ids = {c.submit("get", [k], [b]): i for i, (k, b) in enumerate(zip(keys, bufs))}
        missing_id = c.submit("get", [unique("nope")], [bytearray(8)])
        seen = {}
        deadline = time.monotonic() + 30
        while len(seen) < 201 and time.monotonic() < deadline:
            c.wait(1.0)
            for comp in c.drain():
                assert comp.id not in seen
                seen[comp.id] = comp
        assert len(seen) == 201
        for batch_id, i in ids.items():
            assert seen[batch_id].results == [len(values[i])]
            assert bytes(bufs[i][: len(values[i])]) == values[i]
        assert seen[missing_id].results == [-704] and seen[missing_id].status == 0
        st = c.stats()["retrieve"]
        assert st["completed"] == 201
        assert st["merged"] >= 1  # 201 batches queued behind one worker


def test_negative_sizes_are_invalid_arguments(client):
    k = unique()
    client.put(k, b"v" * 10)
    with pytest.raises(mc.InvalidArgumentError, match="negative"):
        client.get_into([k], [bytearray(10)], sizes=[-1])
    with pytest.raises(mc.InvalidArgumentError, match="negative"):
        client.put_from([k], [b"v" * 10], sizes=[-5])


def test_get_of_a_large_value_copies_it_once(cluster, client):
    """A 96 MiB get peaks near one copy of the value (no read buffer copied into bytes)."""
    import subprocess
    import sys

    key = unique("big")
    client.put(key, os.urandom(96 << 20))
    # VmHWM: this process's peak RSS (ru_maxrss would include the parent's, across exec).
    script = f"""
def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
from mooncake_cffi import Client
with Client({cluster.client_config()!r}) as c:
    c.exists({key!r})
    before = peak_kib()
    got = c.get({key!r})
    after = peak_kib()
    assert got is not None and len(got) == 96 << 20
    print((after - before) // 1024)
"""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd="/"
        )
    finally:
        client.remove(key, force=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    grown_mib = int(proc.stdout.split()[-1])
    assert 90 <= grown_mib < 96 * 1.5, grown_mib  # one copy (96 MiB), not two
