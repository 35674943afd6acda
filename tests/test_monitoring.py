"""The monitoring stack against real processes: Prometheus, its rules, a Grafana dashboard.

* ``promtool check rules`` / ``check config`` and ``promtool test rules`` on deploy/prometheus
  (and a rule weakened on purpose must fail its unit test: the tests have teeth);
* every query of deploy/grafana/mooncake-cffi.json names a series that a live client
  (:mod:`mooncake_cffi.metrics`) or the live master exports;
* a real Prometheus (Debian's ``prometheus``), started here on 127.0.0.1 with a free port and
  a temporary config, scrapes a client under load and the master, loads the rules, and is
  asked through its HTTP API for the series the metrics reference names (per lane, per
  operation, the latency histograms), for every dashboard query, and for the rules' state.

Tests that need ``promtool`` or ``prometheus`` skip, saying so, when the package is missing
(``apt-get install prometheus``; scripts/test.sh installs it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import free_port
from http_util import http_get
from ops_load import start_load, stop_load

from mooncake_cffi import metrics
from mooncake_cffi.admin import parse_prometheus
from mooncake_cffi.cluster import LocalCluster

REPO = Path(__file__).resolve().parent.parent
RULES_DIR = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "mooncake-cffi.json"

needs_promtool = pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool is not installed (apt-get install prometheus)"
)
needs_prometheus = pytest.mark.skipif(
    not shutil.which("prometheus"),
    reason="prometheus is not installed (apt-get install prometheus)",
)

#: What operators page on (issue 29), and the alert of each.
PAGED_ON = {
    "errors": "MooncakeClientErrors",
    "timeouts": "MooncakeClientTimeouts",
    "queue full": "MooncakeQueueFull",
    "a segment near full": "MooncakeSegmentNearFull",
    "no leader": "MooncakeNoLeader",
}

# -- the rules -------------------------------------------------------------------------------


def _promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_checks_the_rules_and_the_example_config() -> None:
    rules = _promtool("check", "rules", "rules.yml")
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 7 rules found" in rules.stdout
    config = _promtool("check", "config", "prometheus.example.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_promtool_unit_tests_the_rules() -> None:
    done = _promtool("test", "rules", "rules_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_paged_on_has_a_rule_and_a_unit_test() -> None:
    rules = (RULES_DIR / "rules.yml").read_text()
    tests = (RULES_DIR / "rules_test.yml").read_text()
    for what, alert in PAGED_ON.items():
        assert f"- alert: {alert}\n" in rules, what
        firing = re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels:", tests)
        assert firing, f"rules_test.yml never expects {alert} ({what}) to fire"


@needs_promtool
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("> 0.9", "> 0.99"),  # a segment near full
        ("> 0.01", "> 0.5"),  # errors
        ("ha_standby_state{job=\"mooncake-master\"} == 0", "ha_standby_state == 3"),
        ("for: 1m\n        labels:\n          severity: warning\n        annotations:\n"
         "          summary: \"the {{ $labels.lane }}", "for: 30m\n        labels:\n"
         "          severity: warning\n        annotations:\n          summary: \"the "
         "{{ $labels.lane }}"),  # queue full
    ],
)  # fmt: skip
def test_a_weakened_rule_fails_its_unit_test(tmp_path: Path, old: str, new: str) -> None:
    rules = (RULES_DIR / "rules.yml").read_text()
    assert old in rules
    (tmp_path / "rules.yml").write_text(rules.replace(old, new, 1))
    shutil.copy(RULES_DIR / "rules_test.yml", tmp_path / "rules_test.yml")
    done = _promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


# -- the dashboard against what is exported ----------------------------------------------------

#: Words of PromQL that are not series names.
_PROMQL_WORDS = {
    "sum", "count", "max", "min", "avg", "rate", "irate", "increase", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "or", "and", "unless",
    "vector", "label_values", "absent", "instance", "le", "op", "lane", "error", "segment",
    "job", "client", "bool", "offset",
}  # fmt: skip


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard: its panels' targets and its variables'."""
    dash = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var.get("type") == "query":
            query = var["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def series_names(query: str) -> set[str]:
    """The series a PromQL query names (label values, strings and durations left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)  # label values
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations
    text = re.sub(r"\{[^}]*\}", "", text)  # matchers
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w not in _PROMQL_WORDS and not w.startswith("__")}


def exported_names(text: str) -> set[str]:
    return set(parse_prometheus(text))


@pytest.fixture(scope="module")
def load(cluster: LocalCluster) -> Iterator[str]:
    """A client of the session cluster under load: ``host:port`` of its metrics."""
    port = free_port()
    proc = start_load(
        cluster.client_config(), port, f"mon-{uuid.uuid4().hex[:8]}", cluster.client_env()
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_load(proc)


def _live_names(cluster: LocalCluster, load: str) -> set[str]:
    deadline = time.monotonic() + 30
    while True:  # until the load has failed a key (OBJECT_HAS_LEASE), so failures appear
        client = http_get(f"http://{load}/metrics")[1]
        if "mooncake_cffi_op_failures_total" in client or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    master = http_get(f"{cluster.metrics_url}/metrics")[1]
    return exported_names(client) | exported_names(master)


def test_every_dashboard_query_names_a_series_the_client_or_master_exports(
    cluster: LocalCluster, load: str
) -> None:
    exported = _live_names(cluster, load) | {"up"}  # up: Prometheus's own, per target
    queries = dashboard_queries()
    assert len(queries) >= 15
    named: set[str] = set()
    for query in queries:
        names = series_names(query)
        assert names, f"no series in {query!r}"
        missing = names - exported
        assert not missing, f"{query!r} names {sorted(missing)}, which nothing exports"
        named |= names
    # It shows both sides: the client's operations and lanes, the master's segments.
    assert {"mooncake_cffi_op_calls_total", "mooncake_cffi_op_duration_seconds_bucket"} <= named
    assert {"mooncake_cffi_lane_queued_tiles", "mooncake_cffi_batches_rejected_total"} <= named
    assert {"segment_allocated_bytes", "ha_standby_state", "master_key_count"} <= named


def test_every_rule_names_a_series_the_client_or_master_exports(
    cluster: LocalCluster, load: str
) -> None:
    exported = _live_names(cluster, load) | {"up"}
    rules = (RULES_DIR / "rules.yml").read_text()
    exprs = re.findall(r"expr: \|\n((?:\s{10}.*\n)+)|expr: (.*)\n", rules)
    assert len(exprs) == 7
    for block, line in exprs:
        missing = series_names(block or line) - exported
        assert not missing, f"{block or line!r} names {sorted(missing)}"


def test_the_dashboard_is_grafana_json_with_unique_panels() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "mooncake-cffi" and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["title"] and p["targets"] and p["datasource"]["uid"] == "${datasource}"
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
    assert dash["templating"]["list"][0]["type"] == "datasource"


# -- a real Prometheus -------------------------------------------------------------------------


class Prometheus:
    """Debian's prometheus on 127.0.0.1, with a config and a data directory under ``root``."""

    def __init__(self, root: Path, master: str, client: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        shutil.copy(RULES_DIR / "rules.yml", root / "rules.yml")
        (root / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - rules.yml\n"
            "scrape_configs:\n"
            f"  - job_name: mooncake-master\n    static_configs:\n      - targets: ['{master}']\n"
            f"  - job_name: mooncake-cffi\n    static_configs:\n      - targets: ['{client}']\n"
        )
        self.log = open(root / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.root = root

    def ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, (self.root / "prometheus.log").read_text()[-3000:]
            try:
                if http_get(f"{self.url}/-/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.3)

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10)
        data = json.loads(body)
        assert status == 200 and data["status"] == "success", (path, params, body[:500])
        return data["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def wait_for(self, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The result of ``expr`` once it is not empty."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            assert time.monotonic() < deadline, f"no result for {expr!r}"
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def prometheus(
    cluster: LocalCluster, load: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    if not shutil.which("prometheus"):
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    master = cluster.metrics_url.split("//", 1)[1]
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), master, load)
    try:
        server.ready()
        # Two scrapes of each target at least, so that rate() has two points.
        server.wait_for('count_over_time(up{job="mooncake-cffi"}[1m]) >= 3')
        server.wait_for('count_over_time(up{job="mooncake-master"}[1m]) >= 3')
        yield server
    finally:
        server.stop()


def _values(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


@needs_prometheus
def test_prometheus_scrapes_the_client_and_the_master(prometheus: Prometheus) -> None:
    targets = prometheus.api("targets")["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == {
        "mooncake-master": "up",
        "mooncake-cffi": "up",
    }, targets


@needs_prometheus
def test_prometheus_has_every_documented_series_per_lane_and_per_op(
    prometheus: Prometheus,
) -> None:
    lanes = _values(prometheus.wait_for("mooncake_cffi_lane_workers"), "lane")
    assert set(lanes) == {"lookup", "retrieve", "store", "delete", "shared"}
    assert lanes["lookup"] == 1 and lanes["retrieve"] == 1  # the load's per_op_workers
    for field in metrics.FIELDS:
        name = field.name + ("_total" if field.kind == "counter" else "")
        result = prometheus.query(name)
        assert {r["metric"]["lane"] for r in result} >= {"lookup", "retrieve", "store"}, name
    for field in metrics.OP_FIELDS:
        result = prometheus.query(field.name + "_total")
        ops = {r["metric"]["op"]: r["metric"]["lane"] for r in result}
        assert {"put": "store", "exists": "lookup", "remove": "delete"}.items() <= ops.items()
    for name in (metrics.LATENCY + "_count", metrics.LATENCY_HISTOGRAM + "_bucket"):
        assert prometheus.query(name), name
    failures = prometheus.wait_for(f'{metrics.OP_FAILURES}_total{{error="OBJECT_HAS_LEASE"}}')
    assert {r["metric"]["op"] for r in failures} == {"remove"}


@needs_prometheus
def test_prometheus_sees_the_load_as_rates_and_latency_quantiles(prometheus: Prometheus) -> None:
    rates = _values(
        prometheus.wait_for("sum by (op) (rate(mooncake_cffi_op_calls_total[5s])) > 0"), "op"
    )
    assert {"put", "exists", "get_buffer", "remove", "size"} <= set(rates), rates
    assert all(v > 1 for v in rates.values()), rates
    p99 = _values(
        prometheus.query(
            "histogram_quantile(0.99, sum by (op, le) "
            "(rate(mooncake_cffi_op_duration_seconds_bucket[5s])))"
        ),
        "op",
    )
    p50 = _values(
        prometheus.query(
            "histogram_quantile(0.5, sum by (op, le) "
            "(rate(mooncake_cffi_op_duration_seconds_bucket[5s])))"
        ),
        "op",
    )
    for op in ("put", "exists", "remove"):
        assert 0 < p50[op] <= p99[op] < 5, (op, p50, p99)
    bytes_ = _values(
        prometheus.query("sum by (op) (rate(mooncake_cffi_op_transferred_bytes_total[5s]))"), "op"
    )
    assert bytes_["put"] > rates["put"] * 4 * 16 * 1024 * 0.5  # 4 x 16 KiB per call


@needs_prometheus
def test_prometheus_has_the_masters_figures(cluster: LocalCluster, prometheus: Prometheus) -> None:
    segments = _values(prometheus.wait_for("segment_total_capacity_bytes"), "segment")
    for name in cluster.segments():
        assert segments[name] > 0
    assert prometheus.query('ha_standby_state{job="mooncake-master"} == 0')  # it leads
    for name in ("master_key_count", "master_allocated_bytes", "master_total_capacity_bytes"):
        assert prometheus.query(name), name
    put = prometheus.wait_for(
        'sum(rate(master_batch_put_start_items_total{job="mooncake-master"}[5s])) > 0'
    )
    assert float(put[0]["value"][1]) > 0


@needs_prometheus
def test_prometheus_loads_the_rules_and_only_the_loads_failures_alert(
    prometheus: Prometheus,
) -> None:
    groups = prometheus.api("rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(PAGED_ON.values()) <= set(rules)
    for name, rule in rules.items():
        assert rule["health"] == "ok", (name, rule.get("lastError"))
    # The load removes a key it has just read now and then (OBJECT_HAS_LEASE): some of its
    # remove calls fail, and the errors alert takes that up (pending: it needs 5 minutes).
    deadline = time.monotonic() + 30
    while True:
        alerts = prometheus.api("alerts")["alerts"]
        if alerts or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    seen = {(a["labels"]["alertname"], a["labels"].get("op")) for a in alerts}
    assert seen == {("MooncakeClientErrors", "remove")}, alerts
    assert all(a["state"] == "pending" for a in alerts)


@needs_prometheus
def test_prometheus_answers_every_dashboard_query(prometheus: Prometheus) -> None:
    empty = []
    for query in dashboard_queries():
        expr = query.replace("$__rate_interval", "5s").replace("$client", ".*")
        if expr.startswith("label_values("):
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", expr).groups()
            values = prometheus.api(f"label/{label}/values", **{"match[]": metric})
            assert values, expr
            continue
        if not prometheus.query(expr):  # status success: the query is valid PromQL
            empty.append(expr)
    assert not empty, f"queries without data while a load runs: {empty}"
