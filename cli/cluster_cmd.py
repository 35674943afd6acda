"""mcl2's ``cluster`` group: ``up``, ``down`` and ``status`` of a local cluster on 127.0.0.1.

``up`` takes the cluster's shape: storage nodes (each with its own segment size), HA masters on
a private etcd, and the metadata server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .app import CONTEXT_SETTINGS, cli, load_local, own_options_first
from .context import Settings, pass_settings
from .errors import (
    EXIT_ERROR,
    CliError,
)
from .keys import (
    human_bytes,
)
from .options import output_options
from .options import state_dir_option as _state_dir_option

#: ``--metadata`` choices (mooncake_cffi.cluster.METADATA_MODES, without importing it here).
METADATA_CHOICES = ("http", "master", "etcd", "p2p")

# -- cluster -----------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """Run a throw-away Mooncake cluster on 127.0.0.1.

    `up` starts a metadata server, mooncake_master (or several HA masters on
    a private etcd) and storage nodes from the installed Mooncake wheel, and
    records their ports, PIDs and logs in a private state directory;
    `status` reports every process, the leader, health, keys, memory and
    segments; `down` stops exactly what `up` started.
    """


def cluster_command(json_help: str | None = None) -> Callable[[Callable[..., Any]], click.Command]:
    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = _state_dir_option(top_level=False)(f)
        return own_options_first(cluster.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


@cluster_command(json_help="Print the cluster's status as JSON.")
@click.option(
    "--segment-size",
    default="1 GB",
    show_default=True,
    metavar="SIZE[,SIZE...]",
    help="Memory each storage node contributes: '1 GB', '512MB', bytes (K/M/G/T = 1024^n); "
    "a comma-separated list gives one size per node.",
)
@click.option(
    "--storage-nodes",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Number of storage nodes (default: 1, or one per size in --segment-size).",
)
@click.option("--ha", is_flag=True, help="HA masters elected through a private etcd, oplog on.")
@click.option(
    "--masters",
    type=click.IntRange(min=1),
    default=None,
    metavar="M",
    help="Number of masters; more than one needs --ha (default: 3 with --ha, else 1).",
)
@click.option(
    "--metadata",
    type=click.Choice(METADATA_CHOICES),
    default="http",
    show_default=True,
    help="Metadata server: the wheel's HTTP server, the master's built-in one, etcd, or "
    "p2p (peer-to-peer handshake, no server).",
)
@click.option(
    "--client-ttl",
    type=click.IntRange(min=1),
    default=None,
    metavar="SECONDS",
    help="How long the masters keep the segments of a silent client or node (Mooncake's "
    "default: 10).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Give up if the cluster does not answer within this long.",
)
@pass_settings
def up(
    settings: Settings,
    segment_size: str,
    storage_nodes: int | None,
    ha: bool,
    masters: int | None,
    metadata: str,
    client_ttl: int | None,
    timeout: float,
) -> None:
    """Start a local cluster (or say that one is running) and wait until it answers."""
    from mooncake_cffi.cluster import LocalCluster

    state_dir = settings.resolved_state_dir
    previous = load_local(settings)
    if previous is not None and previous.is_running():
        if settings.json:
            settings.emit_json({"started": False, **previous.status()})
        elif not settings.quiet:
            click.echo(f"a local cluster is already running in {state_dir}")
            _print_addresses(previous)
        return
    if previous is not None and previous.any_alive():
        raise CliError(
            f"part of a local cluster is still running in {state_dir} (pids {previous.pids}); "
            "run `mcl2 cluster down` first"
        )
    sizes = [part.strip() for part in segment_size.split(",")]
    try:
        local = LocalCluster(
            state_dir,
            sizes,
            storage_nodes=storage_nodes,
            ha=ha,
            masters=masters,
            metadata=metadata,
            client_ttl=client_ttl,
        )
    except ValueError as exc:
        hint = "'--segment-size'" if "size" in str(exc) else None
        raise click.BadParameter(str(exc), param_hint=hint) from None
    settings.debug(f"starting a local cluster in {state_dir}")
    local.start(timeout=timeout)
    if settings.json:
        settings.emit_json({"started": True, **local.status()})
    elif not settings.quiet:
        click.echo(f"local cluster up in {state_dir}")
        _print_addresses(local)


def _print_addresses(local: Any) -> None:
    masters = ", ".join(f"{role} pid {local.pids.get(role)}" for role in local.master_roles)
    rows = [("master", f"{local.master_addr} ({masters})")]
    if local.ha:
        rows.append(("cluster", f"cluster_id {local.cluster_id} (HA, etcd {local.etcd_endpoint})"))
    rows += [
        ("metadata", f"{local.metadata_server} ({local.metadata})"),
        ("admin", local.metrics_url),
    ]
    for role, size in zip(local.storage_roles, local.segment_sizes, strict=True):
        rows.append((role, f"pid {local.pids.get(role)}, segment {size}"))
    rows.append(("logs", str(local.state_dir)))
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")


@cluster_command(json_help="Print what was stopped as JSON.")
@pass_settings
def down(settings: Settings) -> None:
    """Stop the processes `mcl2 cluster up` started (and nothing else)."""
    state_dir = settings.resolved_state_dir
    local = load_local(settings)
    if local is None:
        if settings.json:
            settings.emit_json({"stopped": False, "state_dir": str(state_dir)})
        else:
            settings.info(f"no local cluster in {state_dir}")
        return
    pids = dict(local.pids)
    stopped = local.stop()
    if settings.json:
        settings.emit_json(
            {
                "stopped": bool(stopped),
                "state_dir": str(state_dir),
                "pids": pids,
                "stopped_roles": stopped,
                "gone_roles": [role for role in pids if role not in stopped],
            }
        )
    elif not settings.quiet:
        if stopped:
            names = ", ".join(f"{role} (pid {pids[role]})" for role in stopped)
            click.echo(f"stopped {names}; logs kept in {state_dir}")
            gone = [role for role in pids if role not in stopped]
            if gone:
                click.echo(f"already gone (not signalled): {', '.join(gone)}")
        else:
            click.echo(f"the local cluster in {state_dir} was not running; state cleared")


@cluster_command(json_help="Print the status as JSON.")
@pass_settings
def status(settings: Settings) -> None:
    """Show every process, the leader, health, keys, memory and segments.

    Exits with status 0 when it is running and healthy, 1 otherwise.
    """
    state_dir = settings.resolved_state_dir
    local = load_local(settings)
    if local is None:
        if settings.json:
            settings.emit_json({"state_dir": str(state_dir), "running": False, "healthy": False})
            click.get_current_context().exit(EXIT_ERROR)
        raise CliError(f"no local cluster in {state_dir} (run `mcl2 cluster up`)")
    info = local.status()
    if settings.json:
        settings.emit_json(info)
    elif not settings.quiet:
        _print_status(info)
    if not info.get("healthy"):
        click.get_current_context().exit(EXIT_ERROR)


def _print_status(info: dict[str, Any]) -> None:
    state = "running" if info["running"] else "NOT running"
    health = "healthy" if info["healthy"] else "unhealthy"
    click.echo(f"local cluster in {info['state_dir']}: {state}, {health}")
    procs = info.get("processes") or {}

    def proc(role: str) -> str:
        p = procs.get(role) or {}
        alive = "up" if p.get("alive") else "DOWN"
        return f"pid {p.get('pid')} {alive}"

    memory = info.get("memory") or {}
    total, used = memory.get("total_bytes"), memory.get("used_bytes")
    mem = f"{human_bytes(used)} used of {human_bytes(total)}"
    if total:
        mem += f" ({100.0 * (used or 0) / total:.1f}%)"
    rows = [
        ("master", f"{info.get('master_addr')} (leader: {info.get('leader') or 'none'})"),
        ("metadata", f"{info.get('metadata_server')} ({info.get('metadata')})"),
        ("admin", info.get("metrics_url")),
        ("keys", _or_unknown(info.get("key_count"))),
        ("memory", mem),
        ("clients", _or_unknown(info.get("active_clients"))),
    ]
    if info.get("cluster_id"):
        rows.insert(1, ("cluster", f"cluster_id {info['cluster_id']}"))
    for role, p in procs.items():
        extra = f", {p['role']}" if p.get("role") else ""
        rows.append((role, f"{proc(role)}{extra}"))
    for name, seg in (memory.get("segments") or {}).items():
        rows.append(
            (
                "segment",
                f"{name}: {human_bytes(seg.get('used_bytes'))} used of "
                f"{human_bytes(seg.get('total_bytes'))}",
            )
        )
    rows.append(("logs", info["state_dir"]))
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")
    for error in info.get("errors") or []:
        click.echo(f"  problem   {error}")


def _or_unknown(value: Any) -> str:
    return "?" if value is None else str(value)
