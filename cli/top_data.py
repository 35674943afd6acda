"""What ``mcl2 top`` shows, as plain data: one :class:`Sample` of a cluster per refresh, and the
per-operation rates and latency quantiles between two samples.

A refresh reads the master's admin API (``/health``, ``/metrics``, ``/get_segments_detail``):
the master's address and role, the leader, keys, memory, clients and every segment.  The
client side comes from :class:`OpSource` objects: :class:`ScrapeSource` reads a client's
Prometheus endpoint (:mod:`mooncake_cffi.metrics`: ``mooncake_cffi_op_*`` counters and the
``mooncake_cffi_op_duration_seconds`` histogram), :class:`ProbeSource` is a client mcl2 runs
itself, which puts, checks, gets and removes one small key of its own per refresh and reads
its own ``op_stats()``.  Both give cumulative counters and histogram buckets per
operation; :func:`op_rows` turns two readings into per-second rates and p50 / p99 over the
interval between them (interpolated inside a bucket, as Prometheus's
``histogram_quantile`` does).  Nothing here raises for a source or master that does not
answer: the reason goes to the sample's ``errors``.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mooncake_cffi.admin import AdminClient, AdminError, parse_prometheus

__all__ = [
    "SORT_KEYS",
    "OpReading",
    "OpSource",
    "ProbeSource",
    "Sample",
    "ScrapeSource",
    "op_rows",
    "quantile",
    "sample_cluster",
    "sort_segments",
]

#: Segment orders ``mcl2 top`` cycles through (``s``), the first being the default.
SORT_KEYS = ("use%", "used", "capacity", "name")
#: Size of the probe's value (bytes).
PROBE_BYTES = 4096


@dataclass
class OpReading:
    """Cumulative counters of one operation of one client, as read at one moment."""

    lane: str
    calls: float = 0.0
    keys: float = 0.0
    failed: float = 0.0
    timeouts: float = 0.0
    bytes: float = 0.0
    #: ``[(upper edge in seconds, cumulative count), ...]`` ending with ``+inf``.
    buckets: list[tuple[float, float]] = field(default_factory=list)


#: Readings by (source, client labels, operation).
Readings = dict[tuple[str, str, str], OpReading]


class OpSource:
    """Where per-operation figures come from; :meth:`read` never raises."""

    name = ""

    def read(self, errors: list[str]) -> Readings:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds (the probe's key and client)."""


class ScrapeSource(OpSource):
    """A client's Prometheus endpoint (``http://HOST:PORT/metrics``, path optional)."""

    def __init__(self, url: str, timeout: float) -> None:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        parsed = urllib.parse.urlsplit(text)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"--scrape {url!r} must look like http://HOST:PORT[/metrics]")
        self.host, self.port = parsed.hostname, parsed.port
        self.path = parsed.path or "/metrics"
        self.name = f"{self.host}:{self.port}"
        self.url = f"http://{self.name}{self.path}"
        self.timeout = timeout

    def text(self) -> str:
        """The endpoint's exposition; OSError or HTTPException when it cannot be read."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.path, headers={"Connection": "close"})
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise OSError(f"HTTP {response.status}")
            return body.decode(errors="replace")
        finally:
            conn.close()

    def read(self, errors: list[str]) -> Readings:
        try:
            text = self.text()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"scrape {self.url}: {getattr(exc, 'strerror', None) or exc}")
            return {}
        return readings_of_exposition(self.name, text)


def _client_label(labels: dict[str, str]) -> str:
    rest = {k: v for k, v in labels.items() if k not in ("lane", "op", "le", "error")}
    return ",".join(f"{k}={v}" for k, v in sorted(rest.items()))


_COUNTERS = {
    "mooncake_cffi_op_calls_total": "calls",
    "mooncake_cffi_op_keys_total": "keys",
    "mooncake_cffi_op_failed_calls_total": "failed",
    "mooncake_cffi_op_timeouts_total": "timeouts",
    "mooncake_cffi_op_transferred_bytes_total": "bytes",
}
_BUCKETS = "mooncake_cffi_op_duration_seconds_bucket"


def readings_of_exposition(source: str, text: str) -> Readings:
    """The per-operation readings in a Prometheus exposition of :mod:`mooncake_cffi.metrics`."""
    samples = parse_prometheus(text)
    out: Readings = {}

    def entry(labels: dict[str, str]) -> OpReading | None:
        op = labels.get("op")
        if not op:
            return None
        key = (source, _client_label(labels), op)
        if key not in out:
            out[key] = OpReading(lane=labels.get("lane", ""))
        return out[key]

    for name, attr in _COUNTERS.items():
        for labels, value in samples.get(name, []):
            reading = entry(labels)
            if reading is not None:
                setattr(reading, attr, value)
    for labels, value in samples.get(_BUCKETS, []):
        reading = entry(labels)
        if reading is None:
            continue
        try:
            edge = float(labels.get("le", "+Inf"))
        except ValueError:
            continue
        reading.buckets.append((edge, value))
    for reading in out.values():
        reading.buckets.sort()
    return out


#: The master's request counters behind each operation a client makes: (single-key
#: requests, batch requests); a batch's keys are its ``items``. The master counts every
#: client's requests, so these rows show what the whole cluster is doing without a client
#: of mcl2's own (no bytes, no latencies: the master measures neither).
MASTER_OPS: dict[str, tuple[str, str | None]] = {
    "exists": ("master_exist_key", "master_batch_exist_key"),
    "get": ("master_get_replica_list", "master_batch_get_replica_list"),
    "put": ("master_put_start", "master_batch_put_start"),
    "remove": ("master_remove", None),
}
#: The source name of the master's rows.
MASTER_SOURCE = "master"


def readings_of_master(metrics: Any) -> Readings:
    """Per-operation readings of the master's own counters (a parsed ``/metrics``)."""
    out: Readings = {}
    for op, (single, batch) in MASTER_OPS.items():
        calls = metrics.value(f"{single}_requests_total")
        if calls is None:
            continue
        keys, failed = calls, metrics.value(f"{single}_failures_total") or 0.0
        if batch is not None:
            calls += metrics.value(f"{batch}_requests_total") or 0.0
            keys += metrics.value(f"{batch}_items_total") or 0.0
            failed += metrics.value(f"{batch}_failures_total") or 0.0
        out[(MASTER_SOURCE, "", op)] = OpReading(lane="", calls=calls, keys=keys, failed=failed)
    return out


