"""The contract LMCache's NativeConnectorL2Adapter relies on, against a real cluster.

These tests drive :class:`mooncake_cffi.lmcache.MooncakeConnector` exactly as LMCache does
(submit, poll ``event_fd()``, ``drain_completions()``) but need no LMCache: they run in the
normal suite.  Each test uses its own key prefix, since the session cluster is shared and
Mooncake keeps the first value written.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import logging
import threading
import time
import uuid
import warnings
from typing import Any

import pytest
from lmcache_helpers import WAIT_S, readable

from mooncake_cffi import UnknownConfigKeyWarning
from mooncake_cffi.lmcache import MooncakeConnector
from mooncake_cffi.status import (
    MCS_E_CLOSED,
    MCS_E_DUPLICATE_KEY,
    MCS_E_OUTSIDE_L1,
    NO_AVAILABLE_HANDLE,
)
from mooncake_cffi.status import name as status_name


def buf(data: bytes | int) -> memoryview:
    """A writable byte memoryview over a ctypes array, like the ones LMCache passes."""
    if isinstance(data, int):
        return memoryview((ctypes.c_ubyte * data)())
    return memoryview((ctypes.c_ubyte * len(data)).from_buffer_copy(data))


def wait_for(conn: MooncakeConnector, ids: list[int]) -> dict[int, tuple]:
    """Poll the connector's fd and drain until every id completed; each exactly once."""
    got: dict[int, tuple] = {}
    fd = conn.event_fd()
    while len(got) < len(ids):
        assert readable(fd, WAIT_S), f"no completion within {WAIT_S} s for {set(ids) - set(got)}"
        for item in conn.drain_completions():
            assert item[0] not in got, f"completion {item[0]} delivered twice"
            got[item[0]] = item
    assert set(got) == set(ids)
    return got


def one(conn: MooncakeConnector, task_id: int) -> tuple[int, bool, str, list[bool] | None]:
    return wait_for(conn, [task_id])[task_id]


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def conn(cluster_config: dict[str, Any], prefix: str):
    connector = MooncakeConnector(**cluster_config, key_prefix=prefix)
    yield connector
    connector.close()


# LMCache-shaped keys: the model name may contain "/".
def keys(n: int, model: str = "org/model") -> list[str]:
    return [f"{model}@00000000@0@{i:032x}" for i in range(n)]


def test_store_lookup_load_round_trip_through_the_event_fd(conn):
    ks = keys(3)
    data = [bytes([i]) * (1000 + i) for i in range(3)]
    ok = one(conn, conn.submit_batch_set(ks, [buf(d) for d in data]))
    assert ok[1:] == (True, "", None)
    lookup = one(conn, conn.submit_batch_exists(ks + ["org/model@absent"]))
    assert lookup[1] is True and lookup[3] == [True, True, True, False]
    dst = [buf(len(d)) for d in data]
    load = one(conn, conn.submit_batch_get(ks, dst))
    assert load[1] is True and load[3] == [True, True, True]
    assert [bytes(b) for b in dst] == data


def test_event_fd_is_unreadable_once_everything_is_drained(conn):
    fd = conn.event_fd()
    assert not readable(fd, 0)
    ids = [conn.submit_batch_exists(keys(2)) for _ in range(3)]
    ids.append(conn.submit_batch_exists([]))  # a completion made by the connector itself
    wait_for(conn, ids)
    assert not readable(fd, 0.05)
    assert conn.drain_completions() == []


def test_load_is_a_hit_only_when_the_stored_size_equals_the_buffer_size(conn):
    k_small, k_large, k_exact = keys(3)
    one(conn, conn.submit_batch_set([k_small, k_large, k_exact], [buf(b"s" * 100)] * 3))
    dst = [buf(200), buf(50), buf(100)]  # larger, smaller, equal
    _id, ok, error, bools = one(conn, conn.submit_batch_get([k_small, k_large, k_exact], dst))
    assert bools == [False, False, True]
    assert ok is False and "another size" in error
    assert bytes(dst[2]) == b"s" * 100


def test_load_of_a_missing_key_is_a_miss_not_an_error(conn, caplog):
    with caplog.at_level(logging.WARNING, logger="mooncake_cffi.lmcache"):
        _id, ok, error, bools = one(conn, conn.submit_batch_get(keys(1), [buf(10)]))
    assert (ok, bools) == (False, [False])
    assert "1 missing" in error
    assert not caplog.records  # a miss is normal: nothing to warn about


