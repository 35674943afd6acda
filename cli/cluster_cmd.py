"""mcl2's ``cluster`` group: ``up``, ``down``, ``status``, ``restart`` and ``kill`` of a local
cluster on 127.0.0.1.

``up`` takes the cluster's shape: storage nodes (each with its own segment size), HA masters on
a private etcd, and the metadata server.  A cluster with a process down still serves while a
master leads and a storage node runs (see :mod:`.resolve`): ``status`` shows what is down,
``restart`` brings it back, and ``kill`` crashes one process for a fault drill.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from mooncake_cffi.sizes import human_bytes

from .app import CONTEXT_SETTINGS, cli, load_local, own_options_first
from .errors import EXIT_ERROR, CliError
from .options import SIZE, Seconds, output_options
from .options import state_dir_option as _state_dir_option
from .resolve import degraded_message, restart_hint
from .settings import Settings, pass_settings

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

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
    segments; `down` stops exactly what `up` started. For fault drills,
    `kill ROLE` crashes one process and `restart [ROLE...]` starts what is
    down again, on its ports.
    """


def cluster_command(json_help: str | None = None) -> Callable[[Callable[..., Any]], click.Command]:
    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = _state_dir_option(top_level=False)(f)
        return own_options_first(cluster.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


def wait_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--wait SECONDS: how long to wait for ``what`` to answer."""
    return click.option(
        "--wait",
        type=Seconds(min=1, max=3600),
        default=60.0,
        show_default=True,
        metavar="SECONDS",
        help=f"Give up if {what} does not answer within this long.",
    )


def _reject_timeout(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None:
        raise click.BadParameter(
            "--timeout is the deadline of each store operation (`mcl2 --timeout`); the wait "
            "for the cluster to answer is --wait SECONDS",
            ctx=ctx,
            param_hint="'--timeout'",
        )


def mooncake_size(text: str) -> str:
    """A size for Mooncake's flags: as given when Mooncake reads it so, else in bytes
    (Mooncake reads ``512MiB`` as 0)."""
    from mooncake_cffi.sizes import parse_size

    size = SIZE.convert(text, None, None)
    try:
        if parse_size(text) == size:
            return text
    except ValueError:
        pass
    return str(size)


def _segment_sizes(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    try:
        return [mooncake_size(part.strip()) for part in value.split(",")]
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


@cluster_command(json_help="Print the cluster's status as JSON.")
@click.option(
    "--segment-size",
    "segment_sizes",
    default="1 GB",
    show_default=True,
    metavar="SIZE[,SIZE...]",
    callback=_segment_sizes,
    help="Memory each storage node contributes: '1 GB', '512MiB', '4096' (K/M/G/T = 1024^n); "
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
@wait_option("the cluster")
@click.option(
    "--timeout",
    "_timeout",
    hidden=True,
    expose_value=False,
    callback=_reject_timeout,
    help="Refused: the wait is --wait.",
)
@pass_settings
def up(
    settings: Settings,
    segment_sizes: list[str],
    storage_nodes: int | None,
    ha: bool,
    masters: int | None,
    metadata: str,
    client_ttl: int | None,
    wait: float,
) -> None:
    """Start a local cluster (or say that one is running) and wait until it answers.

    A cluster already running with a process down is used as it is while it
    can serve (`mcl2 cluster restart` brings the process back).
    """
    from mooncake_cffi.cluster import LocalCluster

    state_dir = settings.resolved_state_dir
    previous = load_local(settings)
    if previous is not None and previous.any_alive():
        _already_running(settings, previous)
        return
    try:
        local = LocalCluster(
            state_dir,
            segment_sizes,
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
    local.start(timeout=wait)
    if settings.json:
        settings.emit_json({"started": True, **local.status()})
    elif not settings.quiet:
        click.echo(f"local cluster up in {state_dir}")
        _print_addresses(local)


def _already_running(settings: Settings, local: Any) -> None:
    """``up`` with a cluster already there: say so when it can serve, refuse otherwise."""
    state_dir = settings.resolved_state_dir
    gone = local.down()
    problem = local.serving_problem()
    if problem is not None:
        raise CliError(
            f"part of a local cluster is still running in {state_dir} ({', '.join(gone)} "
            f"down) and it cannot serve: {problem}; {restart_hint(gone)}, or "
            "`mcl2 cluster down` stops the rest"
        )
    if gone:
        settings.warn(degraded_message(gone))
    if settings.json:
        settings.emit_json({"started": False, **local.status()})
    elif not settings.quiet:
        click.echo(f"a local cluster is already running in {state_dir}")
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
        rows.append((role, f"pid {local.pids.get(role)}, segment {_shown_size(size)}"))
    rows.append(("logs", str(local.state_dir)))
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")


def _shown_size(size: str) -> str:
    """``1 GB`` as given, ``67108864`` (from ``64MiB``) as ``64.0 MiB``."""
    return human_bytes(int(size)) if size.isdigit() else size


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

    A process that is down is shown DOWN, with whether the cluster still
    serves. Exits with status 0 when every process runs and the cluster is
    healthy, 1 otherwise.
    """
    state_dir = settings.resolved_state_dir
    local = load_local(settings)
    if local is None:
        if settings.json:
            settings.emit_json(
                {"state_dir": str(state_dir), "running": False, "serving": False, "healthy": False}
            )
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
    down = info.get("down") or []
    if info["running"] and not down:
        state = "running"
    elif info.get("serving"):
        state = f"degraded ({', '.join(down)} down) but serving"
    else:
        state = "NOT serving" if info.get("processes") else "NOT running"
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
    if info.get("serving_problem"):
        click.echo(f"  problem   it cannot serve: {info['serving_problem']}")
    if down:
        click.echo(f"  fix       {restart_hint(down)}")


# -- restart and kill -----------------------------------------------------------------------


def _local_or_fail(settings: Settings) -> Any:
    local = load_local(settings)
    if local is None:
        raise CliError(f"no local cluster in {settings.resolved_state_dir} (run `mcl2 cluster up`)")
    return local


def complete_role(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Shell completion of ROLE: the roles of the local cluster in the state directory."""
    from click.shell_completion import CompletionItem

    try:
        settings = ctx.find_object(Settings) or Settings()
        local = load_local(settings)
    except Exception:  # completing must never fail loudly
        return []
    roles = list(local.pids) if local is not None else []
    return [CompletionItem(role) for role in roles if role.startswith(incomplete)]


def _check_roles(local: Any, roles: tuple[str, ...], param: str) -> list[str]:
    """The roles given, in the cluster's start order; BadParameter naming an unknown one."""
    known = list(local.pids)
    for role in roles:
        if role not in known:
            raise click.BadParameter(
                f"the local cluster has no {role!r}: its roles are {', '.join(known)}",
                param_hint=param,
            )
    return [role for role in known if role in roles]


@cluster_command(json_help="Print {restarted, already_running, pids} as JSON.")
@click.argument("roles", nargs=-1, metavar="[ROLE...]", shell_complete=complete_role)
@wait_option("a restarted process")
@pass_settings
def restart(settings: Settings, roles: tuple[str, ...], wait: float) -> None:
    """Start processes of the local cluster again, after they crashed or were
    killed: with no ROLE, every process that is down.

    \b
    mcl2 cluster restart             whatever is down
    mcl2 cluster restart storage1    that storage node
    mcl2 cluster restart master      a master (HA: it rejoins as a standby)

    ROLE is as in `mcl2 cluster status`: etcd, metadata, master, master1...,
    storage, storage1.... Each runs with the command line it had, on the
    same ports, and is waited for as `cluster up` waits. A restarted storage
    node comes back empty (the keys it held are gone); a restarted non-HA
    master forgets every key. A process that is running is left alone.
    """
    local = _local_or_fail(settings)
    targets = _check_roles(local, roles, "ROLE") if roles else local.down()
    running = [role for role in targets if local.alive(role)]
    restarted: list[str] = []
    for role in targets:
        if role in running:
            settings.info(f"{role} is running (pid {local.pids.get(role)}): left alone")
            continue
        settings.debug(f"restarting {role}")
        local.restart(role, timeout=wait)
        restarted.append(role)
        settings.info(f"restarted {role} (pid {local.pids.get(role)})")
    if not targets:
        settings.info(f"nothing is down in the local cluster in {settings.resolved_state_dir}")
    if settings.json:
        settings.emit_json({"restarted": restarted, "already_running": running, "pids": local.pids})


@cluster_command(json_help="Print {killed, pid} as JSON.")
@click.argument("role", metavar="ROLE", shell_complete=complete_role)
@pass_settings
def kill(settings: Settings, role: str) -> None:
    """Crash one process of the local cluster (SIGKILL), for a fault drill.

    \b
    mcl2 cluster kill storage1       one of several storage nodes
    mcl2 cluster kill master         the leader (HA: a standby takes over)

    mcl2 keeps using the cluster while it can serve, and warns which process
    is down; `mcl2 cluster restart ROLE` brings it back. Only a process that
    `cluster up` started is signalled.
    """
    local = _local_or_fail(settings)
    (role,) = _check_roles(local, (role,), "ROLE")
    pid = local.pids.get(role)
    if not local.alive(role):
        raise CliError(f"{role} is not running: nothing to kill")
    local.kill(role)
    if settings.json:
        settings.emit_json({"killed": role, "pid": pid})
    else:
        settings.info(f"killed {role} (pid {pid})")


def _or_unknown(value: Any) -> str:
    return "?" if value is None else str(value)