def readings_of_op_stats(source: str, stats: dict[str, dict[str, Any]]) -> Readings:
    """The readings of a client's ``op_stats()`` (buckets: batches under 2**i us)."""
    from mooncake_cffi.status import OP_LANE

    out: Readings = {}
    for op, st in stats.items():
        buckets: list[tuple[float, float]] = []
        running = 0.0
        counts = list(st.get("buckets") or [])
        for i, count in enumerate(counts[:-1]):
            running += count
            buckets.append((2**i * 1e-6, running))
        if counts:
            buckets.append((math.inf, running + counts[-1]))
        out[(source, "", op)] = OpReading(
            lane=OP_LANE.get(op, ""),
            calls=float(st.get("calls", 0)),
            keys=float(st.get("keys", 0)),
            failed=float(st.get("failed_calls", 0)),
            timeouts=float(st.get("timeouts", 0)),
            bytes=float(st.get("bytes", 0)),
            buckets=buckets,
        )
    return out


class ProbeSource(OpSource):
    """A client mcl2 runs: each :meth:`read` first puts, checks, gets and removes one small
    key of its own (``mcl2-top/<random>``), then reads the client's ``op_stats()``."""

    name = "probe"

    def __init__(self, client: Any) -> None:
        self.client = client
        self.key = f"mcl2-top/{uuid.uuid4().hex}"
        self.value = bytes(PROBE_BYTES)

    def read(self, errors: list[str]) -> Readings:
        from mooncake_cffi.errors import MooncakeError

        try:
            self.client.put(self.key, self.value)
            self.client.exists(self.key)
            self.client.get(self.key)
            self.client.remove(self.key, force=True)
        except MooncakeError as exc:
            errors.append(f"probe: {exc}")
        try:
            return readings_of_op_stats(self.name, self.client.op_stats())
        except MooncakeError as exc:
            errors.append(f"probe: {exc}")
            return {}

    def close(self) -> None:
        try:
            self.client.remove(self.key, force=True)
        except Exception:
            pass


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile (0..1) of cumulative ``buckets`` (edge, count), interpolated
    linearly inside its bucket; None without observations.  An answer in the last (+inf)
    bucket is the highest finite edge."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_edge, lower_count = 0.0, 0.0
    for edge, count in buckets:
        if count >= rank:
            if math.isinf(edge):
                return lower_edge
            if count == lower_count:
                return edge
            return lower_edge + (edge - lower_edge) * (rank - lower_count) / (count - lower_count)
        lower_edge, lower_count = edge, count
    return lower_edge


