"""The ``mcl2`` click group and what every command shares: library errors, signals and a
closed output pipe turned into click errors with their exit statuses, the version option, and
the decorators that give data commands their shared options.  Commands live in
:mod:`.put_cmd` and :mod:`.data` (keys), :mod:`.admin_cmd` and :mod:`.doctor_cmd` (the
master's admin API), :mod:`.top_cmd` (a live view), :mod:`.bench_cmd` (benchmark),
:mod:`.cluster_cmd` (the local cluster), :mod:`.shell` and :mod:`.completion_cmd`;
:mod:`.main` is the console script.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from .errors import BrokenPipe, CliError, Interrupted, StoreError
from .interrupts import describe, exit_status
from .options import admin_option, connection_options, output_options

__all__ = [
    "CONTEXT_SETTINGS",
    "admin_command",
    "cli",
    "key_command",
    "keys_from_option",
    "load_local",
    "own_options_first",
]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Mcl2Group(click.Group):
    """A click group that turns library exceptions into ClickExceptions (no tracebacks).

    SIGINT / SIGTERM become :class:`Interrupted` (exit 130 / 143) and a closed standard
    output becomes :class:`BrokenPipe` (exit 141, silent), while the command's context is
    still open, so its client is closed the normal way.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from mooncake_cffi.admin import AdminError
        from mooncake_cffi.cluster import ClusterError
        from mooncake_cffi.errors import MooncakeError

        try:
            return super().invoke(ctx)
        except MooncakeError as exc:
            raise StoreError.wrap(exc) from None
        except (ClusterError, AdminError) as exc:
            raise CliError(str(exc)) from None
        except ImportError as exc:  # Mooncake missing, unsupported (UnsupportedWheelError), ...
            raise CliError(str(exc)) from None
        except KeyboardInterrupt as exc:  # SIGINT, and SIGTERM (interrupts.Terminated)
            raise Interrupted(describe(exc), exit_status(exc)) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                _silence_stdout(ctx)
                raise BrokenPipe() from None
            where = f"{exc.filename}: " if exc.filename else ""
            raise CliError(f"{where}{exc.strerror or exc}") from None


def _silence_stdout(ctx: click.Context) -> None:
    """After EPIPE: point fd 1 at /dev/null so that flushing at exit cannot fail again."""
    settings = ctx.find_object(_settings_class())
    if settings is None or not settings.fast_exit:
        return  # inside another program (CliRunner): its stdout is not ours to replace
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _settings_class() -> type:
    from .settings import Settings

    return Settings


def _version() -> str:
    try:
        from mooncake_cffi import __version__

        return __version__
    except Exception:  # pragma: no cover - broken installation
        return "unknown"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``mcl2 --version``: this package's version, then the Mooncake wheel in use."""
    if not value or ctx.resilient_parsing:
        return
    try:
        from mooncake_cffi.wheel import describe

        wheel_line = describe()
    except Exception as exc:  # pragma: no cover - broken installation
        wheel_line = f"Mooncake: cannot tell ({exc})"
    click.echo(f"mcl2 (mooncake-cffi) {_version()}\n{wheel_line}")
    ctx.exit()


@click.group(cls=Mcl2Group, context_settings=CONTEXT_SETTINGS)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_print_version,
    help="Print the version of mcl2 and of the Mooncake wheel in use, and exit.",
)
@connection_options(top_level=True)
@admin_option(top_level=True)
@output_options(
    json_help="Print results as JSON on stdout (one document; every command that reports)."
)
def cli() -> None:
    """Put, get, check and remove keys in a Mooncake Store, look inside a cluster
    (ls, info, segments, metrics, doctor), measure it (bench), and run a local cluster.

    \b
    With no --master/--metadata-server/--config (or MCL2_* variables),
    mcl2 talks to the local cluster that `mcl2 cluster up` started.

    \b
    Exit status: 0 success, 1 error, 2 usage error, 3 a key was not found,
    130/143 interrupted by SIGINT/SIGTERM, 141 standard output closed early.

    \b
    Shell completion: eval "$(mcl2 completion bash)" (or zsh, fish).
    Also run as: python -m mooncake_cffi.cli.
    See `man mcl2` for details and examples.
    """


keys_from_option = click.option(
    "--keys-from", metavar="FILE|-", help="Read keys, one per line, from FILE (- for stdin)."
)


def key_command(json_help: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A data command: registered on ``cli`` with the connection and output options."""

    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = connection_options(top_level=False)(f)
        return own_options_first(cli.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


def admin_command(json_help: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A command that also reads the master's admin API: ``--admin`` besides the shared
    connection and output options."""

    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = admin_option(top_level=False)(f)
        f = connection_options(top_level=False)(f)
        return own_options_first(cli.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


def own_options_first(command: click.Command, own: int) -> click.Command:
    """List a command's own parameters before the shared ones in its --help."""
    shared = command.params[: len(command.params) - own]
    command.params = command.params[len(shared) :] + shared
    return command


def load_local(settings: Any) -> Any:
    """The local cluster recorded in the settings' state directory, or None."""
    from mooncake_cffi.cluster import LocalCluster

    return LocalCluster.load(settings.resolved_state_dir)
