"""mooncake_cffi.admin.AdminClient against a real master's admin HTTP port.

Every test writes keys under a prefix of its own (the session cluster is shared) and removes
them afterwards.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mooncake_cffi import Client
from mooncake_cffi.admin import (
    AdminClient,
    AdminError,
    admin_url_for_master,
    parse_prometheus,
)
from mooncake_cffi.cluster import LocalCluster, parse_size


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.client_config()) as c:
        yield c


@pytest.fixture
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient(cluster.metrics_url)


@pytest.fixture
def prefix(client: Client, cluster: LocalCluster) -> Iterator[bytes]:
    """A fresh key prefix; whatever the test stored under it is removed afterwards."""
    p = f"admin-{uuid.uuid4().hex[:10]}/".encode()
    yield p
    left = AdminClient(cluster.metrics_url).keys(p)
    if left:
        client.batch_remove(left, force=True)


def put(client: Client, keys: list[bytes], value: bytes = b"value") -> None:
    assert client.batch_put(keys, [value] * len(keys)) == [0] * len(keys)


def test_health_of_a_running_master_says_ok(admin: AdminClient) -> None:
    health = admin.health()
    assert health["status"] == "ok"
    assert health["http_status"] == 200
    assert health["service_ready"] is True


def test_keys_lists_only_the_prefix_sorted_as_raw_bytes(
    admin: AdminClient, client: Client, prefix: bytes
) -> None:
    keys = [prefix + name for name in (b"b", b"a", b"caf\xe9", b"c,d", b"z z")]
    put(client, keys)
    assert admin.keys(prefix) == sorted(keys)
    assert admin.keys(prefix + b"c") == [prefix + b"c,d", prefix + b"caf\xe9"]
    assert admin.keys(prefix + b"nothing") == []
    assert set(admin.iter_keys(prefix)) == set(keys)


def test_query_gives_size_and_replica_endpoint_and_none_for_a_missing_key(
    admin: AdminClient, client: Client, prefix: bytes
) -> None:
    put(client, [prefix + b"k"], b"x" * 1234)
    found = admin.query([prefix + b"k", prefix + b"missing"])
    info = found[prefix + b"k"]
    assert info is not None and found[prefix + b"missing"] is None
    assert info.size == 1234
    assert len(info.replicas) == 1
    replica = info.replicas[0]
    assert replica.kind == "memory" and replica.protocol == "tcp"
    endpoints = {s.endpoint for s in admin.segments()}
    assert replica.endpoint in endpoints
    single = admin.query_key(prefix + b"k")
    assert single is not None and single.size == 1234
    assert admin.query_key(prefix + b"missing") is None


def test_query_handles_commas_and_bytes_that_are_not_utf8(
    admin: AdminClient, client: Client, prefix: bytes
) -> None:
    keys = [prefix + b"a,b", prefix + b"caf\xe9", prefix + "café".encode(), prefix + b"pct%41"]
    put(client, keys, b"12345")
    found = admin.query(keys)
    assert list(found) == keys
    assert all(info is not None and info.size == 5 for info in found.values())


def test_query_refuses_a_key_the_http_api_cannot_carry(admin: AdminClient, prefix: bytes) -> None:
    for bad in (prefix + b"sp ace", prefix + b"amp&x", prefix + b"tab\t"):
        assert not admin.can_query(bad)
        with pytest.raises(ValueError, match="cannot be sent"):
            admin.query([bad])
    assert admin.can_query(prefix + b"ok/#?+")


def test_query_of_many_keys_is_split_into_batches(
    admin: AdminClient, client: Client, prefix: bytes
) -> None:
    keys = [prefix + f"{i:05d}-{'x' * 40}".encode() for i in range(1500)]  # ~80 KB of keys
    for i in range(0, len(keys), 500):
        put(client, keys[i : i + 500], b"v")
    found = admin.query(keys)
    assert len(found) == len(keys)
    assert all(info is not None and info.size == 1 for info in found.values())


def test_segments_report_the_storage_node_capacity(
    admin: AdminClient, cluster: LocalCluster
) -> None:
    segments = admin.segments()
    assert len(segments) == 1
    segment = segments[0]
    assert segment.capacity_bytes == parse_size(cluster.segment_size)
    assert segment.status == "OK"
    assert segment.used_bytes is not None and 0 <= segment.used_bytes <= segment.capacity_bytes
    assert admin.segment_names() == [segment.name]


def test_metrics_summary_counts_the_keys_and_memory(
    admin: AdminClient, client: Client, cluster: LocalCluster, prefix: bytes
) -> None:
    before = admin.metrics().summary()
    put(client, [prefix + b"m1", prefix + b"m2"], b"y" * 1000)
    after = admin.metrics().summary()
    assert after["keys"] >= before["keys"] + 2
    assert after["memory"]["capacity_bytes"] == parse_size(cluster.segment_size)
    assert after["memory"]["used_bytes"] >= before["memory"]["used_bytes"] + 2000
    assert after["requests"]["put"] >= before["requests"]["put"] + 2
    assert after["segments"] == 1
    assert "master_key_count" in admin.metrics_text()
    assert "Keys:" in admin.summary_text()


def test_parse_prometheus_reads_labels_and_skips_comments() -> None:
    text = '# HELP x y\n# TYPE x gauge\nx 3\ny{segment="a:1",k="v"} 2.5\nbad line\n'
    samples = parse_prometheus(text)
    assert samples == {"x": [({}, 3.0)], "y": [({"segment": "a:1", "k": "v"}, 2.5)]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_admin_port_raises_naming_the_url() -> None:
    port = free_port()
    admin = AdminClient(f"http://127.0.0.1:{port}", timeout=1.0)
    with pytest.raises(AdminError, match=f"127.0.0.1:{port}"):
        admin.health()


def test_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        admin = AdminClient(f"127.0.0.1:{port}", timeout=0.5)
        started = time.monotonic()
        with pytest.raises(AdminError, match="no answer within 0.5 s"):
            admin.metrics()
        assert time.monotonic() - started < 3.0


def test_a_port_that_is_not_the_admin_api_is_named_in_the_error(cluster: LocalCluster) -> None:
    # The metadata server is an HTTP server without these endpoints.
    host_port = cluster.metadata_server.split("/")[2]
    with pytest.raises(AdminError, match="does not serve /get_segments_detail"):
        AdminClient(f"http://{host_port}").segments()


@pytest.mark.parametrize(
    ("master", "url"),
    [
        ("10.0.0.5:50051", "http://10.0.0.5:9003"),
        ("node01", "http://node01:9003"),
        ("[::1]:50051", "http://[::1]:9003"),
    ],
)
def test_the_default_admin_url_is_the_masters_host_on_port_9003(master: str, url: str) -> None:
    assert admin_url_for_master(master) == url


@pytest.mark.parametrize("bad", ["https://h:1", "http://", "ftp://x", "http://h:notaport"])
def test_an_invalid_admin_url_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="admin URL"):
        AdminClient(bad)


def test_repr_and_url_normalisation() -> None:
    admin: Any = AdminClient("127.0.0.1:9100/")
    assert admin.url == "http://127.0.0.1:9100"
    assert "127.0.0.1:9100" in repr(admin)


@pytest.mark.parametrize("url", ["\x1b", "127.0.0.1:90\n03", "a b", "http://host\x7f:9003"])
def test_an_admin_url_with_a_control_character_or_white_space_is_refused_naming_it(url):
    with pytest.raises(ValueError, match="admin URL .* contains"):
        AdminClient(url)
