"""Reading a master's admin port for ``LocalCluster.status()``: health, keys, memory, segments.

Every reader takes ``get(path) -> (status, body)`` for the master to ask, records failures in
``errors`` instead of raising, and fills the fields it could read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ._common import HTTP_TIMEOUT, ClusterError

Getter = Callable[..., tuple[int, str]]
Samples = dict[str, list[tuple[dict[str, str], float]]]

_LINE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SUMMARY_MEM_RE = re.compile(r"Mem Storage: ([\d.]+ \w+) / ([\d.]+ \w+)")
_SUMMARY_KEYS_RE = re.compile(r"Keys: (\d+)")
_HUMAN_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_prometheus(text: str) -> Samples:
    """Samples of a Prometheus text exposition, by metric name: [(labels, value), ...]."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE_RE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL_RE.findall(match.group(2) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


def _scalar(samples: Samples, name: str) -> int | None:
    for labels, value in samples.get(name, []):
        if not labels:
            return int(value)
    return None


def _human_bytes(text: str) -> int | None:
    number, _, unit = text.partition(" ")
    factor = _HUMAN_UNITS.get(unit.upper())
    return None if factor is None else int(float(number) * factor)


def health(get: Getter, timeout: float = 1.0) -> dict[str, Any] | None:
    """The master's ``/health`` answer as a dict (None if it did not answer 200)."""
    try:
        code, body = get("/health", timeout=timeout)
    except OSError:
        return None
    if code != 200:
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return {"status": body.strip()}
    return parsed if isinstance(parsed, dict) else {"status": parsed}


def segments(get: Getter) -> list[str]:
    """Names of the segments mounted in the master (from ``/get_all_segments``)."""
    code, body = get("/get_all_segments")
    if code == 404:  # older masters: fall back to the per-segment metrics
        code, body = get("/metrics")
        if code != 200:
            raise ClusterError(f"/metrics answered HTTP {code}")
        found = parse_prometheus(body).get("segment_total_capacity_bytes", [])
        return [labels["segment"] for labels, _ in found if "segment" in labels]
    if code != 200:
        raise ClusterError(f"/get_all_segments answered HTTP {code}")
    return [line.strip() for line in body.splitlines() if line.strip()]


def _get(get: Getter, path: str, errors: list[str], timeout: float = 2.0) -> tuple[int, str] | None:
    try:
        code, body = get(path, timeout=timeout)
    except OSError as exc:
        errors.append(f"{path}: {exc}")
        return None
    if code != 200:
        errors.append(f"{path}: HTTP {code}")
    return code, body


def fill(get: Getter, result: dict[str, Any], errors: list[str]) -> None:
    """Fill ``health``, ``key_count``, ``active_clients`` and ``memory`` from the master."""
    got = _get(get, "/health", errors)
    if got is not None:
        try:
            parsed = json.loads(got[1])
        except ValueError:
            parsed = {"status": got[1].strip()}
        result["health"] = parsed if isinstance(parsed, dict) else {"status": parsed}

    memory = result["memory"]
    found = False
    got = _get(get, "/metrics", errors)
    if got is not None and got[0] == 200:
        samples = parse_prometheus(got[1])
        result["key_count"] = _scalar(samples, "master_key_count")
        result["active_clients"] = _scalar(samples, "master_active_clients")
        memory["total_bytes"] = _scalar(samples, "master_total_capacity_bytes")
        memory["used_bytes"] = _scalar(samples, "master_allocated_bytes")
        for metric, name in (
            ("segment_total_capacity_bytes", "total_bytes"),
            ("segment_allocated_bytes", "used_bytes"),
        ):
            for labels, value in samples.get(metric, []):
                if "segment" in labels:
                    entry = memory["segments"].setdefault(
                        labels["segment"], {"total_bytes": None, "used_bytes": None}
                    )
                    entry[name] = int(value)
                    found = True

    if result["key_count"] is None or memory["total_bytes"] is None:
        got = _get(get, "/metrics/summary", errors)
        if got is not None and got[0] == 200:
            keys = _SUMMARY_KEYS_RE.search(got[1])
            if keys and result["key_count"] is None:
                result["key_count"] = int(keys.group(1))
            mem = _SUMMARY_MEM_RE.search(got[1])
            if mem and memory["total_bytes"] is None:
                # The summary rounds to two decimals: approximate figures.
                memory["used_bytes"] = _human_bytes(mem.group(1))
                memory["total_bytes"] = _human_bytes(mem.group(2))
    if result["key_count"] is None:
        got = _get(get, "/get_all_keys", errors, timeout=5.0)
        if got is not None and got[0] == 200:
            result["key_count"] = sum(1 for line in got[1].splitlines() if line.strip())
    if not found:
        try:
            for name in segments(get):
                memory["segments"].setdefault(name, {"total_bytes": None, "used_bytes": None})
        except (OSError, ClusterError):
            pass


def report(c: Any) -> dict[str, Any]:
    """``LocalCluster.status()`` of cluster ``c`` (see there)."""
    errors: list[str] = []
    result: dict[str, Any] = {
        "state_dir": str(c.state_dir),
        "running": False,
        "healthy": False,
        "ha": c.ha,
        "metadata": c.metadata,
        "processes": {},
        "pids": c.pids,
        "ports": dict(c.ports or {}),
        "leader": None,
        "master_addr": None,
        "metadata_server": None,
        "metrics_url": None,
        "cluster_id": c.cluster_id,
        "segment_size": c.segment_size,
        "segment_sizes": list(c.segment_sizes),
        "loopback_confined": c.loopback_confined,
        "started_at": c.started_at,
        "health": None,
        "key_count": None,
        "active_clients": None,
        "memory": {"total_bytes": None, "used_bytes": None, "segments": {}},
        "logs": {role: proc.log for role, proc in c.procs.items()},
        "errors": errors,
    }
    if c.ports is None:
        errors.append("not started")
        return result
    result.update(master_addr=c.master_addr, metadata_server=c.metadata_server)
    for role, proc in c.procs.items():
        entry: dict[str, Any] = {"pid": proc.pid, "alive": c.alive(role)}
        if role.startswith("master"):
            index = c.master_roles.index(role)
            entry["metrics_url"] = c.master_metrics_url(index)
            got = None
            if entry["alive"]:
                got = health(lambda p, timeout=1.0, i=index: c._get(p, timeout, i))
            entry["role"] = (got or {}).get("role", "master" if got else None)
        result["processes"][role] = entry
    result["running"] = all(p["alive"] for p in result["processes"].values())
    for role, entry in result["processes"].items():
        if not entry["alive"]:
            errors.append(f"{role} process is not running")
    leader = c.leader()
    if leader is None:
        errors.append("no master is serving")
        return result
    result["leader"] = c.master_roles[leader]
    result["metrics_url"] = c.master_metrics_url(leader)
    fill(lambda p, timeout=HTTP_TIMEOUT: c._get(p, timeout, leader), result, errors)
    result["healthy"] = bool(
        result["running"]
        and result["health"] is not None
        and result["health"].get("status", "ok") == "ok"
    )
    return result
