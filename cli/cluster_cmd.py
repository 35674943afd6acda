"""mcl2's ``cluster`` group: ``up``, ``down`` and ``status`` of a local cluster on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .app import CONTEXT_SETTINGS, cli, load_local, own_options_first
from .context import Settings, output_options, pass_settings
from .context import state_dir_option as _state_dir_option
from .errors import (
    EXIT_ERROR,
    CliError,
)
from .keys import (
    human_bytes,
)

# -- cluster -----------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """Run a throw-away Mooncake cluster on 127.0.0.1.

    `up` starts mooncake_master (with its HTTP metadata server) and one
    storage node from the installed Mooncake wheel, and records their ports,
    PIDs and logs in the state directory; `status` reports health, keys and
    memory; `down` stops exactly what `up` started.
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
    metavar="SIZE",
    help="Memory the storage node contributes: '1 GB', '512MB', bytes (K/M/G/T = 1024^n).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Give up if the cluster does not answer within this long.",
)
@pass_settings
def up(settings: Settings, segment_size: str, timeout: float) -> None:
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
    if previous is not None and (previous._alive("master") or previous._alive("storage")):
        raise CliError(
            f"part of a local cluster is still running in {state_dir} (pids {previous.pids}); "
            "run `mcl2 cluster down` first"
        )
    try:
        local = LocalCluster(state_dir, segment_size=segment_size)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--segment-size'") from None
    settings.debug(f"starting a local cluster in {state_dir}")
    local.start(timeout=timeout)
    if settings.json:
        settings.emit_json({"started": True, **local.status()})
    elif not settings.quiet:
        click.echo(f"local cluster up in {state_dir}")
        _print_addresses(local)


def _print_addresses(local: Any) -> None:
    rows = [
        ("master", f"{local.master_addr} (pid {local.pids.get('master')})"),
        ("metadata", local.metadata_server),
        ("admin", local.metrics_url),
        ("storage", f"pid {local.pids.get('storage')}, segment {local.segment_size}"),
        ("logs", f"{local.master_log}, {local.storage_log}"),
    ]
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
    was_running = {role: local._alive(role) for role in ("master", "storage")}
    local.stop()
    if settings.json:
        settings.emit_json(
            {"stopped": any(was_running.values()), "state_dir": str(state_dir), "pids": pids}
        )
    elif not settings.quiet:
        stopped = [
            f"{role} (pid {pids[role]})" for role in ("storage", "master") if was_running[role]
        ]
        if stopped:
            click.echo(f"stopped {' and '.join(stopped)}; logs kept in {state_dir}")
        else:
            click.echo(f"the local cluster in {state_dir} was not running; state cleared")


@cluster_command(json_help="Print the status as JSON.")
@pass_settings
def status(settings: Settings) -> None:
    """Show health, key count and memory use of the local cluster.

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
        ("master", f"{info.get('master_addr')} ({proc('master')})"),
        ("storage", f"{proc('storage')}, segment {info.get('segment_size')}"),
        ("metadata", info.get("metadata_server")),
        ("admin", info.get("metrics_url")),
        ("keys", _or_unknown(info.get("key_count"))),
        ("memory", mem),
        ("clients", _or_unknown(info.get("active_clients"))),
        ("logs", f"{info['logs']['master']}, {info['logs']['storage']}"),
    ]
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")
    for error in info.get("errors") or []:
        click.echo(f"  problem   {error}")


def _or_unknown(value: Any) -> str:
    return "?" if value is None else str(value)
