"""Prometheus metrics of clients, read from ``Client.stats()`` when Prometheus scrapes.

``register(client)`` adds a collector to a ``prometheus_client`` registry (the default one
unless another is given); ``prometheus_client.start_http_server`` or any of its exposition
helpers then serve it.  Nothing runs between scrapes: a scrape calls ``client.stats()`` once
per registered client, so a client pays nothing for metrics it is not asked for, and nothing
at all unless this module is imported (``import mooncake_cffi`` does not import it).

Per-operation series (``mooncake_cffi_op_*``, from ``Client.op_stats()``) carry ``lane`` and
``op`` labels: calls, keys, failed calls, bytes, timeouts, keys refused for lack of space,
failed keys by error name and a latency histogram.  Every per-lane series has a ``lane``
label (``lookup``, ``retrieve``, ``store``, ``delete``,
``shared``); the lane says the operation (lookup: exists and size; retrieve: get; store: put and
upsert; delete: remove; shared: the pool serving lanes without workers of their own).  The
table :data:`FIELDS` maps ``stats()`` fields to metrics; fields ``stats()`` does not report are
skipped, so new fields only need a row.  Needs ``prometheus_client`` (the ``metrics`` extra:
``pip install '.[cpu,metrics]'`` from the clone).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "mooncake_cffi.metrics needs prometheus_client, which is not installed: "
        "pip install prometheus_client (from a clone of mooncake-cffi: "
        "pip install '.[cpu,metrics]')"
    ) from exc

from .errors import MooncakeError
from .status import OP_LANE

__all__ = ["FIELDS", "OP_FIELDS", "Field", "ClientCollector", "register", "unregister"]

_US = 1e-6  # stats() latencies are in microseconds; Prometheus wants seconds


@dataclass(frozen=True)
class Field:
    """How one numeric ``stats()`` field of a lane becomes a metric family."""

    stat: str  #: the field's name in ``client.stats()[lane]``
    name: str  #: metric name (a counter gets ``_total`` appended on exposition)
    kind: str  #: ``"counter"`` or ``"gauge"``
    help: str
    scale: float = 1.0  #: multiplies the field's value (e.g. microseconds to seconds)


#: stats() fields exposed one-to-one, per lane.
FIELDS: tuple[Field, ...] = (
    Field("workers", "mooncake_cffi_lane_workers", "gauge",
          "Worker threads of the lane (0: served by the shared pool)"),
    Field("queued", "mooncake_cffi_lane_queued_tiles", "gauge",
          "Queue depth: tiles of batches waiting for a worker"),
    Field("running", "mooncake_cffi_lane_running_tiles", "gauge",
          "In flight: tiles being executed by the lane's workers"),
    Field("pending", "mooncake_cffi_lane_pending_batches", "gauge",
          "Batches accepted and not yet completed"),
    Field("submitted", "mooncake_cffi_batches_submitted", "counter",
          "Batches accepted by the lane (calls)"),
    Field("completed", "mooncake_cffi_batches_completed", "counter",
          "Batches completed by the lane"),
    Field("failed", "mooncake_cffi_batches_failed", "counter",
          "Completed batches whose status was an error"),
    Field("rejected", "mooncake_cffi_batches_rejected", "counter",
          "Submits refused because the lane's queue stayed full"),
    Field("keys", "mooncake_cffi_keys", "counter",
          "Keys in completed batches"),
    Field("merged", "mooncake_cffi_merged_calls", "counter",
          "Mooncake calls that served several queued batches at once"),
    Field("bytes", "mooncake_cffi_transferred_bytes", "counter",
          "Bytes moved by completed batches"),
    Field("max_us", "mooncake_cffi_batch_latency_max_seconds", "gauge",
          "Longest batch latency (submit to completion) since the client started", _US),
)  # fmt: skip

#: Quantiles of the latency summary, from these stats() fields.
QUANTILES: tuple[tuple[str, str], ...] = (("0.5", "p50_us"), ("0.9", "p90_us"), ("0.99", "p99_us"))

#: op_stats() fields exposed per operation, with labels ``lane`` and ``op``.
OP_FIELDS: tuple[Field, ...] = (
    Field("calls", "mooncake_cffi_op_calls", "counter", "Calls (batches) of the operation"),
    Field("keys", "mooncake_cffi_op_keys", "counter", "Keys in the operation's calls"),
    Field("failed_calls", "mooncake_cffi_op_failed_calls", "counter",
          "Calls whose caller saw a failure"),
    Field("bytes", "mooncake_cffi_op_transferred_bytes", "counter",
          "Bytes moved by the operation"),
    Field("timeouts", "mooncake_cffi_op_timeouts", "counter",
          "Calls that gave up waiting at their deadline"),
    Field("no_space", "mooncake_cffi_op_no_space_keys", "counter",
          "Keys refused with NO_AVAILABLE_HANDLE (the cluster's memory is full)"),
)  # fmt: skip
OP_FAILURES = "mooncake_cffi_op_failures"
OP_DURATION = "mooncake_cffi_op_duration_seconds"

LATENCY = "mooncake_cffi_batch_latency_seconds"
FAILURES = "mooncake_cffi_failures"
LATENCY_HISTOGRAM = "mooncake_cffi_batch_duration_seconds"


class ClientCollector(Collector):
    """Collects the lane and per-operation statistics of one or more clients at each scrape.

    Clients are held weakly: a client that is garbage collected, or closed, simply stops
    appearing.  Several clients in one collector are told apart by their extra labels.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: list[tuple[weakref.ref[Any], dict[str, str]]] = []
        self._label_names: tuple[str, ...] | None = None

    def add(self, client: Any, labels: Mapping[str, str] | None = None) -> None:
        """Collect ``client`` too, its series carrying ``labels`` besides ``lane``."""
        extra = {str(k): str(v) for k, v in (labels or {}).items()}
        if "lane" in extra or "error" in extra or "quantile" in extra:
            raise ValueError("labels 'lane', 'error' and 'quantile' are set by the collector")
        with self._lock:
            self._prune()
            names = tuple(sorted(extra))
            if self._label_names is not None and names != self._label_names:
                raise ValueError(
                    f"every client of one registry needs the same label names: "
                    f"{list(self._label_names)} were used before, not {list(names)}"
                )
            for ref, other in self._clients:
                if ref() is client:
                    raise ValueError("this client is already registered")
                if other == extra:
                    raise ValueError(
                        f"a client with labels {extra} is already registered: give each "
                        "client distinct labels, e.g. labels={'client': 'name'}"
                    )
            self._label_names = names
            self._clients.append((weakref.ref(client), extra))

    def remove(self, client: Any) -> bool:
        """Stop collecting ``client``; False if it was not collected here."""
        with self._lock:
            before = len(self._clients)
            self._clients = [(r, x) for r, x in self._clients if r() not in (client, None)]
            return len(self._clients) < before

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._clients)

    def _prune(self) -> None:
        self._clients = [(r, x) for r, x in self._clients if r() is not None]

    def describe(self) -> Iterable[Metric]:
        """The families this collector produces (names only), for the registry's clash check."""
        return self._families(self._label_names or ())

    def _families(self, extra: tuple[str, ...]) -> list[Metric]:
        labels = ["lane", *extra]
        fams: list[Metric] = []
        for f in FIELDS:
            cls = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
            fams.append(cls(f.name, f.help, labels=labels))
        fams.append(
            Metric(LATENCY, "Batch latency, submit to completion, since the client started "
                   "(quantiles are bucket upper edges)", "summary")
        )  # fmt: skip
        fams.append(
            CounterMetricFamily(FAILURES, "Failed keys by error name", labels=[*labels, "error"])
        )
        fams.append(HistogramMetricFamily(LATENCY_HISTOGRAM, "Batch latency", labels=labels))
        op_labels = ["lane", "op", *extra]
        for f in OP_FIELDS:
            fams.append(CounterMetricFamily(f.name, f.help, labels=op_labels))
        fams.append(
            CounterMetricFamily(
                OP_FAILURES, "Failed keys by operation and error name", labels=[*op_labels, "error"]
            )
        )
        fams.append(
            HistogramMetricFamily(OP_DURATION, "Call latency by operation", labels=op_labels)
        )
        return fams

    def collect(self) -> Iterator[Metric]:
        """One scrape: ``stats()`` of every live client, as metric families."""
        with self._lock:
            self._prune()
            clients = [(r(), x) for r, x in self._clients]
            extra = self._label_names or ()
        fams = {m.name: m for m in self._families(extra)}
        seen: set[str] = set()
        for client, labels in clients:
            if client is None or getattr(client, "closed", False):
                continue
            try:
                stats = client.stats()
            except MooncakeError:  # closed (or forked): nothing to report
                continue
            for lane, st in stats.items():
                values = [lane, *(labels[k] for k in extra)]
                self._add_lane(fams, seen, values, dict(zip(["lane", *extra], values)), st)
            op_stats = getattr(client, "op_stats", None)
            if op_stats is not None:
                try:
                    ops = op_stats()
                except MooncakeError:
                    continue
                for op, st in ops.items():
                    self._add_op(
                        fams, seen, [OP_LANE.get(op, ""), op, *(labels[k] for k in extra)], st
                    )
        for name, fam in fams.items():
            if name in seen:
                yield fam

    @staticmethod
    def _add_lane(
        fams: dict[str, Any],
        seen: set[str],
        values: list[str],
        label_map: dict[str, str],
        st: Mapping[str, Any],
    ) -> None:
        for f in FIELDS:
            v = st.get(f.stat)
            if v is not None:
                fams[f.name].add_metric(values, float(v) * f.scale)
                seen.add(f.name)
        completed = st.get("completed")
        mean = st.get("mean_us")
        if completed is not None and mean is not None:
            fam = fams[LATENCY]
            for q, stat in QUANTILES:
                if st.get(stat) is not None:
                    fam.add_sample(LATENCY, {**label_map, "quantile": q}, st[stat] * _US)
            fam.add_sample(LATENCY + "_count", label_map, float(completed))
            fam.add_sample(LATENCY + "_sum", label_map, mean * completed * _US)
            seen.add(LATENCY)
        failures = st.get("failures")  # {error name: failed keys}, when stats() reports it
        if isinstance(failures, Mapping):
            for error, count in failures.items():
                fams[FAILURES].add_metric([*values, str(error)], float(count))
            seen.add(FAILURES)
        buckets = st.get("latency_buckets")  # [(upper edge in us, cumulative count), ...]
        if buckets:
            edges = [(f"{edge * _US:.9g}", float(count)) for edge, count in buckets]
            if edges[-1][0] != "+Inf":
                edges.append(("+Inf", float(completed if completed is not None else 0)))
            total = (mean or 0.0) * (completed or 0) * _US
            fams[LATENCY_HISTOGRAM].add_metric(values, edges, total)
            seen.add(LATENCY_HISTOGRAM)

    @staticmethod
    def _add_op(
        fams: dict[str, Any], seen: set[str], values: list[str], st: Mapping[str, Any]
    ) -> None:
        for f in OP_FIELDS:
            v = st.get(f.stat)
            if v is not None:
                fams[f.name].add_metric(values, float(v))
                seen.add(f.name)
        for error, count in (st.get("failures") or {}).items():
            fams[OP_FAILURES].add_metric([*values, str(error)], float(count))
            seen.add(OP_FAILURES)
        buckets = st.get("buckets")  # batches under 2**i microseconds; the last: the rest
        if buckets:
            edges, running = [], 0
            for i, c in enumerate(buckets[:-1]):
                running += c
                edges.append((f"{2**i * _US:.9g}", float(running)))
            edges.append(("+Inf", float(running + buckets[-1])))
            fams[OP_DURATION].add_metric(values, edges, float(st.get("sum_us", 0.0)) * _US)
            seen.add(OP_DURATION)


_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, ClientCollector] = (
    weakref.WeakKeyDictionary()
)


def register(
    client: Any,
    registry: CollectorRegistry | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> ClientCollector:
    """Expose ``client``'s lane and operation statistics on ``registry`` (default:
    prometheus_client's).

    Returns the registry's :class:`ClientCollector` (one per registry, created on first use).
    A second client on the same registry needs ``labels`` that tell it apart, e.g.
    ``labels={"client": "decode-0"}`` (every client of a registry uses the same label names).
    """
    reg = REGISTRY if registry is None else registry
    with _lock:
        collector = _collectors.get(reg)
        if collector is None:
            collector = ClientCollector()
            collector.add(client, labels)
            reg.register(collector)
            _collectors[reg] = collector
        else:
            collector.add(client, labels)
    return collector


def unregister(client: Any, registry: CollectorRegistry | None = None) -> bool:
    """Stop exposing ``client`` on ``registry``; the collector leaves the registry with its
    last client.  False if the client was not registered there."""
    reg = REGISTRY if registry is None else registry
    with _lock:
        collector = _collectors.get(reg)
        if collector is None or not collector.remove(client):
            return False
        if len(collector) == 0:
            reg.unregister(collector)
            del _collectors[reg]
        return True
