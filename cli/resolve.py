"""Where the cluster is: the client configuration and the admin URL of one invocation.

In order of precedence: the connection options (before or after the command), the ``MCL2_*``
variables, the JSON of ``--config``; with none of ``--master``, ``--metadata-server`` or
``--config``, the local cluster that ``mcl2 cluster up`` recorded in the state directory.

The local cluster is used while it can serve, even with a process down (a standby master
after a failover, one of several storage nodes): mcl2 then warns once, naming what is down
and the ``mcl2 cluster restart`` that brings it back.  It is refused only when it cannot
serve (see :meth:`mooncake_cffi.cluster.LocalCluster.serving_problem`).
"""

from __future__ import annotations

import json
import os
import urllib.parse
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .errors import CliError, NoClusterError
from .invocation import Invocation

if TYPE_CHECKING:
    from mooncake_cffi.admin import AdminClient
    from mooncake_cffi.cluster import LocalCluster
    from mooncake_cffi.config import StoreConfig


#: Port of mooncake_master's HTTP metadata server unless told otherwise.
DEFAULT_METADATA_PORT = 8080
#: Port of mooncake_master's RPC service unless told otherwise.
DEFAULT_MASTER_PORT = 50051
DEFAULT_HOSTNAME = "127.0.0.1"


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/mcl2``, or ``~/.local/state/mcl2``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "mcl2"


def explicit(settings: Invocation) -> bool:
    """True when a connection option (or its variable) says where the cluster is."""
    return any(v is not None for v in (settings.config, settings.master, settings.metadata_server))


# -- the local cluster ---------------------------------------------------------------------


def local_cluster(settings: Invocation, for_client: bool = True) -> LocalCluster:
    """The local cluster, if it can serve a Mooncake client (``for_client``) or the admin
    API; NoClusterError otherwise.  A process that is down is warned about (once)."""
    from mooncake_cffi.cluster import ClusterError, LocalCluster

    state_dir = settings.resolved_state_dir
    try:
        local = LocalCluster.load(state_dir)
    except ClusterError as exc:
        raise NoClusterError(str(exc)) from None
    elsewhere = (
        "--master/--metadata-server/--config" if for_client else "--admin URL or --master HOST:PORT"
    )
    if local is not None and settings.accept_broken_local:
        return local  # the doctor diagnoses what is left of it
    if local is None or not local.any_alive():
        raise NoClusterError(
            f"no local cluster (state directory {state_dir}): run `mcl2 cluster up`, "
            f"or give {elsewhere}"
        )
    problem = local.serving_problem(for_client=for_client)
    gone = local.down()
    if problem is not None:
        alive_masters = [r for r in local.master_roles if r not in gone]
        if local.ha and alive_masters and problem.startswith("no master leads"):
            fix = "retry in a few seconds"  # an election is under way
        else:
            fix = f"{restart_hint(gone)}, or `mcl2 cluster down` and `mcl2 cluster up`"
        raise NoClusterError(f"the local cluster in {state_dir} cannot serve: {problem}; {fix}")
    if gone:
        settings.warn_once(degraded_message(gone))
    return local


def restart_hint(gone: list[str]) -> str:
    """```mcl2 cluster restart storage1`` brings it back` (or the words for several roles)."""
    if not gone:
        return "`mcl2 cluster status` shows what is wrong"
    if len(gone) == 1:
        return f"`mcl2 cluster restart {gone[0]}` brings it back"
    return "`mcl2 cluster restart` brings them back"


def degraded_message(gone: list[str]) -> str:
    """One line: which processes of the local cluster are down, and how to bring them back."""
    verb = "is" if len(gone) == 1 else "are"
    return f"local cluster: {', '.join(gone)} {verb} down (it still serves); {restart_hint(gone)}"


# -- the client configuration ----------------------------------------------------------------


