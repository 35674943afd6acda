"""Prometheus metrics of a real client: scraped over HTTP and compared with client.stats()."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from mooncake_cffi import LANES, Client, metrics

WORKERS = {"lookup": 1, "retrieve": 1, "store": 1, "delete": 1}


@pytest.fixture
def client(cluster_config: dict[str, Any]) -> Iterator[Client]:
    with Client({**cluster_config, "per_op_workers": WORKERS}) as c:
        yield c


def exercise(client: Client) -> None:
    """Some work on every lane, including a failure (a too-large put is no failure: absent)."""
    p = f"met-{uuid.uuid4().hex[:12]}/"
    keys = [f"{p}{i}" for i in range(5)]
    client.batch_put(keys, [b"x" * 100] * 5)
    client.batch_get(keys + [p + "missing"])
    client.batch_exists(keys)
    client.exists(keys[0])
    client.batch_remove(keys, force=True)
    client.submit("put", [p + "async"], [b"y"])
    assert client.wait(10)
    assert len(client.drain()) == 1
    # The shim posts an asynchronous batch's completion just before it counts the batch in
    # stats(): wait until no lane has a batch pending, so the figures stand still.
    deadline = time.monotonic() + 10
    while any(st["pending"] for st in client.stats().values()):
        assert time.monotonic() < deadline, "stats() kept showing pending batches"
        time.sleep(0.001)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def lane(name: str, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"lane": name, **extra}.items())


def test_a_scrape_over_http_shows_per_lane_figures_that_match_stats(client: Client) -> None:
    exercise(client)
    registry = CollectorRegistry()
    metrics.register(client, registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    stats = client.stats()  # nothing ran since the scrape
    got = samples(text)
    assert stats["store"]["completed"] >= 2 and stats["retrieve"]["keys"] >= 5
    for name in LANES:
        st = stats[name]
        for field in metrics.FIELDS:
            if field.stat in st:
                suffix = "_total" if field.kind == "counter" else ""
                value = got[(field.name + suffix, lane(name))]
                assert value == pytest.approx(st[field.stat] * field.scale), (name, field.stat)
        latency = metrics.LATENCY
        assert got[(latency + "_count", lane(name))] == st["completed"]
        assert got[(latency + "_sum", lane(name))] == pytest.approx(
            st["mean_us"] * st["completed"] * 1e-6
        )
        for q, stat in metrics.QUANTILES:
            assert got[(latency, lane(name, quantile=q))] == pytest.approx(st[stat] * 1e-6)
    assert "mooncake_cffi_batches_submitted_total" in text
    assert "# TYPE mooncake_cffi_batch_latency_seconds summary" in text


def test_importing_the_package_does_not_load_prometheus_client() -> None:
    code = (
        "import sys, mooncake_cffi\n"
        "assert 'prometheus_client' not in sys.modules, 'prometheus_client imported'\n"
        "assert 'mooncake_cffi.metrics' not in sys.modules, 'metrics imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd="/")


def test_without_prometheus_client_the_import_error_names_the_extra() -> None:
    code = "import sys\nsys.modules['prometheus_client'] = None\nimport mooncake_cffi.metrics\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert proc.returncode != 0
    assert "ImportError: mooncake_cffi.metrics needs prometheus_client" in proc.stderr
    assert "pip install prometheus_client" in proc.stderr
    assert "pip install '.[cpu,metrics]'" in proc.stderr


def test_two_clients_on_one_registry_are_told_apart_by_labels(
    cluster_config: dict[str, Any], client: Client
) -> None:
    registry = CollectorRegistry()
    with Client({**cluster_config, "per_op_workers": WORKERS}) as other:
        metrics.register(client, registry, labels={"client": "a"})
        with pytest.raises(ValueError, match="already registered"):
            metrics.register(client, registry, labels={"client": "c"})
        with pytest.raises(ValueError, match="same label names"):
            metrics.register(other, registry)
        with pytest.raises(ValueError, match="distinct labels"):
            metrics.register(other, registry, labels={"client": "a"})
        metrics.register(other, registry, labels={"client": "b"})
        other.exists("met-probe")
        got = samples(generate_latest(registry).decode())
        a = got[("mooncake_cffi_batches_completed_total", lane("lookup", client="a"))]
        b = got[("mooncake_cffi_batches_completed_total", lane("lookup", client="b"))]
        assert a == client.stats()["lookup"]["completed"]
        assert b == other.stats()["lookup"]["completed"] >= 1
    assert 'client="b"' not in generate_latest(registry).decode()  # closed: gone


def test_unregister_removes_the_client_and_then_the_collector(client: Client) -> None:
    registry = CollectorRegistry()
    metrics.register(client, registry)
    assert "mooncake_cffi_lane_workers" in generate_latest(registry).decode()
    assert metrics.unregister(client, registry) is True
    assert metrics.unregister(client, registry) is False
    assert "mooncake_cffi" not in generate_latest(registry).decode()
    metrics.register(client, registry)  # the registry accepts a new collector again
    assert "mooncake_cffi_lane_workers" in generate_latest(registry).decode()


def test_fields_that_stats_may_report_later_become_metrics(client: Client) -> None:
    """bytes, failures by error name and latency buckets: rows of the collector's table,
    shown here with a client whose stats() reports them on top of its real figures."""

    class Richer:
        def stats(self) -> dict[str, dict[str, Any]]:
            out = client.stats()
            for st in out.values():
                st["bytes"] = 4096
                st["failures"] = {"OBJECT_HAS_LEASE": 2, "TRANSFER_FAIL": 1}
                st["latency_buckets"] = [(100.0, 1), (1000.0, st["completed"])]
            return out

    exercise(client)
    richer = Richer()
    registry = CollectorRegistry()
    metrics.register(richer, registry)
    got = samples(generate_latest(registry).decode())
    completed = client.stats()["store"]["completed"]
    assert got[("mooncake_cffi_transferred_bytes_total", lane("store"))] == 4096
    assert got[("mooncake_cffi_failures_total", lane("store", error="OBJECT_HAS_LEASE"))] == 2
    hist = metrics.LATENCY_HISTOGRAM
    assert got[(hist + "_bucket", lane("store", le="0.0001"))] == 1
    assert got[(hist + "_bucket", lane("store", le="+Inf"))] == completed
    assert got[(hist + "_count", lane("store"))] == completed


def test_per_operation_series_match_op_stats(cluster) -> None:
    """mooncake_cffi_op_* series carry lane and op labels and equal Client.op_stats()."""
    from mooncake_cffi import Client, metrics

    registry = CollectorRegistry()
    with Client(cluster.client_config()) as client:
        metrics.register(client, registry)
        key = f"op-metrics-{os.getpid()}"
        client.put(key, b"0123456789")
        client.batch_exists([key, key + "-missing"])
        assert client.get(key) == b"0123456789"
        text = generate_latest(registry).decode()
        ops = client.op_stats()
    calls = float(ops["exists"]["calls"])
    assert f'mooncake_cffi_op_calls_total{{lane="lookup",op="exists"}} {calls}' in text
    assert 'mooncake_cffi_op_transferred_bytes_total{lane="store",op="put"} 10.0' in text
    assert (
        'mooncake_cffi_op_duration_seconds_bucket{lane="retrieve",le="+Inf",op="get"} 1.0' in text
    )
