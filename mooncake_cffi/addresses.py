"""What an address in a config may look like: the master, the metadata server, the client's
own host name, and the transport.

A pure module.  Mooncake's setup crashes on an empty master address, spends ~90 s on one
without a port, and treats a bare word as an etcd host it then fails to reach; these checks
refuse such values before any Mooncake call, each with a ``ValueError`` naming the key and
the value (the shim checks the master and the protocol again, for C callers).
"""

from __future__ import annotations

__all__ = [
    "HA_BACKENDS",
    "PROTOCOLS",
    "check_local_hostname",
    "check_master_addr",
    "check_metadata_server",
    "check_protocol",
    "strip_port",
]

#: Transports Mooncake's setup knows (``protocol``); the PyPI wheels build tcp and rdma.
PROTOCOLS: tuple[str, ...] = (
    "tcp",
    "rdma",
    "efa",
    "cxi",
    "cxl",
    "ub",
    "ubshmem",
    "ascend",
    "sunrise_link",
    "nvlink_intra",
    "rpc_only",
)
#: HA backends a ``master_server_addr`` may name (``etcd://host:port[;host:port...]``, ...).
HA_BACKENDS: tuple[str, ...] = ("etcd", "redis", "k8s")
_MASTER_FORMS = (
    "give host:port (e.g. 127.0.0.1:50051) or an HA entry etcd://host:port[;host:port...]"
)
_METADATA_FORMS = (
    "give http://host:port/metadata (the master's metadata server), etcd://host:port, "
    "P2PHANDSHAKE, or host:port"
)


def _has_space(text: str) -> bool:
    return any(ch.isspace() or ord(ch) < 0x20 for ch in text)


def _check_host_port(value: str, host_port: str) -> None:
    if host_port.startswith("["):
        close = host_port.find("]")
        ok = close > 1 and host_port[close + 1 : close + 2] == ":"
        port = host_port[close + 2 :] if ok else ""
    else:
        host, sep, port = host_port.rpartition(":")
        ok = bool(sep and host and port)
    if not ok:
        problem = "has no port" if ":" not in host_port else "is not host:port"
        raise ValueError(f"master_server_addr {value!r} {problem}: {_MASTER_FORMS}")
    if not (port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ValueError(f"master_server_addr {value!r} has port {port!r}, which is not 1..65535")


def check_master_addr(value: str) -> None:
    """Raise ValueError naming ``master_server_addr`` and ``value`` unless it is ``host:port``
    (port 1..65535, ``[v6]:port``) or an HA entry ``etcd://host:port[;host:port...]``,
    ``redis://...``, ``k8s://...`` (the shim checks the same before Mooncake's setup)."""
    if not value.strip():
        raise ValueError(f"master_server_addr {value!r} is empty: {_MASTER_FORMS}")
    if _has_space(value):
        raise ValueError(f"master_server_addr {value!r} contains white space: {_MASTER_FORMS}")
    backend, sep, rest = value.partition("://")
    if not sep:
        _check_host_port(value, value)
        return
    if backend not in HA_BACKENDS:
        raise ValueError(
            f"master_server_addr {value!r} names the HA backend {backend!r}, which Mooncake "
            "does not know (etcd://, redis:// or k8s://; a plain master is host:port, "
            "without a scheme)"
        )
    if backend != "etcd":
        if not rest:
            raise ValueError(f"master_server_addr {value!r} names no {backend} endpoint")
        return
    endpoints = [ep for ep in rest.split(";") if ep]
    if not endpoints:
        raise ValueError(
            f"master_server_addr {value!r} names no etcd endpoint (etcd://host:port[;host:port])"
        )
    for ep in endpoints:
        for prefix in ("etcd://", "http://"):
            ep = ep.removeprefix(prefix)
        _check_host_port(value, ep)


def check_protocol(value: str) -> None:
    """Raise ValueError naming ``protocol`` and ``value`` unless it is one of :data:`PROTOCOLS`."""
    if value in PROTOCOLS:
        return
    if value.lower() in PROTOCOLS:
        raise ValueError(f"protocol {value!r} must be lower case: {value.lower()!r}")
    raise ValueError(
        f"protocol {value!r} is not a transport Mooncake knows ({', '.join(PROTOCOLS)}; "
        "tcp or rdma on the PyPI wheels)"
    )


def strip_port(hostname: str) -> str | None:
    """Return the host part if ``hostname`` is ``host:port`` or ``[v6]:port``, else None."""
    if hostname.startswith("["):
        close = hostname.find("]")
        if close != -1 and hostname[close + 1 : close + 2] == ":":
            return hostname[: close + 1]
        return None
    if hostname.count(":") == 1:  # more than one colon: a bare IPv6 address
        host, _, port = hostname.partition(":")
        if port.isdigit():
            return host
    return None


def check_metadata_server(value: str) -> None:
    """Raise ValueError naming ``metadata_server`` and ``value`` unless it is a URL Mooncake
    reads (``http://``, ``etcd://``, ``redis://`` ...), ``P2PHANDSHAKE``, or a bare
    ``host:port`` (an etcd endpoint, Mooncake's oldest form)."""
    if not value.strip() or _has_space(value):
        raise ValueError(
            f"metadata_server {value!r} is empty or contains white space: {_METADATA_FORMS}"
        )
    if "://" in value or value == "P2PHANDSHAKE":
        return
    if strip_port(value) is None:
        raise ValueError(
            f"metadata_server {value!r} is neither a URL nor host:port (Mooncake would look "
            f"it up as an etcd host and fail after ~10 s): {_METADATA_FORMS}"
        )


def check_local_hostname(value: str) -> None:
    """Raise ValueError naming ``local_hostname`` unless it is a host (no port, no spaces)."""
    if not value.strip() or _has_space(value):
        raise ValueError(f"local_hostname {value!r} is empty or contains white space")
    host = strip_port(value)
    if host is not None:
        raise ValueError(
            f"local_hostname {value!r} carries a port, which makes Mooncake register "
            f"the client twice (duplicate registration); drop the port and use {host!r}: "
            "Mooncake picks the client's port itself"
        )
