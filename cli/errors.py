"""Exit statuses of mcl2 and the exceptions that carry them.

Every failure a user can cause or meet is a :class:`click.ClickException` subclass, so click
prints ``Error: <message>`` on stderr and exits with the status below; no traceback, no bare
``-1``.  Mooncake failures keep their error name (``NO_AVAILABLE_HANDLE``...) in the message.
"""

from __future__ import annotations

import click

#: Everything asked for was done.
EXIT_OK = 0
#: A failure: unreachable cluster, a Mooncake error, an unreadable file, a leased key...
EXIT_ERROR = 1
#: Bad usage: unknown option, missing argument, invalid option value (click's own code), an
#: unreadable input file, a standard stream that is needed but closed.
EXIT_USAGE = 2
#: A key asked for does not exist (get, exists, stat, info; rm with --strict).
EXIT_NOT_FOUND = 3
#: Standard output was a pipe whose reader went away (like a tool killed by SIGPIPE).
EXIT_BROKEN_PIPE = 141


class CliError(click.ClickException):
    """A failure reported as ``Error: <message>``, exit status 1."""

    exit_code = EXIT_ERROR


class NoClusterError(CliError):
    """No connection options were given and no local cluster is running."""


class StoreError(CliError):
    """A Mooncake operation failed; the message names the error code."""

    @classmethod
    def wrap(cls, exc: BaseException, doing: str = "") -> StoreError:
        name = getattr(exc, "name", None)
        code = getattr(exc, "code", None)
        detail = getattr(exc, "message", None) or str(exc)
        head = f"{name} ({code})" if name is not None else type(exc).__name__
        prefix = f"{doing}: " if doing else ""
        return cls(f"{prefix}{head}: {detail}{_hint(name)}")


class Interrupted(CliError):
    """SIGINT or SIGTERM ended the command: exit status 128 + the signal number."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        # click declares exit_code a ClassVar; the status here depends on the signal.
        self.exit_code = status  # type: ignore[misc]


class BrokenPipe(click.ClickException):
    """Standard output's reader went away: exit status 141, quietly (as after SIGPIPE)."""

    exit_code = EXIT_BROKEN_PIPE

    def __init__(self) -> None:
        super().__init__("broken pipe")

    def show(self, file: object = None) -> None:
        """Print nothing: the reader is gone, and `cat | head` says nothing either."""


class StreamUnusable(click.ClickException):
    """Standard input or output is needed but closed (``<&-``, ``>&-``), or standard input
    is the shell's: exit status 2, as for an unreadable input file."""

    exit_code = EXIT_USAGE


class KeyNotFound(click.ClickException):
    """A key asked for does not exist: exit status 3."""

    exit_code = EXIT_NOT_FOUND


def _hint(name: str | None) -> str:
    if name == "NO_AVAILABLE_HANDLE":
        return (
            " (the cluster's memory segments are full: remove keys, or give the storage node "
            "a larger segment, e.g. `mcl2 cluster up --segment-size 4GB`)"
        )
    if name == "OBJECT_HAS_LEASE":
        return " (the key was read in the last ~10 s; retry later or use --force)"
    if name == "MCS_E_UNREACHABLE":
        return " (is the cluster running? `mcl2 cluster status` checks the local one)"
    return ""
