"""Helpers of the mcl2 tests: a clean MCL2_* environment (in-process and for the console
script), free ports, binary data, the
command tree, the installed console script and the metadata entries a client leaves.

The in-process fixtures (``run``, ``key``) are in conftest.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from mooncake_cffi.cli import cli

from mooncake_cffi.cluster import LocalCluster
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


def process_env(**values: str) -> dict[str, str]:
    """The environment of an ``mcl2`` process: this one's without any MCL2_* variable, plus
    ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
    env.update(values)
    return env


def cluster_env(cluster: LocalCluster) -> dict[str, str]:
    """The MCL2_* variables that point ``mcl2`` at ``cluster`` (master, metadata, admin)."""
    return {
        "MCL2_MASTER": cluster.master_addr,
        "MCL2_METADATA_SERVER": cluster.metadata_server,
        "MCL2_ADMIN": cluster.metrics_url,
    }


def console(*args: str | bytes, env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess:
    """The installed ``mcl2`` run with ``args``, in :func:`process_env` plus ``env``."""
    return subprocess.run(
        [str(MCL2), *args],
        capture_output=True,
        env=process_env(**env),
        timeout=60,
        check=False,
        **kw,
    )


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
