"""Bringing a local cluster's processes up: the start order, and waiting until each answers.

:func:`start_all` is one attempt of :meth:`~.local.LocalCluster.start`: etcd, then the metadata
server, the masters and the storage nodes, each group waited for before the next is spawned.
:func:`restart` starts one recorded process again and waits for it the same way.  ``c`` is the
:class:`~.local.LocalCluster`.

A process that exits while it is waited for raises :class:`EarlyExit` (``start()`` tries again
with fresh ports, since a port picked a moment ago may have been taken meanwhile); a wait that
runs out of time raises :class:`~._common.ClusterError`.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import _argv, _status, loopback
from ._common import ClusterError, http_get, tail
from ._procs import Proc

POLL_INTERVAL = 0.1
#: Seconds a process that failed to come back after restart() gets to exit on SIGTERM.
_STOP_TIMEOUT = 10.0


class EarlyExit(ClusterError):
    """A process we started exited before it answered."""


def start_all(c: Any, deadline: float) -> None:
    """Spawn every process of ``c`` on fresh ports; return once a master serves and every
    segment is mounted (EarlyExit or ClusterError otherwise; the caller stops what started)."""
    c.procs = {}
    c._token = secrets.token_hex(16)
    if c.ha and c.cluster_id is None:
        c.cluster_id = f"mcs-local-{secrets.token_hex(4)}"
    lib = loopback.library()
    c.loopback_confined = lib is not None
    if lib is None:
        warnings.warn(loopback.MISSING, RuntimeWarning, stacklevel=4)
    c._assign_ports()
    roles = ["etcd", "metadata", *c.master_roles, *c.storage_roles]
    if c.placement is not None:
        c.addresses = {role: c.placement(role)[0] for role in roles}
    c.started_at = time.time()
    if "etcd_client" in (c.ports or {}):
        c._spawn("etcd", *_argv.etcd(c))
        wait(c, "etcd", lambda: etcd_ready(c), deadline)
    if c.metadata == "http":
        c._spawn("metadata", *_argv.metadata(c))
        wait(c, "the metadata server", lambda: metadata_ready(c), deadline)
    for index, role in enumerate(c.master_roles):
        c._spawn(role, *_argv.master(c, index), confine=True)
    wait(c, "a serving master", lambda: c.leader() is not None, deadline)
    cluster_env = {"MC_STORE_CLUSTER_ID": c.cluster_id} if c.ha and c.cluster_id else {}
    for index, role in enumerate(c.storage_roles):
        c._spawn(role, *_argv.storage(c, index), confine=True, env=cluster_env)
    wait(
        c,
        f"{c.storage_nodes} mounted segment(s)",
        lambda: len(c.segments()) >= c.storage_nodes,
        deadline,
    )
    for role in c.procs:
        if not c.alive(role):
            raise EarlyExit(exit_reason(c, role))


def restart(c: Any, role: str, deadline: float) -> None:
    """Spawn the recorded process of ``role`` again, as it was, and wait until it answers.

    The readiness checks are :meth:`~.local.LocalCluster.restart`'s (see there).  If it does
    not answer by ``deadline`` it is stopped again and ClusterError gives its log's last lines.
    """
    if c.ports is None or not c.procs:
        raise ClusterError(f"the cluster in {c.state_dir} has not been started")
    old = c.procs.get(role)
    if old is None:
        raise ClusterError(
            f"cannot restart {role!r}: this cluster has no such process "
            f"(its roles: {', '.join(c.procs)})"
        )
    if c.alive(role):
        raise ClusterError(
            f"cannot restart {role}: it is still running (pid {old.pid}); kill() it first"
        )
    what, ready = _readiness(c, role)
    proc = Proc(
        role=role,
        argv=list(old.argv),
        log=old.log,
        marker=old.marker,
        env=dict(old.env),
        prefix=list(old.prefix),
    )
    try:
        if role in c.master_roles or role in c.storage_roles:
            _argv.runnable(Path(proc.argv[0]))
            proc.env.update(_argv.child_env(proc.argv))  # as today's wheel needs, not its own
        c._launch(proc)
        wait(c, what, ready, deadline, roles=[role])
    except ClusterError as exc:
        proc.stop(c._token, _STOP_TIMEOUT)
        raise failure(c, f"restarting {role}: {exc}", roles=[role]) from None
    except OSError as exc:
        proc.stop(c._token, _STOP_TIMEOUT)
        raise failure(c, f"cannot restart {role}: {exc}", roles=[role]) from exc


def _readiness(c: Any, role: str) -> tuple[str, Callable[[], bool]]:
    """(what is waited for, a check of it) after ``role`` is started again."""
    if role == "etcd":
        return "etcd", lambda: etcd_ready(c)
    if role == "metadata":
        return "the metadata server", lambda: metadata_ready(c)
    if role in c.master_roles:
        index = c.master_roles.index(role)
        # The storage nodes that run mount their segments again in a master that forgot them.
        nodes = sum(c.alive(r) for r in c.storage_roles)

        def master_ready() -> bool:
            if _status.probe(c, index) is None or c.leader() is None:
                return False
            return bool(len(c.segments()) >= nodes)

        return f"{role} to answer and a master to serve {nodes} segment(s)", master_ready
    # A storage node mounts a new segment (a new transfer port in its name, a new id); the
    # master may list its old one until the client TTL has passed.
    try:
        before = _status.segment_ids(c)
    except ClusterError:
        before = set()
    return f"{role} to mount its segment", lambda: bool(_status.segment_ids(c) - before)


def etcd_ready(c: Any) -> bool:
    code, body = http_get(f"http://{c.etcd_endpoint}/health", timeout=1.0)
    return code == 200 and '"true"' in body


def metadata_ready(c: Any) -> bool:
    code, _ = http_get(f"{c.metadata_server}?key=mcs-probe", timeout=1.0)
    return code in (200, 404)


def exit_reason(c: Any, role: str) -> str:
    code = c.procs[role].exit_code() if role in c.procs else None
    status = f" with status {code}" if code is not None else ""
    return f"{role} ({Path(c.procs[role].argv[0]).name}) exited during startup{status}"


def wait(
    c: Any,
    what: str,
    ready: Callable[[], bool],
    deadline: float,
    roles: Iterable[str] | None = None,
) -> None:
    """Poll ``ready`` until it is true; EarlyExit if one of ``roles`` (default: every process)
    exits meanwhile, ClusterError at ``deadline``."""
    watched = list(c.procs if roles is None else roles)
    while True:
        for role in watched:
            if not c.alive(role):
                raise EarlyExit(exit_reason(c, role))
        try:
            if ready():
                return
        except (OSError, ClusterError):
            pass
        if time.monotonic() >= deadline:
            hint = ""
            for role in c.storage_roles:
                if role in c.procs and "segment size is 0" in tail(c.log_path(role), 200):
                    hint = f" ({role} read its segment size as 0)"
            raise ClusterError(f"timed out waiting for {what}{hint}")
        time.sleep(POLL_INTERVAL)


def failure(c: Any, reason: str, roles: Iterable[str] | None = None) -> ClusterError:
    """ClusterError with ``reason`` and the last lines of the logs of ``roles`` (default all)."""
    procs = [c.procs[r] for r in (c.procs if roles is None else roles) if r in c.procs]
    logs = "".join(f"\n--- last lines of {p.log} ---\n{tail(Path(p.log))}" for p in procs)
    return ClusterError(reason + logs)
