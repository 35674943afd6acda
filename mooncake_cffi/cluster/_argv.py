"""The command line of each process of a local cluster (etcd, metadata server, masters, nodes).

Each builder returns ``(argv, marker)``: the marker is an element of ``argv`` unique to the
process (a flag with one of its ports), used to recognise it later.  ``c`` is the
:class:`~.local.LocalCluster`; ``c.address(role)`` is the address the role listens on
(127.0.0.1, or its host's address in a :class:`mooncake_cffi.topology.Topology`).
"""

from __future__ import annotations

import sys
from typing import Any

from ._common import MASTER_BINARY, STORAGE_BINARY, find_binary, find_etcd

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
    marker = f"-metrics_port={c.ports[c.metrics_key(index)]}"
    argv = [
        str(find_binary(MASTER_BINARY)),
        f"-rpc_address={host}",
        f"-rpc_port={c.ports[c.rpc_key(index)]}",
        f"-metrics_host={host}",
        marker,
    ]
    if c.metadata == "master":
        argv += [
            "-enable_http_metadata_server=true",
            f"-http_metadata_server_host={host}",
            f"-http_metadata_server_port={c.ports['metadata_http']}",
        ]
    else:
        argv.append("-enable_http_metadata_server=false")
    if c.ha:
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
        str(find_binary(STORAGE_BINARY)),
        f"-host={c.address(role)}",
        f"-global_segment_size={c.segment_sizes[index]}",
        f"-master_server_address={c.master_addr}",
        f"-metadata_server={c.metadata_server}",
        marker,
        "-protocol=tcp",
    ]
    return argv, marker
