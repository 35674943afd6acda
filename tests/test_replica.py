"""Replication: ReplicateConfig fields from the config, replicas on distinct storage nodes, and
reads of replicated keys after a storage node dies (ours next to Mooncake's own client).

Until the Client takes ``StoreConfig.replicate_fields()`` by itself, these tests build the
``mooncake.store.ReplicateConfig`` from it and pass it as ``replicate_config=``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from http_util import http_get

from mooncake_cffi import Client
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.config import StoreConfig
from mooncake_cffi.errors import MooncakeError

MIB = 1 << 20
#: Seconds the masters keep a dead node's segment: short, so that the suite stays fast.
CLIENT_TTL = 2


def replicate_config(fields: dict[str, Any]) -> Any:
    """A ``mooncake.store.ReplicateConfig`` with ``fields`` (from replicate_fields()) set."""
    import mooncake.store as ms

    rc = ms.ReplicateConfig()
    for name, value in fields.items():
        if name == "soft_pin_action":
            value = ms.SoftPinAction.__members__[value]
        setattr(rc, name, value)
    return rc


def replica_segments(local: LocalCluster, key: str) -> list[str]:
    """Segments holding ``key``'s replicas, in the master's order (``/query_key``)."""
    code, body = http_get(f"{local.metrics_url}/query_key?key={key}")
    assert code == 200, body
    return [r["transport_endpoint_"] for r in json.loads(body)["data"]]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence UnknownConfigKeyWarning: whether Mooncake-side key lists name these keys (the
    shim's cluster_id, the ReplicateConfig fields) is not what these tests check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


# -- replicate_fields ---------------------------------------------------------------------


def test_replicate_fields_come_from_the_json() -> None:
    cfg = StoreConfig.from_dict(
        {
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "replica_num": 2,
            "with_soft_pin": True,
            "soft_pin_ttl_ms": "5000",
            "with_hard_pin": "false",
            "preferred_segment": "127.0.0.1:12345",
        }
    )
    fields = cfg.replicate_fields()
    assert fields == {
        "replica_num": 2,
        "soft_pin_action": "ENABLE",
        "soft_pin_ttl_ms": 5000,
        "with_hard_pin": False,
        "preferred_segment": "127.0.0.1:12345",
    }
    rc = replicate_config(fields)
    assert rc.replica_num == 2 and rc.preferred_segment == "127.0.0.1:12345"
    assert StoreConfig.from_dict({"local_hostname": "h"}).replicate_fields() == {}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("replica_num", 0, "replica_num must be a positive integer"),
        ("replica_num", "two", "replica_num must be a positive integer"),
        ("replica_num", -1, "replica_num must be a positive integer"),
        ("with_soft_pin", "maybe", "with_soft_pin must be true or false"),
        ("soft_pin_action", "KEEP", "soft_pin_action must be PRESERVE, ENABLE or DISABLE"),
        ("soft_pin_ttl_ms", "1.5", "soft_pin_ttl_ms must be a positive integer"),
        ("preferred_segment", "node01", "preferred_segment must name a segment as host:port"),
    ],
)
def test_bad_replicate_fields_are_named(key: str, value: Any, message: str) -> None:
    with _quiet():  # Mooncake's setup does not read these keys
        cfg = StoreConfig.from_dict({"local_hostname": "127.0.0.1", key: value})
    with pytest.raises(ValueError, match=message):
        cfg.replicate_fields()


# -- placement and node loss --------------------------------------------------------------


@pytest.fixture
def three_nodes(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_cluster("64 MB", storage_nodes=3, client_ttl=CLIENT_TTL).start()


def test_replicas_land_on_distinct_storage_nodes(three_nodes: LocalCluster) -> None:
    with _quiet():
        cfg = StoreConfig.from_dict({**three_nodes.client_config(), "replica_num": 2})
    rc = replicate_config(cfg.replicate_fields())
    with Client(cfg, replicate_config=rc) as client:
        for i in range(12):
            client.put(f"placed-{i}", bytes([i]) * 50_000)
        for i in range(12):
            segments = replica_segments(three_nodes, f"placed-{i}")
            assert len(segments) == 2, segments
            assert len(set(segments)) == 2, f"both replicas of placed-{i} on {segments[0]}"
            assert set(segments) <= set(three_nodes.segments())
            assert client.get(f"placed-{i}") == bytes([i]) * 50_000


def _time_to_success(read: Callable[[str], bytes | None], keys: dict[str, bytes]) -> float:
    """Seconds until every key reads back its value (each attempt answers; 30 s at most)."""
    start = time.monotonic()
    pending = dict(keys)
    while pending:
        for key, value in list(pending.items()):
            t0 = time.monotonic()
            got = read(key)
            assert time.monotonic() - t0 < 5.0, f"a read of {key} took over 5 s"
            if got == value:
                del pending[key]
            else:
                assert got in (None, b""), f"{key} read back wrong bytes"
        if time.monotonic() - start > 30:
            pytest.fail(f"{len(pending)} replicated keys still unreadable 30 s after the kill")
        if pending:
            time.sleep(0.05)
    return time.monotonic() - start


def test_replicated_keys_read_again_after_a_storage_node_dies(
    three_nodes: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from mooncake.store import MooncakeDistributedStore

    cfg = three_nodes.client_config()
    rc = replicate_config({"replica_num": 2})
    values = {f"survive-{i}": bytes([i + 1]) * 100_000 for i in range(24)}
    ours = Client(cfg, replicate_config=rc)
    theirs = MooncakeDistributedStore()
    assert (
        theirs.setup(
            cfg["local_hostname"],
            cfg["metadata_server"],
            0,
            16 * MIB,
            "tcp",
            "",
            cfg["master_server_addr"],
        )
        == 0
    )
    try:
        ours.batch_put(list(values), list(values.values()))
        placement = {key: replica_segments(three_nodes, key) for key in values}
        # Kill the node that holds the FIRST replica of the most keys: reads pick it first.
        firsts: dict[str, int] = {}
        for segments in placement.values():
            firsts[segments[0]] = firsts.get(segments[0], 0) + 1
        doomed_segment = max(firsts, key=firsts.__getitem__)
        doomed = {k: v for k, v in values.items() if placement[k][0] == doomed_segment}
        role = _role_of_segment(three_nodes, doomed_segment)
        three_nodes.kill(role)
        killed_at = time.monotonic()

        results: dict[str, float] = {}
        failures: list[BaseException] = []
        errors_seen: set[str] = set()

        def our_read(key: str) -> bytes | None:
            try:
                return ours.get(key)
            except MooncakeError as exc:  # typed, retryable: the node is gone
                errors_seen.add(exc.name)
                return None

        def measure(name: str, read: Callable[[str], bytes | None]) -> None:
            try:
                results[name] = _time_to_success(read, doomed)
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        threads = [
            threading.Thread(target=measure, args=("mooncake_cffi", our_read)),
            threading.Thread(target=measure, args=("MooncakeDistributedStore", theirs.get)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        if failures:
            raise failures[0]
        assert set(results) == {"mooncake_cffi", "MooncakeDistributedStore"}, results
        # Keys whose replicas avoided the dead node never stopped being readable.
        for key, value in values.items():
            if doomed_segment not in placement[key]:
                assert ours.get(key) == value
        with capsys.disabled():
            print(
                f"\n[replica] {len(doomed)} keys with their first replica on {role} "
                f"({doomed_segment}); time to read all again after SIGKILL "
                f"(client_ttl={CLIENT_TTL}s): "
                + ", ".join(f"{n} {t:.2f}s" for n, t in results.items())
                + f"; total {time.monotonic() - killed_at:.2f}s; our errors meanwhile: "
                + (", ".join(sorted(errors_seen)) or "none")
            )
    finally:
        ours.close()
        theirs.close()


def _role_of_segment(local: LocalCluster, segment: str) -> str:
    """The storage role whose node mounted ``segment``: the node's segment name carries the
    client port it logged when it came up."""
    port = segment.rsplit(":", 1)[1]
    for role in local.storage_roles:
        text = local.log_path(role).read_text(errors="replace")
        if f"created client on port {port} " in text:
            return role
    raise AssertionError(f"no storage node logged segment {segment}")
