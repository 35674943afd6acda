"""Replica options through the drop-in, on local clusters of several storage nodes, next to
Mooncake's own client: replica counts on distinct nodes, preferred segments, and soft pins
surviving an eviction that takes unpinned keys."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from http_util import http_get
from store_helpers import MIB, Memory, stores, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import ReplicateConfig, SoftPinAction

ms = pytest.importorskip("mooncake.store")


def replica_segments(local: LocalCluster, key: str) -> list[str]:
    code, body = http_get(f"{local.metrics_url}/query_key?key={key}")
    if code != 200:
        return []
    doc: Any = json.loads(body)
    return [r["transport_endpoint_"] for r in (doc.get("data") or [])]


def _config(kind: str, **fields: Any) -> Any:
    """A ReplicateConfig: ours, or Mooncake's own (which the drop-in takes as well)."""
    if kind == "ours":
        return ReplicateConfig(**fields)
    rc = ms.ReplicateConfig()
    for name, value in fields.items():
        if isinstance(value, SoftPinAction):
            value = ms.SoftPinAction.__members__[value.name]
        setattr(rc, name, value)
    return rc


def _kinds(store_name: str) -> tuple[str, ...]:
    """The configs a store takes: Mooncake's takes only its own; the drop-in both."""
    return ("ours", "mooncakes") if store_name == "ours" else ("mooncakes",)


@pytest.mark.parametrize("kind", ["ours", "mooncakes"])
def test_replica_num_places_replicas_on_distinct_nodes(
    three_nodes: LocalCluster, kind: str
) -> None:
    with stores(three_nodes) as pair:
        src = Memory(4096, b"r" * 4096)
        for name, store in pair.items():
            if kind not in _kinds(name):
                continue
            t = tag(f"rep-{name}")
            two, three = _config(kind, replica_num=2), _config(kind, replica_num=3)
            assert store.put(f"{t}-put", b"x" * 10_000, two) == 0
            assert store.put_batch([f"{t}-b1", f"{t}-b2"], [b"y" * 5000] * 2, three) == 0
            assert store.batch_put_from([f"{t}-pf"], [src.ptr], [4096], two) == [0]
            assert store.put_from(f"{t}-pf1", src.ptr, 4096, three) == 0
            assert store.upsert(f"{t}-put", b"z" * 10_000, two) == 0
            assert store.put(f"{t}-one", b"w" * 1000) == 0  # the default: one replica
            expect = {"put": 2, "b1": 3, "b2": 3, "pf": 2, "pf1": 3, "one": 1}
            for suffix, count in expect.items():
                segments = replica_segments(three_nodes, f"{t}-{suffix}")
                assert len(segments) == count and len(set(segments)) == count, (name, suffix)
            assert store.get(f"{t}-put") == b"z" * 10_000


@pytest.mark.parametrize("how", ["preferred_segment", "preferred_segments"])
def test_a_preferred_segment_places_the_replica(three_nodes: LocalCluster, how: str) -> None:
    with stores(three_nodes) as pair:
        for target in three_nodes.segments():
            for name, store in pair.items():
                for kind in _kinds(name):
                    value = [target] if how == "preferred_segments" else target
                    key = tag(f"pref-{name}-{kind}")
                    assert store.put(key, b"p" * 4096, _config(kind, **{how: value})) == 0
                    assert replica_segments(three_nodes, key) == [target]


def test_refused_replica_options_give_mooncakes_codes(three_nodes: LocalCluster) -> None:
    with stores(three_nodes) as pair:
        src = Memory(64, b"s" * 64)

        def refused(s: Any, n: str) -> Any:
            zero = _config("mooncakes", replica_num=0)
            same_node = _config("mooncakes", prefer_alloc_in_same_node=True)
            t = tag(n)
            return (
                s.put(f"{t}-0", b"x", zero),
                s.put(f"{t}-1", b"x", same_node),
                s.put_from(f"{t}-2", src.ptr, 8, same_node),
                s.batch_put_from([f"{t}-3"], [src.ptr], [8], same_node),
                s.put_batch([f"{t}-4"], [b"x"], same_node),
                s.put(f"{t}-5", b"x", _config("mooncakes", replica_num=5)),  # more than nodes
            )

        answers = {name: refused(store, name) for name, store in pair.items()}
        assert answers["ours"] == answers["theirs"] == (-600, -600, -600, [-600], -600, 0)


@pytest.fixture
def evicting(make_cluster: Any) -> LocalCluster:
    """One 64 MB node whose master evicts half of the objects once 50% is used."""
    return make_cluster(
        "64 MB", master_args=["-eviction_high_watermark_ratio=0.5", "-eviction_ratio=0.5"]
    ).start()


def _fill(store: Any, prefix: str, count: int, size: int, config: Any = None) -> list[str]:
    keys = []
    for i in range(count):
        key = f"{prefix}-{i}"
        for _ in range(200):  # while eviction frees room, puts answer NO_AVAILABLE_HANDLE
            rc = (
                store.put(key, bytes([i % 251]) * size)
                if config is None
                else store.put(key, bytes([i % 251]) * size, config)
            )
            if rc == 0:
                break
            assert rc == -200, rc
            time.sleep(0.05)
        else:
            pytest.fail(f"{key} was never stored")
        keys.append(key)
    return keys


@pytest.mark.parametrize("name", ["theirs", "ours"])
def test_soft_pinned_keys_outlive_an_eviction_of_unpinned_ones(
    evicting: LocalCluster, name: str
) -> None:
    size = 2 * MIB
    with stores(evicting) as pair:
        store = pair[name]
        pin = _config(_kinds(name)[0], soft_pin_action=SoftPinAction.ENABLE)
        t = tag("soft")
        pinned = _fill(store, f"{t}-pinned", 6, size, pin)  # 12 of 64 MB
        early = _fill(store, f"{t}-early", 6, size)  # unpinned, as old as the pinned ones
        _fill(store, f"{t}-later", 40, size)  # 80 MB more: the master must evict
        deadline = time.monotonic() + 10
        while sum(store.batch_is_exist(early)) == len(early) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.batch_is_exist(pinned) == [1] * len(pinned)
        assert sum(store.batch_is_exist(early)) < len(early), "no unpinned key was evicted"
        assert store.get(pinned[0]) == bytes([0]) * size