def test_delete_forces_past_the_read_lease_and_counts_missing_keys_as_deleted(conn):
    k, absent = keys(2)
    one(conn, conn.submit_batch_set([k], [buf(b"v" * 64)]))
    assert one(conn, conn.submit_batch_get([k], [buf(64)]))[3] == [True]  # takes a read lease
    result = one(conn, conn.submit_batch_delete([k, absent]))
    assert result[1:] == (True, "", [True, True])
    assert one(conn, conn.submit_batch_exists([k]))[3] == [False]


def test_storing_an_existing_key_succeeds_and_keeps_the_first_value(conn):
    k = keys(1)
    one(conn, conn.submit_batch_set(k, [buf(b"first")]))
    assert one(conn, conn.submit_batch_set(k, [buf(b"other")]))[1] is True
    dst = buf(5)
    one(conn, conn.submit_batch_get(k, [dst]))
    assert bytes(dst) == b"first"


@pytest.mark.parametrize("kind", ["set", "get", "exists", "delete"])
def test_an_empty_batch_completes_empty_and_successfully(conn, kind):
    submit = getattr(conn, f"submit_batch_{kind}")
    task = submit([], []) if kind in ("set", "get") else submit([])
    _id, ok, error, bools = one(conn, task)
    assert ok is True and error == ""
    assert bools == (None if kind == "set" else [])


def test_a_repeated_key_fails_the_batch_without_raising(conn):
    k = keys(1) * 2
    _id, ok, error, bools = one(conn, conn.submit_batch_exists(k))
    assert ok is False and status_name(MCS_E_DUPLICATE_KEY) in error and bools == [False, False]
    assert one(conn, conn.submit_batch_set(k, [buf(1), buf(1)]))[1] is False


@pytest.mark.parametrize(
    "args",
    [
        (["k1", "k2"], [buf(1)]),  # fewer buffers than keys
        (["k1"], [None]),  # not a buffer
        (["k1"], [memoryview(b"read-only")]),  # a load needs writable buffers
        ([b"\xff"], [buf(1)]),  # keys are str
        (None, None),
    ],
)
def test_bad_arguments_fail_the_batch_without_raising(conn, args):
    _id, ok, error, bools = one(conn, conn.submit_batch_get(*args))
    assert ok is False and error
    assert bools is None or not any(bools)


def test_a_full_lane_fails_the_batch_at_once_instead_of_blocking(cluster_config, prefix):
    conn = MooncakeConnector(
        **cluster_config,
        num_workers=1,
        queue_capacity=1,
        key_prefix=prefix,
    )
    try:
        payload = buf(4 << 20)
        ids = [conn.submit_batch_set([f"k{i}"], [payload]) for i in range(12)]
        results = wait_for(conn, ids)
    finally:
        conn.close()
    refused = [r for r in results.values() if not r[1]]
    assert refused, "12 back-to-back 4 MiB stores never filled a one-batch lane"
    assert all("QUEUE_FULL" in r[2] for r in refused)
    assert any(r[1] for r in results.values())


def test_after_close_a_submit_returns_a_failed_completion(cluster_config, prefix):
    conn = MooncakeConnector(**cluster_config, key_prefix=prefix)
    conn.close()
    conn.close()  # idempotent
    assert conn.event_fd() == -1
    task = conn.submit_batch_exists(["k"])
    done = conn.drain_completions()
    assert len(done) == 1 and done[0][0] == task
    assert done[0][1] is False and status_name(MCS_E_CLOSED) in done[0][2]


def test_ids_are_unique_and_every_batch_completes_once_under_concurrent_submits(conn):
    ids: list[int] = []
    lock = threading.Lock()

    def submitter(t: int) -> None:
        for i in range(20):
            k = [f"t{t}-{i}"]
            task = (
                conn.submit_batch_set(k, [buf(b"x" * 256)])
                if i % 2
                else conn.submit_batch_exists(k)
            )
            with lock:
                ids.append(task)

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(ids) == len(set(ids)) == 80
    results = wait_for(conn, ids)
    assert all(r[1] for r in results.values())


def test_buffers_stay_valid_until_the_completion_is_drained(conn):
    ks = keys(8)
    task = conn.submit_batch_set(ks, [buf(bytes([i]) * 4096) for i in range(8)])
    gc.collect()  # the caller kept no reference to its memoryviews
    assert one(conn, task)[1] is True
    dst = [buf(4096) for _ in ks]
    assert one(conn, conn.submit_batch_get(ks, dst))[3] == [True] * 8
    assert [bytes(d) for d in dst] == [bytes([i]) * 4096 for i in range(8)]


