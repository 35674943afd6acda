"""``LocalCluster``: a throw-away Mooncake cluster on 127.0.0.1, shaped like production.

It starts, from the installed Mooncake wheel's ELF binaries (never its Python wrappers):

* optionally ``etcd`` (Debian's ``etcd-server``), for HA masters and/or as metadata server;
* optionally the wheel's HTTP metadata server (``python -m mooncake.http_metadata_server``);
* one ``mooncake_master``, or ``M`` of them in HA mode (``-enable_ha`` on etcd, oplog on);
* ``N`` storage nodes (``mooncake_client``), each contributing its own segment size;

waits until a master leads and every segment is mounted, and records what it started in a
private ``state.json`` so that another process can query, restart or stop it (:meth:`load`).
See :mod:`._startup` for the start order and the waiting, :mod:`._procs` for how a recorded
process is recognised before it is signalled, and :mod:`._statedir` for how the state
directory is kept safe.

Loopback only: every process is told to listen on 127.0.0.1, and the ones whose listening
sockets Mooncake hard-codes to the wildcard address (the transfer engine's ports, the
master's built-in metadata server) run with the package's ``libmcs_loopback.so`` preloaded,
which turns a wildcard ``bind()`` into one on 127.0.0.1 (see :mod:`.loopback`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _argv, _shape, _startup, _statedir, _status, loopback
from ._common import HOST, ClusterError, free_ports
from ._procs import Proc

__all__ = ["METADATA_MODES", "LocalCluster", "Placement"]

#: ``placement(role) -> (address, argv prefix)``: where a process of the cluster runs.
Placement = Callable[[str], tuple[str, Sequence[str]]]

STATE_FILE = "state.json"
ETCD_DATA = _argv.ETCD_DATA
METADATA_MODES = _shape.METADATA_MODES
_STATE_VERSION = 2
_START_ATTEMPTS = 3


def _role(kind: str, index: int) -> str:
    return kind if index == 0 else f"{kind}{index}"


class LocalCluster:
    """Masters, storage nodes and their helpers on 127.0.0.1, with state in ``state_dir``.

    ``segment_size`` is one size for every storage node or a list with one size per node
    (its length is then the node count).  ``ha=True`` runs ``masters`` masters (default 3)
    elected through a private etcd, with the oplog on; clients then use the
    ``etcd://`` master address and ``cluster_id`` from :meth:`client_config`.
    ``client_ttl`` (seconds) is how long the masters keep a silent client's segments.
    ``placement`` puts each process on a host of its own: called with a role (``etcd``,
    ``metadata``, ``master``, ``master1``, ``storage``...) it returns the host's address and
    the argv prefix that runs a command there (see :meth:`mooncake_cffi.topology.Topology.
    placement`); ``client_host`` is then the address clients of this process register.
    Use :meth:`start` / :meth:`stop`, or the instance as a context manager; :meth:`kill`
    crashes one process and :meth:`restart` starts it again on its ports (fault tests).
    """

    def __init__(
        self,
        state_dir: Path | str,
        segment_size: str | Sequence[str] = "1 GB",
        *,
        storage_nodes: int | None = None,
        ha: bool = False,
        masters: int | None = None,
        metadata: str = "http",
        client_ttl: int | None = None,
        cluster_id: str | None = None,
        master_args: Sequence[str] = (),
        placement: Placement | None = None,
        client_host: str = HOST,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        sizes, masters = _shape.check(segment_size, storage_nodes, ha, masters, metadata)
        _shape.check_ttl(client_ttl)
        self.segment_sizes = [str(s) for s in sizes]
        self.ha = bool(ha)
        self.masters = masters
        self.metadata = metadata
        self.client_ttl = client_ttl
        self.cluster_id = cluster_id if cluster_id is not None else None
        self.master_args = list(master_args)
        self.placement = placement
        self.client_host = client_host
        self.addresses: dict[str, str] = {}
        self.ports: dict[str, int] | None = None
        self.procs: dict[str, Proc] = {}
        self.started_at: float | None = None
        self.loopback_confined = False
        self._token = ""

    # -- shape, paths and addresses --------------------------------------------------------

    @property
    def segment_size(self) -> str:
        """The first storage node's segment size (all of them: :attr:`segment_sizes`)."""
        return self.segment_sizes[0]

    @property
    def storage_nodes(self) -> int:
        return len(self.segment_sizes)

    @property
    def master_roles(self) -> list[str]:
        return [_role("master", i) for i in range(self.masters)]

    @property
    def storage_roles(self) -> list[str]:
        return [_role("storage", i) for i in range(self.storage_nodes)]

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    def log_path(self, role: str) -> Path:
        return self.state_dir / f"{role}.log"

    @property
    def master_log(self) -> Path:
        return self.log_path("master")

    @property
    def storage_log(self) -> Path:
        return self.log_path("storage")

    @property
    def pids(self) -> dict[str, int | None]:
        """PID of every process, by role (``master``, ``storage``, ``storage1``, ``etcd``...)."""
        return {role: proc.pid for role, proc in self.procs.items()}

    def _port(self, name: str) -> int:
        if self.ports is None:
            raise ClusterError(f"the cluster in {self.state_dir} has not been started")
        return self.ports[name]

    def rpc_key(self, index: int) -> str:
        """Name in :attr:`ports` of master ``index``'s RPC port."""
        return "master_rpc" if index == 0 else f"master{index}_rpc"

    def metrics_key(self, index: int) -> str:
        """Name in :attr:`ports` of master ``index``'s admin/metrics port."""
        return "metrics_http" if index == 0 else f"master{index}_metrics"

    def address(self, role: str) -> str:
        """The address ``role`` listens on: 127.0.0.1, or its host's in a placement."""
        return self.addresses.get(role, HOST)

    def _prefix(self, role: str) -> list[str]:
        if self.placement is None:
            return []
        return list(self.placement(role)[1])

    @property
    def etcd_endpoint(self) -> str:
        """``127.0.0.1:P`` of the cluster's etcd (HA or etcd metadata only)."""
        return f"{self.address('etcd')}:{self._port('etcd_client')}"

    @property
    def master_addr(self) -> str:
        """Mooncake's ``master_server_addr``: ``127.0.0.1:P``, or ``etcd://127.0.0.1:P`` (HA)."""
        if self.ha:
            return f"etcd://{self.etcd_endpoint}"
        return f"{self.address('master')}:{self._port('master_rpc')}"

    @property
    def metadata_server(self) -> str:
        """Mooncake's ``metadata_server`` for this cluster."""
        if self.metadata == "p2p":
            self._port("master_rpc")
            return "P2PHANDSHAKE"
        if self.metadata == "etcd":
            return f"etcd://{self.etcd_endpoint}"
        where = self.address("metadata" if self.metadata == "http" else "master")
        return f"http://{where}:{self._port('metadata_http')}/metadata"

    def master_metrics_url(self, index: int) -> str:
        role = self.master_roles[index]
        return f"http://{self.address(role)}:{self._port(self.metrics_key(index))}"

    @property
    def metrics_url(self) -> str:
        """Admin/metrics URL of the leading master (of master 0 when none leads)."""
        leader = self.leader()
        return self.master_metrics_url(0 if leader is None else leader)

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Mooncake setup keys for a client of this cluster that contributes no memory."""
        config: dict[str, Any] = {
            "local_hostname": self.client_host,
            "metadata_server": self.metadata_server,
            "master_server_addr": self.master_addr,
            "protocol": "tcp",
            "global_segment_size": "0",
        }
        if self.ha:
            config["cluster_id"] = self.cluster_id
        config.update(extra)
        return config

    def client_env(self) -> dict[str, str]:
        """Environment for a client process of this cluster: its cluster id (HA) and, when the
        loopback library is built, the preload that keeps its transfer ports on 127.0.0.1."""
        env = loopback.env(self.client_host) if self.loopback_confined else {}
        if self.ha and self.cluster_id:
            env["MC_STORE_CLUSTER_ID"] = self.cluster_id
        return env

    # -- liveness ---------------------------------------------------------------------------

    def alive(self, role: str) -> bool:
        """True while the process of ``role`` is running and is provably the one we started."""
        proc = self.procs.get(role)
        return proc is not None and proc.is_ours(self._token)

    def is_running(self) -> bool:
        """True while every process we started is alive."""
        return bool(self.procs) and all(self.alive(role) for role in self.procs)

    def down(self) -> list[str]:
        """Roles whose recorded process is not running (crashed, or :meth:`kill`-ed)."""
        return _status.down(self)

    def serving_problem(self, for_client: bool = True) -> str | None:
        """Why the cluster cannot serve now, or None if it can, some process down or not.

        It serves while a master serves (leads, with HA) and, for a Mooncake client, its etcd
        and metadata server run and a storage node does; with ``for_client=False`` (the
        admin API) only the serving master counts.  Asks the masters' ``/health`` only when
        a process is down.
        """
        if self.procs and self.is_running():
            return None
        return _status.serving_problem(self, for_client)

    def any_alive(self) -> bool:
        return any(self.alive(role) for role in self.procs)

    def kill(self, role: str) -> None:
        """SIGKILL one process of the cluster (a crash, for tests); ClusterError if not ours."""
        proc = self.procs.get(role)
        if proc is None or not proc.kill(token=self._token):
            raise ClusterError(f"no running {role!r} process of this cluster")
        if proc.popen is not None:
            proc.popen.wait(timeout=10)

    def restart(self, role: str, timeout: float = 60.0) -> None:
        """Start the process of ``role`` again after it crashed or was :meth:`kill`-ed.

        ``role`` is a key of :attr:`pids`: ``etcd``, ``metadata``, ``master``, ``master1``...,
        ``storage``, ``storage1``...  It runs with the command line and environment it had,
        so on the same ports; its log file starts afresh and ``state.json`` records the new
        PID.  Returns once it answers as :meth:`start` waits for it: etcd or the metadata
        server answer HTTP (the metadata server comes back empty); a master answers
        ``/health``, a master serves and the running storage nodes' segments are mounted
        again; a storage node has mounted its new segment (memory empty: keys it held are
        gone, and the master may list its old segment until ``client_ttl`` has passed).

        Raises ClusterError for a role this cluster does not have, for one that is still
        running (no second copy is started), and, after stopping it again, if it does not
        answer within ``timeout`` seconds.
        """
        _startup.restart(self, role, time.monotonic() + timeout)

    def leader(self) -> int | None:
        """Index of the master that leads and serves (0 without HA when healthy), or None."""
        if self.ports is None:
            return None
        return _status.leader(self)

    def segments(self) -> list[str]:
        """Names of the segments mounted in the leading master (ClusterError if unreadable)."""
        return _status.segment_names(self)

    # -- state file ----------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "token": self._token,
            "shape": {
                "segment_sizes": self.segment_sizes,
                "ha": self.ha,
                "masters": self.masters,
                "metadata": self.metadata,
                "client_ttl": self.client_ttl,
                "cluster_id": self.cluster_id,
                "master_args": self.master_args,
            },
            "processes": [proc.to_state() for proc in self.procs.values()],
            "addresses": dict(self.addresses),
            "client_host": self.client_host,
            "pids": self.pids,
            "ports": dict(self.ports or {}),
            "logs": {role: proc.log for role, proc in self.procs.items()},
            "master_addr": self.master_addr,
            "metadata_server": self.metadata_server,
            "segment_size": self.segment_size,
            "loopback_confined": self.loopback_confined,
            "started_at": self.started_at,
        }

    def _write_state(self) -> None:
        data = (json.dumps(self._state(), indent=2) + "\n").encode()
        _statedir.write_atomic(self.state_path, data)

    @classmethod
    def load(cls, state_dir: Path | str) -> LocalCluster | None:
        """The cluster recorded in ``state_dir/state.json``, or None if there is none.

        The state file must be the user's and private (ClusterError otherwise).  The returned
        object can report :meth:`status` and :meth:`stop` the processes even though this
        process did not start them.
        """
        path = Path(state_dir).absolute() / STATE_FILE
        raw = _statedir.read_private(path)
        if raw is None:
            return None
        try:
            state = json.loads(raw)
        except ValueError as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from exc
        if isinstance(state, dict) and state.get("version") == 1:
            raise ClusterError(
                f"{path} was written by an older mooncake-cffi, whose processes cannot be "
                f"verified (pids {state.get('pids')}): stop them yourself, then remove {path}"
            )
        try:
            shape = state["shape"]
            cluster = cls(
                state_dir,
                shape["segment_sizes"],
                ha=bool(shape["ha"]),
                masters=int(shape["masters"]),
                metadata=str(shape["metadata"]),
                client_ttl=shape.get("client_ttl"),
                cluster_id=shape.get("cluster_id"),
                master_args=list(shape.get("master_args") or []),
            )
            cluster._token = str(state["token"])
            cluster.addresses = {str(k): str(v) for k, v in (state.get("addresses") or {}).items()}
            cluster.client_host = str(state.get("client_host") or HOST)
            cluster.ports = {str(k): int(v) for k, v in state["ports"].items()}
            for item in state["processes"]:
                proc = Proc.from_state(item)
                cluster.procs[proc.role] = proc
            cluster.started_at = state.get("started_at")
            cluster.loopback_confined = bool(state.get("loopback_confined"))
            cluster.master_addr  # noqa: B018 - the ports it needs must be present
        except (KeyError, TypeError, ValueError, AttributeError, ClusterError) as exc:
            raise ClusterError(f"{path} is not a valid cluster state file: {exc!r}") from exc
        return cluster

    # -- start ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start every process; return once a master serves and every segment is mounted.

        Raises ClusterError (after stopping whatever was started) if the cluster does not come
        up within ``timeout`` seconds.
        """
        if self.any_alive():
            raise ClusterError(f"this cluster in {self.state_dir} is already running")
        _statedir.ensure_dir(self.state_dir)
        previous = LocalCluster.load(self.state_dir)
        if previous is not None:
            if previous.any_alive():
                raise ClusterError(
                    f"a cluster is already running in {self.state_dir} "
                    f"(pids {previous.pids}); stop it first"
                )
            _statedir.remove(self.state_path)
        deadline = time.monotonic() + timeout
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                _startup.start_all(self, deadline)
                return self
            except _startup.EarlyExit as exc:
                self.stop()
                # A port picked a moment ago may have been taken meanwhile, and the master
                # then exits without saying why: try again with fresh ports.
                if attempt == _START_ATTEMPTS or time.monotonic() >= deadline:
                    raise _startup.failure(self, str(exc)) from None
            except ClusterError as exc:
                self.stop()
                raise _startup.failure(self, str(exc)) from None
            except OSError as exc:  # could not spawn a process, write a log or state.json
                self.stop()
                raise _startup.failure(self, f"cannot start the cluster: {exc}") from exc
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _assign_ports(self) -> None:
        names = [self.rpc_key(i) for i in range(self.masters)]
        names += [self.metrics_key(i) for i in range(self.masters)]
        names += [f"{role}_rpc" for role in self.storage_roles]
        if self.metadata in ("http", "master"):
            names.append("metadata_http")
        if self.ha or self.metadata == "etcd":
            names += ["etcd_client", "etcd_peer"]
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))

    def _spawn(
        self,
        role: str,
        argv: list[str],
        marker: str,
        confine: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        confined = loopback.env(self.address(role)) if confine and self.loopback_confined else {}
        libraries = _argv.child_env(argv) if confine else {}  # Mooncake's master and nodes
        proc = Proc(
            role=role,
            argv=argv,
            log=str(self.log_path(role)),
            marker=marker,
            env={**confined, **libraries, **(env or {})},
            prefix=self._prefix(role),
        )
        self._launch(proc)

    def _launch(self, proc: Proc) -> None:
        """Spawn ``proc`` as the cluster's process of its role and record it in state.json."""
        self.procs[proc.role] = proc
        proc.spawn(self.state_dir, self._token)
        self._write_state()

    # -- stop ----------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Stop the processes we started (storage nodes, masters, then helpers) and remove
        ``state.json``; return the roles that were running and got stopped.

        Each gets SIGTERM, then SIGKILL if still alive after ``timeout`` seconds.  A PID that
        cannot be proven to be our process is left alone.  Safe to call more than once, and
        after some of the processes crashed.
        """
        order = [r for r in self.procs if r.startswith("storage")]
        order += [r for r in self.procs if r.startswith("master")]
        order += [r for r in self.procs if r not in order]
        stopped = [role for role in order if self.procs[role].stop(self._token, timeout)]
        if self.procs or self.ports is not None:
            if not self.any_alive():
                _statedir.remove_tree(self.state_dir / ETCD_DATA)
            _statedir.remove(self.state_path)
        return stopped

    # -- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Every process, the leader, health, keys, memory and segments, as plain data;
        ``down`` lists the roles not running and ``serving`` says whether clients can still
        use the cluster (``serving_problem`` says why not, as :meth:`serving_problem` does);
        ``running`` is true when every process runs or the cluster serves all the same
        (degraded), so it never contradicts ``serving``; ``healthy`` needs every process.

        Never raises for an unreachable master: fields that could not be read are None and
        the reasons are listed under ``errors``.
        """
        return _status.report(self)

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = self.master_addr if self.ports else "not started"
        return f"<LocalCluster {state} {where} in {self.state_dir}>"

    def log_paths(self) -> dict[str, Path]:
        """The log files, by role."""
        return {role: Path(proc.log) for role, proc in self.procs.items()}