def store_config(settings: Invocation) -> StoreConfig:
    """The StoreConfig for ``settings``' client (options, env, --config, local cluster)."""
    from mooncake_cffi.config import StoreConfig

    if explicit(settings):
        base = load_config_option(settings.config) if settings.config is not None else {}
        settings.where = "--config" if settings.config is not None else "options"
    else:
        base = local_cluster(settings).client_config()
        settings.where = f"the local cluster in {settings.resolved_state_dir}"
        settings.uses_local_cluster = True
    d = dict(base)
    overrides = {
        "master_server_addr": settings.master,
        "metadata_server": settings.metadata_server,
        "protocol": settings.protocol,
        "local_hostname": settings.hostname,
        "cluster_id": settings.cluster_id,
        "integrity": settings.integrity,
    }
    d.update({k: v for k, v in overrides.items() if v is not None})
    d.setdefault("local_hostname", DEFAULT_HOSTNAME)
    fill_in_addresses(d)
    given_segment = d.get("global_segment_size")
    if given_segment not in (None, "0", 0):
        settings.debug(
            f"ignoring global_segment_size={given_segment!r}: mcl2 never contributes memory "
            "(a short-lived process's segment would lose what is stored in it)"
        )
    d["global_segment_size"] = "0"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = StoreConfig.from_dict(d)
            config.check_connectable()
        except ValueError as exc:
            raise click.UsageError(f"invalid client configuration: {exc}") from None
    for w in caught:
        settings.warn_once(str(w.message))
    return config


def fill_in_addresses(d: dict[str, Any]) -> None:
    """Derive a missing master or metadata address from the other one (Mooncake's ports)."""
    master = d.get("master_server_addr")
    meta = d.get("metadata_server")
    if master and not meta:
        host = host_of(str(master))
        d["metadata_server"] = f"http://{host}:{DEFAULT_METADATA_PORT}/metadata"
    elif meta and not master:
        parsed = urllib.parse.urlparse(str(meta))
        if parsed.scheme == "http" and parsed.hostname:
            host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
            d["master_server_addr"] = f"{host}:{DEFAULT_MASTER_PORT}"


def host_of(addr: str) -> str:
    """The host of ``HOST:PORT``, ``[V6]:PORT`` or a bare host."""
    if addr.startswith("["):
        return addr[: addr.find("]") + 1]
    return addr.rsplit(":", 1)[0] if addr.count(":") == 1 else addr


def load_config_option(value: str) -> dict[str, Any]:
    """The adapter JSON of --config: inline JSON, or a file holding it; object or list."""
    from mooncake_cffi.config import ADAPTER_TYPE, StoreConfig

    text = value
    source = "--config"
    if not value.lstrip().startswith(("{", "[")):
        path = Path(value).expanduser()
        if not path.is_file():
            raise click.BadParameter(
                f"{value!r} is neither JSON nor an existing file", param_hint="'--config'"
            )
        try:
            text = path.read_text()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc}", param_hint="'--config'"
            ) from None
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"invalid JSON in {source}: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            param_hint="'--config'",
        ) from None
    if isinstance(data, list):
        # A list of --l2-adapter specs: take the first mooncake_store one.
        for item in data:
            if isinstance(item, dict) and item.get("type") == ADAPTER_TYPE:
                data = item
                break
        else:
            raise click.BadParameter(
                f"no adapter of type {ADAPTER_TYPE!r} in the list in {source}",
                param_hint="'--config'",
            )
    if not isinstance(data, dict):
        raise click.BadParameter(
            f"{source} must hold a JSON object (or a list of them), not {type(data).__name__}",
            param_hint="'--config'",
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warned once, when the final config is built
        try:
            config = StoreConfig.from_dict(data)
        except ValueError as exc:
            raise click.BadParameter(f"{source}: {exc}", param_hint="'--config'") from None
    return config.to_dict()


# -- the master's admin API ----------------------------------------------------------------


def admin_url(settings: Invocation) -> str:
    """--admin; else the local cluster's admin URL (with no connection options); else the
    master's host on port 9003 (Mooncake's default ``-metrics_port``): for HA masters on
    etcd, the host of the leader etcd names."""
    from mooncake_cffi.admin import admin_url_for_master

    if settings.admin:
        return settings.admin
    if not explicit(settings):
        return local_cluster(settings, for_client=False).metrics_url
    setup = store_config(settings).setup_config
    master = str(setup.get("master_server_addr", f"127.0.0.1:{DEFAULT_MASTER_PORT}"))
    from . import ha

    if ha.is_etcd(master):
        cluster_id = ha.cluster_id_of(setup)
        try:
            leader = ha.leader_address(master, cluster_id, settings.connect_timeout)
        except ha.HaError as exc:
            raise CliError(f"{exc}; or give --admin URL") from None
        return admin_url_for_master(leader)
    return admin_url_for_master(master)


def admin_client(settings: Invocation) -> AdminClient:
    """An :class:`~mooncake_cffi.admin.AdminClient` for :func:`admin_url`."""
    from mooncake_cffi.admin import AdminClient

    url = admin_url(settings)
    try:
        client = AdminClient(url, timeout=settings.connect_timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--admin'") from None
    settings.debug(f"admin API {client.url}")
    return client
