"""What ``LocalCluster`` reads from its masters' admin ports: leader, health, keys, memory.

Every request goes through the package's one admin-API client,
:class:`mooncake_cffi.admin.AdminClient`: health from ``health()``, key count, clients and
memory totals from ``metrics().summary()``, per-segment capacity and use from ``segments()``.
:func:`report` never raises for an unreachable master: it records each
:class:`~mooncake_cffi.admin.AdminError` (its message names the URL) in ``errors`` and leaves
the fields it could not read as None.
"""

from __future__ import annotations

from typing import Any

from ..admin import AdminClient, AdminError
from ._common import HTTP_TIMEOUT, ClusterError

#: Seconds a master gets to answer ``/health`` when we only ask who leads.
PROBE_TIMEOUT = 1.0


def admin(c: Any, index: int, timeout: float = HTTP_TIMEOUT) -> AdminClient:
    """An admin-API client for master ``index`` of cluster ``c``."""
    return AdminClient(c.master_metrics_url(index), timeout=timeout)


def probe(c: Any, index: int, timeout: float = PROBE_TIMEOUT) -> dict[str, Any] | None:
    """Master ``index``'s ``/health`` answer, or None if it did not answer HTTP 200."""
    try:
        got = admin(c, index, timeout).health()
    except AdminError:
        return None
    return got if got.get("http_status") == 200 else None


def serves(c: Any, health: dict[str, Any] | None) -> bool:
    """True if a master whose ``/health`` said ``health`` serves clients (leads, in HA)."""
    if health is None or not health.get("service_ready", True):
        return False
    return not c.ha or health.get("role") == "leader"


def leader(c: Any, probes: dict[int, dict[str, Any] | None] | None = None) -> int | None:
    """Index of the first master of ``c`` that serves, or None; ``probes`` are ``/health``
    answers already read, by master index (the others are asked now)."""
    known = probes or {}
    for index, role in enumerate(c.master_roles):
        if role in c.procs and not c.alive(role):
            continue
        got = known[index] if index in known else probe(c, index)
        if serves(c, got):
            return index
    return None


def down(c: Any) -> list[str]:
    """Roles of ``c`` whose recorded process is not running (crashed, killed, stopped)."""
    return [role for role in c.procs if not c.alive(role)]


def serving_problem(
    c: Any,
    for_client: bool = True,
    gone: list[str] | None = None,
    probed: tuple[int | None] | None = None,
) -> str | None:
    """Why ``c`` cannot serve now, or None when it can (perhaps with some process down).

    A cluster serves while a master serves (leads, in HA) and, for a Mooncake client
    (``for_client``), its etcd (HA or etcd metadata) and its HTTP metadata server run and at
    least one storage node does; the admin API only needs the serving master.  ``gone`` are
    the roles already known to be down, ``probed`` holds the :func:`leader` already found (when
    not given, the masters are asked here, and only when nothing else is wrong).
    """
    if not c.procs or c.ports is None:
        return "it has not been started"
    gone_set = set(down(c) if gone is None else gone)
    if gone_set >= set(c.procs):
        return "none of its processes is running"
    if for_client and "etcd" in gone_set and (c.ha or c.metadata == "etcd"):
        return "its etcd is down" + (" (the HA masters elect their leader there)" if c.ha else "")
    if for_client and "metadata" in gone_set:
        return "its metadata server is down"
    if all(role in gone_set for role in c.master_roles):
        return "no master is running"
    if for_client and all(role in gone_set for role in c.storage_roles):
        return "no storage node is running"
    serving = leader(c) if probed is None else probed[0]
    if serving is None:
        if c.ha:
            return (
                "no master leads (after a leader stops, the standbys elect a new one in about 5 s)"
            )
        return "its master does not serve (its /health does not answer ready)"
    return None


def segment_names(c: Any) -> list[str]:
    """Names of the segments mounted in ``c``'s leading master (ClusterError if unreadable)."""
    try:
        return AdminClient(c.metrics_url, timeout=HTTP_TIMEOUT).segment_names()
    except AdminError as exc:
        raise ClusterError(str(exc)) from None


def segment_ids(c: Any) -> set[str]:
    """The segments mounted in ``c``'s leading master, each as ``NAME ID``: a storage node
    started again mounts a new segment id even if its name (a transfer port) was reused.
    Only the names when the master has no ``/get_segments_detail``; ClusterError if unreadable.
    """
    client = AdminClient(c.metrics_url, timeout=HTTP_TIMEOUT)
    try:
        return {f"{s.name} {s.extra.get('segment_id', '')}" for s in client.segments()}
    except AdminError as exc:
        if exc.status != 404:
            raise ClusterError(str(exc)) from None
    return set(segment_names(c))


def fill(client: AdminClient, result: dict[str, Any], errors: list[str]) -> bool:
    """Fill ``health``, ``key_count``, ``active_clients`` and ``memory`` of ``result`` from
    the master ``client`` speaks to; True if its ``/health`` answered HTTP 200."""
    answered = False
    try:
        got = client.health()
    except AdminError as exc:
        errors.append(str(exc))
    else:
        code = got.pop("http_status", None)
        answered = code == 200
        if not answered:
            errors.append(f"admin API {client.url}/health answered HTTP {code}")
        result["health"] = got

    memory = result["memory"]
    try:
        summary = client.metrics().summary()
    except AdminError as exc:
        errors.append(str(exc))
    else:
        result["key_count"] = summary["keys"]
        result["active_clients"] = summary["clients"]
        memory["total_bytes"] = summary["memory"]["capacity_bytes"]
        memory["used_bytes"] = summary["memory"]["used_bytes"]

    try:
        segments = client.segments()
    except AdminError as exc:
        errors.append(str(exc))
    else:
        for segment in segments:
            memory["segments"][segment.name] = {
                "total_bytes": segment.capacity_bytes,
                "used_bytes": segment.used_bytes,
            }
    return answered


def report(c: Any) -> dict[str, Any]:
    """``LocalCluster.status()`` of cluster ``c`` (see there)."""
    errors: list[str] = []
    result: dict[str, Any] = {
        "state_dir": str(c.state_dir),
        "running": False,
        "healthy": False,
        "serving": False,
        "down": [],
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
    probes: dict[int, dict[str, Any] | None] = {}
    for role, proc in c.procs.items():
        entry: dict[str, Any] = {"pid": proc.pid, "alive": c.alive(role)}
        if role.startswith("master"):
            index = c.master_roles.index(role)
            entry["metrics_url"] = c.master_metrics_url(index)
            got = probe(c, index) if entry["alive"] else None
            probes[index] = got
            entry["role"] = (got or {}).get("role", "master" if got else None)
        result["processes"][role] = entry
    result["down"] = [role for role, p in result["processes"].items() if not p["alive"]]
    for role in result["down"]:
        errors.append(f"{role} process is not running")
    serving = leader(c, probes)
    problem = serving_problem(c, gone=result["down"], probed=(serving,))
    result["serving"] = problem is None
    # Running: every process is up, or the cluster serves all the same (degraded, `down`
    # says what is missing), so that "running" never contradicts "serving".
    result["running"] = result["serving"] or not result["down"]
    if problem is not None:
        result["serving_problem"] = problem
    if serving is None:
        errors.append("no master is serving")
        return result
    result["leader"] = c.master_roles[serving]
    result["metrics_url"] = c.master_metrics_url(serving)
    answered = fill(admin(c, serving), result, errors)
    result["healthy"] = bool(
        not result["down"]
        and answered
        and result["health"] is not None
        and result["health"].get("status", "ok") == "ok"
    )
    return result
