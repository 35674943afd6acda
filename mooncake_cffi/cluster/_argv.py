"""The command line of each process of a local cluster (etcd, metadata server, masters, nodes).

Each builder returns ``(argv, marker)``: the marker is an element of ``argv`` unique to the
process (a flag with one of its ports), used to recognise it later.  ``c`` is the
:class:`~.local.LocalCluster`; ``c.address(role)`` is the address the role listens on
(127.0.0.1, or its host's address in a :class:`mooncake_cffi.topology.Topology`).

Flags differ between Mooncake wheels: the master's are read from its ``--helpfull``
(:func:`mooncake_cffi.wheel.master_flags`).  An optional flag the installed master lacks is
left out (``-metrics_host`` before 0.3.13: the loopback preload still keeps the port on the
cluster's address); a feature whose flag is missing is refused by name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .. import wheel
from ._common import MASTER_BINARY, STORAGE_BINARY, ClusterError, find_binary, find_etcd

ETCD_DATA = "etcd-data"


def etcd(c: Any) -> tuple[list[str], str]:
    host = c.address("etcd")
    client = f"http://{host}:{c.ports['etcd_client']}"
    peer = f"http://{host}:{c.ports['etcd_peer']}"
    argv = [
        str(find_etcd()),
        "--name=mcs-local",
        f"--data-dir={c.state_dir / ETCD_DATA}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=mcs-local={peer}",
        "--listen-metrics-urls=",
        "--log-level=warn",
    ]
    return argv, f"--listen-client-urls={client}"


def metadata(c: Any) -> tuple[list[str], str]:
    """The wheel's HTTP metadata server (a Python module, run by this interpreter)."""
    port = c.ports["metadata_http"]
    argv = [sys.executable, "-m", "mooncake.http_metadata_server", "--host", c.address("metadata")]
    return argv + [f"--port={port}", "--log-level", "WARNING"], f"--port={port}"


def master(c: Any, index: int) -> tuple[list[str], str]:
    role = c.master_roles[index]
    host = c.address(role)
    binary = runnable(find_binary(MASTER_BINARY))
    known = wheel.master_flags(binary)
    marker = f"-metrics_port={c.ports[c.metrics_key(index)]}"
    argv = [
        str(binary),
        f"-rpc_address={host}",
        f"-rpc_port={c.ports[c.rpc_key(index)]}",
    ]
    if "metrics_host" in known or not known:
        argv.append(f"-metrics_host={host}")
    argv.append(marker)
    if c.metadata == "master":
        argv += [
            "-enable_http_metadata_server=true",
            f"-http_metadata_server_host={host}",
            f"-http_metadata_server_port={c.ports['metadata_http']}",
        ]
    else:
        argv.append("-enable_http_metadata_server=false")
    if c.ha:
        _require(known, "enable_oplog", "HA masters with the oplog (ha=True, mcl2 cluster up --ha)")
        argv += [
            "-enable_ha=true",
            "-ha_backend_type=etcd",
            f"-etcd_endpoints={c.etcd_endpoint}",
            f"-cluster_id={c.cluster_id}",
            "-enable_oplog=true",
        ]
    if c.client_ttl is not None:
        argv.append(f"-client_ttl={int(c.client_ttl)}")
    return argv + list(c.master_args), marker


def storage(c: Any, index: int) -> tuple[list[str], str]:
    role = c.storage_roles[index]
    marker = f"-port={c.ports[f'{role}_rpc']}"
    argv = [
        str(runnable(find_binary(STORAGE_BINARY))),
        f"-host={c.address(role)}",
        f"-global_segment_size={c.segment_sizes[index]}",
        f"-master_server_address={c.master_addr}",
        f"-metadata_server={c.metadata_server}",
        marker,
        "-protocol=tcp",
    ]
    return argv, marker


def runnable(binary: Path) -> Path:
    """``binary``, after making sure it can load its libraries (a ClusterError saying how
    to fix it when it cannot); what its processes need in their environment for that is
    :func:`child_env`."""
    problem = wheel.missing_runtime(binary)
    if problem:
        raise ClusterError(problem)
    return binary


def child_env(argv: list[str]) -> dict[str, str]:
    """What the process of ``argv`` (a Mooncake binary's) needs added to its environment.

    The 0.3.12, 0.3.12.post1 and 0.3.13 "non-cuda" binaries link libcudart.so.12 without
    shipping it: ``nvidia-cuda-runtime-cu12``'s directory goes on that process's
    ``LD_LIBRARY_PATH``, never on this process's, whose own loading it would change.
    """
    return wheel.binary_env(Path(argv[0]))


def _require(known: frozenset[str], flag: str, feature: str) -> None:
    """ClusterError naming ``feature`` when the installed master has no ``-flag``."""
    if known and flag not in known:
        w = wheel.detect()
        raise ClusterError(
            f"{feature} needs the master flag -{flag}, which mooncake_master of "
            f"{w.distribution or 'Mooncake'} {w.version or '(unknown version)'} does not have"
        )
