"""The master's ``/metrics`` (Prometheus text exposition), parsed.

:func:`parse_prometheus` reads any exposition into :data:`Samples`; :class:`Metrics` adds the
figures a human reads first (keys, memory, clients, request and failure counts), from the
metric names ``mooncake_master`` reports.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Metrics", "Samples", "parse_prometheus"]

#: Samples by metric name: ``[(labels, value), ...]`` in the order they appeared.
Samples = dict[str, list[tuple[dict[str, str], float]]]

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> Samples:
    """Samples of a Prometheus text exposition, by metric name: ``[(labels, value), ...]``."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


class Metrics:
    """The master's ``/metrics``, parsed, with the figures a human reads first."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = parse_prometheus(text)

    def value(self, name: str) -> float | None:
        """The unlabelled sample of ``name``, or None if the master did not report it."""
        for labels, value in self.samples.get(name, []):
            if not labels:
                return value
        return None

    def count(self, *names: str) -> int | None:
        """Sum of the unlabelled samples of ``names`` (None if none of them is present)."""
        values = [v for v in (self.value(n) for n in names) if v is not None]
        return int(sum(values)) if values else None

    def failures(self) -> int:
        """All failed requests and failed batch items the master counted."""
        total = 0.0
        for name in self.samples:
            if name.endswith(("_failures_total", "_failed_items_total")):
                total += sum(v for labels, v in self.samples[name] if not labels)
        return int(total)

    def summary(self) -> dict[str, Any]:
        """Keys, memory, clients, request counts and errors, as plain data."""
        return {
            "keys": self.count("master_key_count"),
            "memory": {
                "used_bytes": self.count("master_allocated_bytes"),
                "capacity_bytes": self.count("master_total_capacity_bytes"),
            },
            "segments": len(self.samples.get("segment_total_capacity_bytes", [])),
            "clients": self.count("master_active_clients"),
            "requests": {
                "put": self.count(
                    "master_put_start_requests_total", "master_batch_put_start_items_total"
                ),
                "get": self.count(
                    "master_get_replica_list_requests_total",
                    "master_batch_get_replica_list_items_total",
                ),
                "exists": self.count(
                    "master_exist_key_requests_total", "master_batch_exist_key_items_total"
                ),
                "remove": self.count("master_remove_requests_total"),
            },
            "failures": self.failures(),
            "evictions": self.count("master_successful_evictions_total"),
        }