def _delta_buckets(
    now: list[tuple[float, float]], before: list[tuple[float, float]] | None
) -> list[tuple[float, float]]:
    if not before:
        return now
    old = dict(before)
    return [(edge, max(0.0, count - old.get(edge, 0.0))) for edge, count in now]


def op_rows(now: Readings, before: Readings | None, seconds: float) -> list[dict[str, Any]]:
    """One row per (source, client, operation) that ran: totals, and with a previous reading the
    rates per second and p50 / p99 (seconds) over the interval; else since the start."""
    rows = []
    for (source, client, op), r in sorted(now.items()):
        if not r.calls:
            continue  # an operation the client never ran
        prev = (before or {}).get((source, client, op))
        row: dict[str, Any] = {
            "source": source,
            "client": client,
            "op": op,
            "lane": r.lane,
            "calls": int(r.calls),
            "failed_calls": int(r.failed),
            "timeouts": int(r.timeouts),
        }
        if prev is not None and seconds > 0:
            for name, attr in (
                ("calls_per_s", "calls"),
                ("keys_per_s", "keys"),
                ("bytes_per_s", "bytes"),
                ("failed_per_s", "failed"),
                ("timeouts_per_s", "timeouts"),
            ):
                row[name] = max(0.0, getattr(r, attr) - getattr(prev, attr)) / seconds
            window = _delta_buckets(r.buckets, prev.buckets)
            row["window"] = "interval"
        else:
            for name in ("calls_per_s", "keys_per_s", "bytes_per_s"):
                row[name] = None
            row["failed_per_s"] = row["timeouts_per_s"] = None
            window = r.buckets
            row["window"] = "since start"
        row["p50_s"] = quantile(0.5, window)
        row["p99_s"] = quantile(0.99, window)
        rows.append(row)
    return rows


@dataclass
class Sample:
    """One refresh: the cluster as the master's admin API tells it, and the op readings."""

    taken: float
    master: dict[str, Any]
    keys: int | None
    memory: dict[str, int | None]
    clients: int | None
    segments: list[dict[str, Any]]
    readings: Readings
    errors: list[str]


def sample_cluster(
    admin_for: Callable[[], tuple[AdminClient, dict[str, Any]]],
    sources: Sequence[OpSource],
) -> Sample:
    """A :class:`Sample`: ``admin_for()`` gives the admin client of this refresh and what is
    known of the master (address, leader); it is asked each time, so a failover shows."""
    errors: list[str] = []
    master: dict[str, Any] = {}
    keys = clients = None
    memory: dict[str, int | None] = {"used_bytes": None, "capacity_bytes": None}
    segments: list[dict[str, Any]] = []
    readings: Readings = {}
    try:
        admin, master = admin_for()
        master = {**master, "admin": admin.url}
        health = admin.health()
        master.update(
            status=health.get("status"),
            role=health.get("role"),
            service_ready=health.get("service_ready"),
        )
        metrics = admin.metrics()
        summary = metrics.summary()
        keys, clients = summary["keys"], summary["clients"]
        readings.update(readings_of_master(metrics))
        memory = dict(summary["memory"])
        for s in admin.segments():
            capacity, used = s.capacity_bytes, s.used_bytes
            segments.append(
                {
                    "name": s.name,
                    "endpoint": s.endpoint,
                    "status": s.status,
                    "capacity_bytes": capacity,
                    "used_bytes": used,
                    "use_percent": (100.0 * (used or 0) / capacity) if capacity else None,
                }
            )
    except AdminError as exc:
        errors.append(str(exc))
    except Exception as exc:  # a master address that cannot be resolved (etcd down, ...)
        message = getattr(exc, "message", None) or str(exc)
        errors.append(str(message))
    for source in sources:
        readings.update(source.read(errors))
    return Sample(time.time(), master, keys, memory, clients, segments, readings, errors)


def sort_segments(
    segments: list[dict[str, Any]], by: str, reverse: bool = False
) -> list[dict[str, Any]]:
    """Segments in the order ``by`` (:data:`SORT_KEYS`): figures largest first, names A-Z;
    ``reverse`` turns it round."""
    if by == "name":
        return sorted(segments, key=lambda s: str(s["name"]), reverse=reverse)
    field_ = {"use%": "use_percent", "used": "used_bytes", "capacity": "capacity_bytes"}[by]
    return sorted(
        segments, key=lambda s: (s[field_] is not None, s[field_] or 0), reverse=not reverse
    )
