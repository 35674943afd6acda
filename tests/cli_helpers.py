"""Helpers of the mcl2 tests: a clean MCL2_* environment, free ports, binary data, the
command tree, the installed console script and the metadata entries a client leaves.

The in-process fixtures (``run``, ``key``) are in conftest.py.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click
from mooncake_cffi.cli import cli

from mooncake_cffi.metadata import entry_url

REPO = Path(__file__).resolve().parent.parent
MAN_PAGE = REPO / "man" / "mcl2.1"
MCL2 = Path(sys.executable).with_name("mcl2")
ENV_VARS = (
    "MCL2_MASTER",
    "MCL2_METADATA_SERVER",
    "MCL2_PROTOCOL",
    "MCL2_HOSTNAME",
    "MCL2_CONFIG",
    "MCL2_L1_SIZE",
    "MCL2_CONNECT_TIMEOUT",
    "MCL2_STATE_DIR",
    "MCL2_ADMIN",
)


def clean_env(**values: str) -> dict[str, str | None]:
    """An environment for CliRunner: every MCL2_* variable unset unless given."""
    env: dict[str, str | None] = {name: None for name in ENV_VARS}
    env.update(values)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def blob(n: int) -> bytes:
    """Binary data with every byte value, CR/LF and NULs included."""
    return (bytes(range(256)) * (n // 256 + 1))[:n] + os.urandom(17)


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = (*prefix, name)
        yield path
        if isinstance(command, click.Group):
            yield from command_paths(command, path)


def command_for(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found
    return command


def entry_status(metadata_server: str, key: str) -> int:
    """The HTTP status of the metadata entry ``key`` (200 present, 404 gone)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(entry_url(metadata_server, key), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
