"""Reading the shim's counters: per lane (queue, threads, batch latency) and per operation.

A lane that the shared pool serves has no threads of its own; it still reports the calls
of the operations routed to it, from the per-operation counters, so every operation is
counted under its own lane whoever ran it.
"""

from __future__ import annotations

from typing import Any

from .. import status
from ..status import LANE_OPS, LANES, OPS
from .binding import check, ffi, lib

__all__ = ["integrity_stats", "lane_stats", "op_stats", "replica_choice_stats"]

_LANE_FIELDS = (
    "workers",
    "queued",
    "running",
    "pending",
    "submitted",
    "completed",
    "failed",
    "keys",
    "rejected",
    "mean_us",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
    "merged",
    "abandoned",
    "withdrawn",
)
_OP_FIELDS = (
    "calls",
    "keys",
    "failed_calls",
    "failed_keys",
    "bytes",
    "timeouts",
    "no_space",
    "sum_us",
)


def op_stats(handle: Any) -> dict[str, dict[str, Any]]:
    """Per-operation counters of a client handle."""
    st = ffi.new("struct mcs_op_stats *")
    out: dict[str, dict[str, Any]] = {}
    for code, name in enumerate(OPS):
        st.struct_size = ffi.sizeof("struct mcs_op_stats")
        check(lib.mcs_client_op_stats(handle, code, st))
        rec: dict[str, Any] = {f: getattr(st, f) for f in _OP_FIELDS}
        rec["buckets"] = list(st.buckets)
        rec["failures"] = {
            status.name(code): keys for code, keys in zip(st.error_codes, st.error_keys) if keys
        }
        out[name] = rec
    return out


def _percentile(buckets: list[int], p: float) -> float:
    """Upper edge (microseconds) of the histogram bucket holding the p-th percentile."""
    total = sum(buckets)
    if not total:
        return 0.0
    want = max(1, -(-total * p // 100))
    seen = 0
    for i, c in enumerate(buckets):
        seen += c
        if seen >= want:
            return float(2**i)
    return float(2 ** (len(buckets) - 1))


def lane_stats(handle: Any) -> dict[str, dict[str, Any]]:
    """Per-lane counters of a client handle (see :meth:`Client.stats`)."""
    st = ffi.new("struct mcs_lane_stats *")
    out: dict[str, dict[str, Any]] = {}
    ops = None
    for i, name in enumerate(LANES):
        st.struct_size = ffi.sizeof("struct mcs_lane_stats")
        check(lib.mcs_client_lane_stats(handle, i, st))
        rec: dict[str, Any] = {f: getattr(st, f) for f in _LANE_FIELDS}
        if name != "shared":
            ops = ops or op_stats(handle)
            mine = [ops[o] for o in LANE_OPS[name]]
            rec["bytes"] = sum(o["bytes"] for o in mine)
            failures: dict[str, int] = {}
            for o in mine:
                for err, keys in o["failures"].items():
                    failures[err] = failures.get(err, 0) + keys
            rec["failures"] = failures
            buckets = [sum(col) for col in zip(*(o["buckets"] for o in mine))]
            running = 0
            cumulative = []
            for i, c in enumerate(buckets[:-1]):
                running += c
                cumulative.append((float(2**i), running))
            rec["latency_buckets"] = cumulative  # [(upper edge in us, batches under it)]
        if rec["workers"] == 0 and name != "shared":
            calls = sum(o["calls"] for o in mine)
            rec.update(
                served_by="shared",
                submitted=calls,
                completed=calls,
                failed=sum(o["failed_calls"] for o in mine),
                keys=sum(o["keys"] for o in mine),
                mean_us=(sum(o["sum_us"] for o in mine) / calls) if calls else 0.0,
                p50_us=_percentile(buckets, 50),
                p90_us=_percentile(buckets, 90),
                p99_us=_percentile(buckets, 99),
            )
        out[name] = rec
    return out


_INTEGRITY_FIELDS = ("written", "verified", "retried", "failed")


def integrity_stats(handle: Any) -> dict[str, int | bool]:
    """The client's value-verification counters (see :mod:`mooncake_cffi.integrity`)."""
    st = ffi.new("struct mcs_integrity_stats *")
    st.struct_size = ffi.sizeof("struct mcs_integrity_stats")
    check(lib.mcs_client_integrity_stats(handle, st))
    out: dict[str, int | bool] = {"enabled": bool(st.enabled)}
    out.update({f: int(getattr(st, f)) for f in _INTEGRITY_FIELDS})
    return out


_CHOICE_FIELDS = ("suspects", "choices", "fallbacks", "marked", "retries", "recovered")


def replica_choice_stats() -> dict[str, int | bool]:
    """The process's read-failover counters (see :mod:`mooncake_cffi.failover`)."""
    st = ffi.new("struct mcs_replica_choice_stats *")
    st.struct_size = ffi.sizeof("struct mcs_replica_choice_stats")
    check(lib.mcs_replica_choice_stats(st))
    out: dict[str, int | bool] = {"active": bool(st.active), "seen": bool(st.seen)}
    out.update({f: int(getattr(st, f)) for f in _CHOICE_FIELDS})
    return out
