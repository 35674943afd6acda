"""Removing a client's entries from Mooncake's HTTP metadata server.

A Mooncake client registers two entries with the metadata server when it is set up, both
named after the client's ``host:port`` (``Client.hostname``):

* ``<prefix>ram/<host:port>``: its segment descriptor (buffers, transport, data port);
* ``<prefix>rpc_meta/<host:port>``: the address of its transfer-engine RPC endpoint.

``<prefix>`` is ``mooncake/``, or ``mooncake/<id>/`` when ``MC_METADATA_CLUSTER_ID`` is set
(observed with wheel 0.3.13.post1: the log says "Using metadata cluster ID: mooncake/abc/").
The HTTP metadata server (the master's embedded one, or Mooncake's Python one) answers
``GET``/``PUT``/``DELETE`` on ``/metadata?key=<url-encoded key>``.

Mooncake's teardown deletes both entries, but it costs 0.3-1 s.  A short-lived process that
skips it (see ``Client.close_for_exit``) calls :func:`forget_client` instead, so the metadata
server does not keep one stale pair of entries per invocation.  The master itself forgets the
client once its ``client_ttl`` (default 10 s) passes without a heartbeat.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request

__all__ = ["ENTRY_KINDS", "client_keys", "forget_client", "key_prefix"]

#: The entry kinds a TCP/RDMA client registers, each as ``<prefix><kind>/<host:port>``.
ENTRY_KINDS: tuple[str, ...] = ("ram", "rpc_meta")

_TIMEOUT = 1.0

# Only ever talks to the configured metadata server: no proxy from the environment.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def key_prefix(cluster_id: str | None = None) -> str:
    """The metadata key prefix Mooncake uses: ``mooncake/`` or ``mooncake/<cluster id>/``.

    ``cluster_id`` defaults to ``$MC_METADATA_CLUSTER_ID`` (unset or empty: none).
    """
    if cluster_id is None:
        cluster_id = os.environ.get("MC_METADATA_CLUSTER_ID", "")
    cluster_id = cluster_id.strip("/")
    return f"mooncake/{cluster_id}/" if cluster_id else "mooncake/"


def client_keys(hostname: str, cluster_id: str | None = None) -> list[str]:
    """The metadata keys that the client registered as ``hostname`` (``host:port``) owns."""
    prefix = key_prefix(cluster_id)
    return [f"{prefix}{kind}/{hostname}" for kind in ENTRY_KINDS]


def entry_url(metadata_server: str, key: str) -> str:
    """URL of one entry on an HTTP metadata server (``http://host:port/metadata``)."""
    sep = "&" if "?" in metadata_server else "?"
    return f"{metadata_server}{sep}key={urllib.parse.quote(key, safe='')}"


def forget_client(metadata_server: str, hostname: str, timeout: float = _TIMEOUT) -> list[str]:
    """Delete the metadata entries the client ``hostname`` registered (best effort).

    Only ``http://`` metadata servers are handled; anything else (etcd, redis, P2P) is left
    alone.  Never raises: an unreachable server or a missing entry is ignored.  Returns the
    keys that the server reported as deleted.
    """
    deleted: list[str] = []
    try:
        if not metadata_server.startswith("http://") or not hostname:
            return deleted
        for key in client_keys(hostname):
            request = urllib.request.Request(entry_url(metadata_server, key), method="DELETE")
            try:
                with _HTTP.open(request, timeout=timeout) as response:
                    response.read()
                    if 200 <= response.status < 300:
                        deleted.append(key)
            except OSError:  # URLError, HTTPError (404: already gone), timeouts
                continue
    except Exception:  # never let cleanup turn a successful command into a failure
        pass
    return deleted