def test_a_failure_is_logged_once_with_the_error_name(conn, caplog):
    with caplog.at_level(logging.WARNING, logger="mooncake_cffi.lmcache"):
        for _ in range(3):
            one(conn, conn.submit_batch_exists(["dup", "dup"]))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert "lookup" in warned[0] and status_name(MCS_E_DUPLICATE_KEY) in warned[0]


def test_key_prefixes_keep_namespaces_apart(cluster_config, prefix):
    with MooncakeConnector(**cluster_config, key_prefix=prefix + "a/") as a:
        with MooncakeConnector(**cluster_config, key_prefix=prefix + "b/") as b:
            one(a, a.submit_batch_set(["k"], [buf(b"1")]))
            assert one(a, a.submit_batch_exists(["k"]))[3] == [True]
            assert one(b, b.submit_batch_exists(["k"]))[3] == [False]


def test_adapter_params_take_lmcache_mooncake_store_json_verbatim(cluster_config, prefix):
    params = dict(
        cluster_config,
        type="mooncake_store",
        num_workers=2,
        per_op_workers={"lookup": 1, "retrieve": 1, "store": 2},
        eviction=None,  # a null is dropped; an eviction object is refused (it belongs outside)
        coalesce_keys=16,
        tile_bytes=1 << 20,
        key_prefix=prefix,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no key may be misread as Mooncake's
        conn = MooncakeConnector(**params)
    try:
        lanes = conn.stats()
        assert (lanes["lookup"]["workers"], lanes["retrieve"]["workers"]) == (1, 1)
        assert (lanes["store"]["workers"], lanes["shared"]["workers"]) == (2, 2)
        assert "key_prefix" not in conn.client.config.setup_config
        assert "coalesce_keys" not in conn.client.config.setup_config
    finally:
        conn.close()


def test_a_misspelled_mooncake_key_is_forwarded_with_a_warning(cluster_config, prefix):
    with pytest.warns(UnknownConfigKeyWarning, match="master_server_addr"):
        conn = MooncakeConnector(
            **cluster_config, master_server_address="127.0.0.1:1", key_prefix=prefix
        )
    conn.close()


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"num_workers": 0}, "num_workers must be a positive integer"),
        ({"per_op_workers": {"retrieve": "2"}}, r"per_op_workers\['retrieve'\]"),
        ({"queue_timeout": "soon"}, "queue_timeout"),
        ({"queue_capacity": -1}, "queue_capacity"),
        ({"register_l1": "yes"}, "register_l1"),
        ({"key_prefix": "a\0b"}, "key_prefix"),
        ({"max_capacity_gb": 1}, "top level"),
        ({"eviction": {"eviction_policy": "LRU"}}, "eviction is LMCache's.*top level"),
        ({"local_hostname": "127.0.0.1:9000"}, "carries a port"),
        ({"connect_timeout": float("inf")}, "connect_timeout.*finite"),
        ({"connect_timeout": float("nan")}, "connect_timeout.*finite"),
        ({"queue_timeout": float("inf")}, "queue_timeout.*finite"),
        ({"op_timeout": 0}, "op_timeout.*positive"),
        ({"op_timeout": "1"}, "op_timeout"),
        ({"tile_keys": 1 << 40}, "tile_keys"),
        ({"retry": {"attempts": 0}}, "retry.*attempts"),
        ({"retry": {"tries": 2}}, "retry.*unknown field 'tries'"),
        ({"retry": "yes"}, "retry"),
    ],
)
def test_bad_adapter_params_are_a_value_error_naming_the_key(cluster_config, extra, message):
    with pytest.raises(ValueError, match=message):
        MooncakeConnector(**dict(cluster_config, **extra))


def test_rdma_without_an_l1_region_fails_before_any_network_traffic():
    # Nothing listens on port 1: reaching the network would be a TransportError instead.
    params = {
        "local_hostname": "127.0.0.1",
        "metadata_server": "http://127.0.0.1:1/metadata",
        "master_server_addr": "127.0.0.1:1",
        "protocol": "rdma",
    }
    with pytest.raises(ValueError, match='no L1 memory descriptor.*"type": "plugin"'):
        MooncakeConnector(**params)


