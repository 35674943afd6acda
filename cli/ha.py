"""HA masters on etcd, as mcl2 sees them: the endpoints of an ``etcd://`` address, etcd's
health, and the leader etcd names.

An HA master address is ``etcd://HOST:PORT[;HOST:PORT...]``: the etcd cluster the masters
elect their leader in, not a master.  The leader's RPC address is the value of
``mooncake-store/<cluster id>/master_view`` in etcd (observed with Mooncake 0.3.13.post1); it
is read through etcd's v3 JSON gateway (``POST /v3/kv/range``), with the standard library
only, a timeout on every request and no proxy.  The standby masters are recorded nowhere: only
the local cluster's state knows them.

A newly elected leader first writes ``__mooncake_service_warming__:<lease id>`` there
(Mooncake PR #3743) and its address only once it is ready: that value means "no leader
yet" (:class:`NoLeaderYet`), never an address.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

SCHEME = "etcd://"
#: Where Mooncake reads an HA cluster's id from when the config has no ``cluster_id``.
CLUSTER_ID_ENV = "MC_STORE_CLUSTER_ID"
#: etcd key of the leader's RPC address, for a cluster id.
MASTER_VIEW_KEY = "mooncake-store/{cluster_id}/master_view"
#: What a newly elected leader writes into that key before its address, then ``:<lease id>``.
WARMING_PREFIX = "__mooncake_service_warming__"

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HaError(Exception):
    """etcd cannot be read, or names no leader; the message says which and where."""


class NoLeaderYet(HaError):
    """etcd holds the warming placeholder of a newly elected leader, not an address yet."""


def is_warming(view: str) -> bool:
    """True for the placeholder a new leader writes into master_view before its address."""
    return view.strip().startswith(WARMING_PREFIX)


def is_etcd(master: str) -> bool:
    """True for an HA master address (``etcd://...``)."""
    return master.strip().lower().startswith(SCHEME)


def endpoints(master: str) -> list[str]:
    """``["HOST:PORT", ...]`` of ``etcd://HOST:PORT;HOST:PORT`` (``,`` separates too)."""
    rest = master.strip()[len(SCHEME) :]
    return [part.strip() for part in rest.replace(",", ";").split(";") if part.strip()]


def cluster_id_of(setup: Mapping[str, Any]) -> str | None:
    """The cluster id a client of ``setup`` uses: its ``cluster_id``, else the environment's."""
    given = setup.get("cluster_id") or os.environ.get(CLUSTER_ID_ENV)
    return str(given) if given else None


def _reason(exc: OSError) -> str:
    """``Connection refused``, not ``<urlopen error [Errno 111] Connection refused>``."""
    reason = getattr(exc, "reason", None) or exc
    return str(getattr(reason, "strerror", None) or reason)


def _url(endpoint: str, path: str) -> str:
    return f"http://{endpoint}{path}"


def etcd_health(endpoint: str, timeout: float) -> str:
    """etcd's own word on its health (``/health``); HaError if it does not answer healthy."""
    try:
        with _HTTP.open(_url(endpoint, "/health"), timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        exc.close()
        raise HaError(f"etcd {endpoint}: /health answered HTTP {exc.code}") from None
    except TimeoutError:
        raise HaError(f"etcd {endpoint}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise HaError(f"etcd {endpoint}: {_reason(exc)}") from None
    try:
        healthy = json.loads(body).get("health") in ("true", True)
    except (ValueError, AttributeError):
        healthy = False
    if not healthy:
        raise HaError(f"etcd {endpoint}: /health says {body[:200].decode(errors='replace')!r}")
    return "healthy"


def read_key(endpoint: str, key: str, timeout: float) -> str | None:
    """The value of ``key`` in the etcd at ``endpoint`` (None if absent); HaError if etcd
    cannot be read."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    last = ""
    for prefix in ("/v3", "/v3beta"):  # etcd 3.4+, then 3.3's gateway
        request = urllib.request.Request(
            _url(endpoint, f"{prefix}/kv/range"),
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with _HTTP.open(request, timeout=timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            exc.close()
            last = f"HTTP {exc.code}"
            if exc.code == 404:
                continue
            break
        except TimeoutError:
            raise HaError(f"etcd {endpoint}: no answer within {timeout:g} s") from None
        except OSError as exc:
            raise HaError(f"etcd {endpoint}: {_reason(exc)}") from None
        except ValueError:
            raise HaError(f"etcd {endpoint}: its answer is not JSON") from None
        kvs = (answer.get("kvs") or []) if isinstance(answer, dict) else []
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value") or "").decode(errors="replace")
    raise HaError(f"etcd {endpoint}: cannot read keys ({last})")


def leader_address(master: str, cluster_id: str | None, timeout: float) -> str:
    """``HOST:PORT`` of the leading master of the HA cluster ``cluster_id`` behind the
    ``etcd://`` address ``master``, from the first etcd endpoint that answers."""
    if not cluster_id:
        raise HaError(
            f"which master leads {master} is kept under the cluster id: give --cluster-id ID "
            "(the -cluster_id the masters run with)"
        )
    key = MASTER_VIEW_KEY.format(cluster_id=cluster_id)
    problems = []
    for endpoint in endpoints(master):
        try:
            value = read_key(endpoint, key, timeout)
        except HaError as exc:
            problems.append(str(exc))
            continue
        if not value:
            raise HaError(
                f"etcd {endpoint} names no leader for cluster id {cluster_id!r} (no {key}): "
                "is it the -cluster_id the masters run with, and is a master running?"
            )
        if is_warming(value):
            raise NoLeaderYet(
                f"no leader yet for cluster id {cluster_id!r}: etcd {endpoint} holds "
                f"{value.strip()!r} in {key}, the placeholder a newly elected master writes "
                "before its address while it warms up; retry in a few seconds"
            )
        return value.strip()
    raise HaError("; ".join(problems) or f"{master} names no etcd endpoint")
