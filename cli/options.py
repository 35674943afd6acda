"""The click options every mcl2 command shares, declared once, in one table.

Each :class:`Shared` row names an option, the :class:`~.settings.Settings` attribute its value
goes to and the ``MCL2_*`` variable it is read from.  Every shared option is declared with
``expose_value=False`` and a callback that writes its value into the invocation's settings,
so an option given after the command overrides the same option given before it; the
variables are read at the top level only (``mcl2 --master ...``, not ``mcl2 get --master``).
:func:`connection_options`, :func:`admin_option`, :func:`state_dir_option` and
:func:`output_options` apply groups of rows as decorators.

:data:`SIZE` reads byte sizes as people type them (``256MB``, ``64KiB``, ``1 GB``);
:class:`Seconds` is a finite number of seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .settings import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Settings

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # generic in click 8.2+, a plain class in 8.1
    _IntParam = click.ParamType[int, Any]
else:
    _IntParam = click.ParamType


class SizeType(_IntParam):
    """A byte size: ``4096``, ``256MB``, ``64KiB``, ``1 GB`` (K, M, G, T: powers of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            from mooncake_cffi.sizes import parse_human_size

            try:
                size = parse_human_size(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail("must be more than 0 bytes", param, ctx)
        return size


class Seconds(click.FloatRange):
    """A finite number of seconds in a range (``nan`` and ``inf`` are usage errors)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        result: float = super().convert(number, param, ctx)
        return result


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


def _add_verbose(settings: Settings, value: int) -> None:
    settings.verbose += value


@dataclass(frozen=True)
class Shared:
    """One shared option: its flags, the Settings attribute it sets, its ``MCL2_`` variable.

    ``convert`` turns the parsed value into what the attribute holds; ``apply`` replaces the
    plain assignment (``-v`` adds up); ``extra`` holds the other ``click.option`` keywords.
    """

    flags: tuple[str, ...]
    attr: str
    help: str
    env: str | None = None
    convert: Callable[[Any], Any] | None = None
    apply: Callable[[Settings, Any], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def callback(self, ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None or (self.apply is not None and not value):
            return  # not given here: keep what an outer level said
        settings = _settings(ctx)
        if self.apply is not None:
            self.apply(settings, value)
        else:
            setattr(settings, self.attr, self.convert(value) if self.convert else value)

    def option(self, top_level: bool) -> Callable[[F], F]:
        envvar = f"MCL2_{self.env}" if top_level and self.env else None
        return click.option(
            *self.flags,
            envvar=envvar,
            show_envvar=envvar is not None,
            expose_value=False,
            callback=self.callback,
            help=self.help,
            **self.extra,
        )


CONNECTION = (
    Shared(
        ("--master",),
        "master",
        "Address of mooncake_master's RPC service (Mooncake's master_server_addr); HA "
        "masters: etcd://HOST:PORT[;HOST:PORT...].",
        env="MASTER",
        extra={"metavar": "HOST:PORT"},
    ),
    Shared(
        ("--metadata-server",),
        "metadata_server",
        "Metadata server, e.g. http://HOST:8080/metadata (default: the master's host, port 8080).",
        env="METADATA_SERVER",
        extra={"metavar": "URL"},
    ),
    Shared(
        ("--protocol",),
        "protocol",
        "Transfer protocol (default tcp).",
        env="PROTOCOL",
        convert=str.lower,
        extra={"type": click.Choice(["tcp", "rdma"], case_sensitive=False)},
    ),
    Shared(
        ("--hostname",),
        "hostname",
        "Address this client registers as (local_hostname; default 127.0.0.1). No port: "
        "Mooncake picks one.",
        env="HOSTNAME",
        extra={"metavar": "HOST"},
    ),
    Shared(
        ("--cluster-id",),
        "cluster_id",
        "Cluster id of HA masters on etcd (--master etcd://HOST:PORT), the -cluster_id they "
        "run with (config key cluster_id; default: the local cluster's).",
        env="CLUSTER_ID",
        convert=_check_cluster_id,
        extra={"metavar": "ID"},
    ),
    Shared(
        ("--integrity",),
        "integrity",
        "Verify values: crc32c stores a 16-byte checksum trailer with each value put and "
        "checks it on each get (config key integrity; default none).",
        env="INTEGRITY",
        convert=str.lower,
        extra={"type": click.Choice(["none", "crc32c"], case_sensitive=False)},
    ),
    Shared(
        ("--l1-size",),
        "l1_size",
        "Stage transfers through SIZE bytes of memory registered with Mooncake (needed by "
        "rdma, default 256MiB there, more if a value to put is larger); 512MiB, 1 GB...",
        env="L1_SIZE",
        extra={"metavar": "SIZE", "type": SIZE},
    ),
    Shared(
        ("--config", "config"),
        "config",
        "LMCache's --l2-adapter JSON for mooncake_store, inline or in a file; the options "
        "above override its keys.",
        env="CONFIG",
        extra={"metavar": "JSON|FILE"},
    ),
    Shared(
        ("--connect-timeout",),
        "connect_timeout",
        f"Give up on an unreachable master after this long (default {DEFAULT_CONNECT_TIMEOUT:g}).",
        env="CONNECT_TIMEOUT",
        extra={"metavar": "SECONDS", "type": Seconds(min=0.1, max=60)},
    ),
    Shared(
        ("--timeout",),
        "timeout",
        f"Deadline of each store operation: past it the command fails naming the operation "
        f"(default {DEFAULT_TIMEOUT:g}).",
        env="TIMEOUT",
        extra={"metavar": "SECONDS", "type": Seconds(min=0.01, max=3600)},
    ),
)

STATE_DIR = Shared(
    ("--state-dir",),
    "state_dir",
    "Where `mcl2 cluster` keeps the local cluster's state "
    "(default $XDG_STATE_HOME/mcl2 or ~/.local/state/mcl2).",
    env="STATE_DIR",
    extra={"metavar": "DIR", "type": click.Path(file_okay=False, path_type=Path)},
)

ADMIN = Shared(
    ("--admin",),
    "admin",
    "The master's admin HTTP API, http://HOST:PORT (default: the local cluster's, else the "
    "master's host on port 9003).",
    env="ADMIN",
    extra={"metavar": "URL"},
)

OUTPUT = (
    Shared(
        ("-v", "--verbose"),
        "verbose",
        "Say more; -v shows Mooncake's errors, -vv all its log lines.",
        apply=_add_verbose,
        extra={"count": True},
    ),
    Shared(
        ("-q", "--quiet"),
        "quiet",
        "Print only results and errors.",
        extra={"is_flag": True, "default": None},
    ),
)

JSON = Shared(
    ("--json", "json_"),
    "json",
    "Print results as JSON.",
    extra={"is_flag": True, "default": None},
)


def connection_options(top_level: bool) -> Callable[[F], F]:
    """--master, --metadata-server, --protocol, --hostname, --cluster-id, --integrity,
    --l1-size, --config,
    --connect-timeout, --timeout and --state-dir."""
    return _stack([spec.option(top_level) for spec in (*CONNECTION, STATE_DIR)])


def admin_option(top_level: bool) -> Callable[[F], F]:
    """--admin URL."""
    return ADMIN.option(top_level)


def state_dir_option(top_level: bool) -> Callable[[F], F]:
    """--state-dir DIR."""
    return STATE_DIR.option(top_level)


def output_options(json_help: str | None = None) -> Callable[[F], F]:
    """-v/--verbose (counted), -q/--quiet and, where it means something, --json."""
    specs = list(OUTPUT)
    if json_help is not None:
        specs.append(replace(JSON, help=json_help))
    return _stack([spec.option(top_level=False) for spec in specs])


def _stack(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