def test_tcp_does_not_register_l1_unless_asked(cluster_config, prefix):
    l1 = bytearray(1 << 20)
    with MooncakeConnector(**cluster_config, l1=l1, key_prefix=prefix) as conn:
        assert conn.client.l1_registered is False


def test_tcp_with_register_l1_round_trips_inside_l1_and_refuses_outside(cluster_config, prefix):
    arena = (ctypes.c_ubyte * (1 << 20))()
    view = memoryview(arena).cast("B")
    conn = MooncakeConnector(**cluster_config, l1=arena, register_l1=True, key_prefix=prefix)
    try:
        assert conn.client.l1_registered is True
        view[:4096] = b"L" * 4096
        assert one(conn, conn.submit_batch_set(["k"], [view[:4096]]))[1] is True
        assert one(conn, conn.submit_batch_get(["k"], [view[8192 : 8192 + 4096]]))[3] == [True]
        assert bytes(view[8192 : 8192 + 4096]) == b"L" * 4096
        outside = one(conn, conn.submit_batch_get(["k"], [buf(4096)]))
        assert outside[1] is False and status_name(MCS_E_OUTSIDE_L1) in outside[2]
    finally:
        conn.close()


@pytest.mark.skipif(
    importlib.util.find_spec("lmcache") is not None, reason="lmcache is installed here"
)
def test_the_plugin_adapter_says_how_to_install_lmcache_when_it_is_missing():
    import mooncake_cffi.lmcache as plugin

    with pytest.raises(ImportError, match=r"pip install 'lmcache>=0\.5\.4'.*'\.\[cpu,lmcache\]'"):
        plugin.MooncakeL2Adapter  # noqa: B018


def test_a_mooncake_failure_fails_the_batch_and_is_logged_by_name(make_cluster, caplog):
    small = make_cluster(segment_size="32 MB").start()
    with MooncakeConnector(**small.client_config()) as conn:
        with caplog.at_level(logging.WARNING, logger="mooncake_cffi.lmcache"):
            _id, ok, error, bools = one(conn, conn.submit_batch_set(["big"], [buf(64 << 20)]))
        assert ok is False and bools is None
        assert status_name(NO_AVAILABLE_HANDLE) in error
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1 and status_name(NO_AVAILABLE_HANDLE) in warned[0]
        assert one(conn, conn.submit_batch_exists(["big"]))[3] == [False]


def test_op_timeout_and_retry_reach_the_client_and_its_batches(make_cluster, caplog):
    """adapter_params take the deadline and the retry policy as Client does; a store into a
    full pool is tried again per the policy (slower) and completes once."""
    small = make_cluster(segment_size="32 MB").start()
    policy = {"attempts": 3, "backoff": 0.2, "jitter": 0.0}
    with MooncakeConnector(**small.client_config(), op_timeout=5, retry=policy) as conn:
        assert conn.client.op_timeout == 5.0
        with caplog.at_level(logging.WARNING, logger="mooncake_cffi.lmcache"):
            start = time.monotonic()
            _id, ok, error, _ = one(conn, conn.submit_batch_set(["big"], [buf(64 << 20)]))
            took = time.monotonic() - start
        assert ok is False and status_name(NO_AVAILABLE_HANDLE) in error
        assert took >= 0.55, took  # waits of 0.2 s and 0.4 s before the last try
        ids = [conn.submit_batch_set([f"k{i}"], [buf(b"v" * 10)]) for i in range(3)]
        assert all(done[1] for done in wait_for(conn, ids).values())
    with MooncakeConnector(**small.client_config()) as plain:
        start = time.monotonic()
        assert one(plain, plain.submit_batch_set(["big2"], [buf(64 << 20)]))[1] is False
        assert time.monotonic() - start < took


@pytest.mark.parametrize("value", ["-1", " -8", "1.5", "many", ""])
def test_the_mooncake_store_client_refuses_a_count_that_is_not_one(value):
    # LMCache hands the mooncake_store JSON's values over as strings.
    from mooncake_cffi.lmcache.extension import LMCacheMooncakeClient

    config = {
        "local_hostname": "127.0.0.1",
        "metadata_server": "http://127.0.0.1:1/metadata",
        "master_server_addr": "127.0.0.1:1",
        "queue_capacity": value,
    }
    with pytest.raises(ValueError, match=r"queue_capacity must be a non-negative integer"):
        LMCacheMooncakeClient(config, 1)
