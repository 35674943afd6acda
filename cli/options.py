"""The click options every mcl2 command shares, and where their values go.

``connection_options`` (where the cluster is), ``admin_option``, ``state_dir_option`` and
``output_options`` (-v, -q, --json) declare each option with ``expose_value=False`` and a
callback that writes the value into the invocation's :class:`~.context.Settings`, so an option
given after the command overrides the same option given before it; ``MCL2_*`` environment
variables are read at the top level only.  :data:`SIZE` parses byte sizes such as ``256MB``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .context import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Settings

F = TypeVar("F", bound=Callable[..., Any])


class SizeType(click.ParamType):
    """A byte size the way Mooncake writes them: ``256MB``, ``1 GB``, ``1048576``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        from mooncake_cffi.cluster import parse_size

        try:
            size = parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail("must be more than 0 bytes", param, ctx)
        return size


SIZE = SizeType()


def _settings(ctx: click.Context) -> Settings:
    return ctx.ensure_object(Settings)


def _check_cluster_id(value: str) -> str:
    text = value.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise click.BadParameter(
            f"{value!r} is not a cluster id: give the -cluster_id the HA masters run with "
            "(printable, no spaces)",
            param_hint="'--cluster-id'",
        )
    return text


def _store(attr: str, convert: Callable[[Any], Any] | None = None) -> Callable[..., None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None:  # not given here: keep what an outer level said
            return
        setattr(_settings(ctx), attr, convert(value) if convert else value)

    return callback


def _add_verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value:
        _settings(ctx).verbose += value


def connection_options(top_level: bool) -> Callable[[F], F]:
    """--master, --metadata-server, --protocol, --hostname, --cluster-id, --l1-size, --config,
    --connect-timeout and --state-dir; read from ``MCL2_*`` environment variables at the top
    level only."""

    def env(name: str) -> str | None:
        return f"MCL2_{name}" if top_level else None

    options = [
        click.option(
            "--master",
            metavar="HOST:PORT",
            envvar=env("MASTER"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("master"),
            help="Address of mooncake_master's RPC service (Mooncake's master_server_addr).",
        ),
        click.option(
            "--metadata-server",
            metavar="URL",
            envvar=env("METADATA_SERVER"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("metadata_server"),
            help="Metadata server, e.g. http://HOST:8080/metadata (default: the master's "
            "host, port 8080).",
        ),
        click.option(
            "--protocol",
            type=click.Choice(["tcp", "rdma"], case_sensitive=False),
            envvar=env("PROTOCOL"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("protocol", str.lower),
            help="Transfer protocol (default tcp).",
        ),
        click.option(
            "--hostname",
            metavar="HOST",
            envvar=env("HOSTNAME"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("hostname"),
            help="Address this client registers as (local_hostname; default 127.0.0.1). "
            "No port: Mooncake picks one.",
        ),
        click.option(
            "--cluster-id",
            metavar="ID",
            envvar=env("CLUSTER_ID"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("cluster_id", _check_cluster_id),
            help="Cluster id of HA masters on etcd (--master etcd://HOST:PORT), the "
            "-cluster_id they run with (config key cluster_id; default: the local cluster's).",
        ),
        click.option(
            "--l1-size",
            metavar="SIZE",
            type=SIZE,
            envvar=env("L1_SIZE"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("l1_size"),
            help="Stage transfers through SIZE bytes of memory registered with Mooncake (needed "
            "by rdma, default 256MB there, more if a value to put is larger).",
        ),
        click.option(
            "--config",
            "config",
            metavar="JSON|FILE",
            envvar=env("CONFIG"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("config"),
            help="LMCache's --l2-adapter JSON for mooncake_store, inline or in a file; the "
            "options above override its keys.",
        ),
        click.option(
            "--connect-timeout",
            metavar="SECONDS",
            type=click.FloatRange(min=0.1, max=60),
            envvar=env("CONNECT_TIMEOUT"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("connect_timeout"),
            help=f"Give up on an unreachable master after this long (default "
            f"{DEFAULT_CONNECT_TIMEOUT:g}).",
        ),
        click.option(
            "--timeout",
            metavar="SECONDS",
            type=click.FloatRange(min=0.01, max=3600),
            envvar=env("TIMEOUT"),
            show_envvar=top_level,
            expose_value=False,
            callback=_store("timeout"),
            help=f"Deadline of each store operation: past it the command fails naming the "
            f"operation (default {DEFAULT_TIMEOUT:g}).",
        ),
        state_dir_option(top_level),
    ]
    return _stack(options)


def admin_option(top_level: bool) -> Callable[[F], F]:
    """--admin URL (``MCL2_ADMIN`` at the top level only)."""
    return click.option(
        "--admin",
        metavar="URL",
        envvar="MCL2_ADMIN" if top_level else None,
        show_envvar=top_level,
        expose_value=False,
        callback=_store("admin"),
        help="The master's admin HTTP API, http://HOST:PORT (default: the local cluster's, "
        "else the master's host on port 9003).",
    )


def state_dir_option(top_level: bool) -> Callable[[F], F]:
    """--state-dir (``MCL2_STATE_DIR`` at the top level only)."""
    return click.option(
        "--state-dir",
        metavar="DIR",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="MCL2_STATE_DIR" if top_level else None,
        show_envvar=top_level,
        expose_value=False,
        callback=_store("state_dir"),
        help="Where `mcl2 cluster` keeps the local cluster's state "
        "(default $XDG_STATE_HOME/mcl2 or ~/.local/state/mcl2).",
    )


def output_options(json_help: str | None = None) -> Callable[[F], F]:
    """-v/--verbose (counted), -q/--quiet and, where it means something, --json."""
    options = [
        click.option(
            "-v",
            "--verbose",
            count=True,
            expose_value=False,
            callback=_add_verbose,
            help="Say more; -v shows Mooncake's errors, -vv all its log lines.",
        ),
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            default=None,
            expose_value=False,
            callback=_store("quiet"),
            help="Print only results and errors.",
        ),
    ]
    if json_help is not None:
        options.append(
            click.option(
                "--json",
                "json_",
                is_flag=True,
                default=None,
                expose_value=False,
                callback=_store("json"),
                help=json_help,
            )
        )
    return _stack(options)


def _stack(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
