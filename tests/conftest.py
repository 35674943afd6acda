"""Shared fixtures: a real local Mooncake cluster, and its logs attached to failing tests.

``cluster`` is one LocalCluster for the whole session (started on first use, stopped at the
end); ``cluster_config`` is a client config for it.  ``make_cluster`` creates extra clusters
for a single test and stops them afterwards, whatever the test did.  When a test that used a
cluster fails, the last lines of the master's and the storage node's logs (with their paths)
are added to its report.  For the mcl2 tests, ``run`` invokes mcl2 in-process against the
session cluster and ``key`` is a fresh key prefix.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import clean_env, cluster_env
from click.testing import CliRunner, Result
from mooncake_cffi.cli import cli

from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib
from mooncake_cffi.cluster import LocalCluster

# A suite started as a background job inherits SIGINT ignored, and so would every mcl2 it
# starts (Python installs no KeyboardInterrupt handler then, as Unix tools should).  The
# signal tests need Ctrl-C delivered: restore it here, and so for the processes started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

LOG_TAIL_LINES = 30
LOG_LINE_CHARS = 500

_SESSION_CLUSTER = pytest.StashKey[LocalCluster]()
_TEST_CLUSTERS = pytest.StashKey[list[LocalCluster]]()


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A running master + storage node on 127.0.0.1, shared by the whole session."""
    local = LocalCluster(tmp_path_factory.mktemp("mooncake-cluster"))
    request.config.stash[_SESSION_CLUSTER] = local  # before start: its logs explain a failure
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def cluster_config(cluster: LocalCluster) -> dict[str, Any]:
    """Mooncake setup keys for a client of the session cluster (contributing no memory)."""
    return cluster.client_config()


@pytest.fixture
def make_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., LocalCluster]]:
    """Factory of (not yet started) LocalClusters under tmp_path, all stopped at teardown."""
    made: list[LocalCluster] = []
    request.node.stash[_TEST_CLUSTERS] = made

    def factory(segment_size: str | list[str] = "1 GB", **shape: Any) -> LocalCluster:
        """``shape``: LocalCluster's keywords (storage_nodes, ha, masters, metadata...)."""
        local = LocalCluster(tmp_path / f"cluster{len(made)}", segment_size=segment_size, **shape)
        made.append(local)
        return local

    yield factory
    for local in made:
        local.stop()


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read: {exc})"
    kept = [
        line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS] + " [...]"
        for line in text.splitlines()[-lines:]
    ]
    return "\n".join(kept) or "(empty)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    clusters = list(item.stash.get(_TEST_CLUSTERS, []))
    session_cluster = item.config.stash.get(_SESSION_CLUSTER, None)
    if session_cluster is not None and "cluster" in getattr(item, "fixturenames", ()):
        clusters.append(session_cluster)
    for local in clusters:
        for role, path in local.log_paths().items():
            if path.exists():
                report.sections.append(
                    (f"mooncake {role} log {path} (last {LOG_TAIL_LINES} lines)", _tail(path))
                )


# -- the mcl2 tests' in-process fixtures (their helpers are in cli_helpers.py) --------------


@pytest.fixture
def run(cluster: LocalCluster, tmp_path: Path):
    """Invoke mcl2 in-process against the session cluster (through MCL2_* variables: its
    master, metadata server and admin API)."""
    runner = CliRunner()
    env = clean_env(**cluster_env(cluster), MCL2_STATE_DIR=str(tmp_path / "no-state"))

    def invoke(*args: str, input: bytes | str | None = None, **extra_env: str) -> Result:
        return runner.invoke(cli, list(args), input=input, env={**env, **extra_env})

    return invoke


@pytest.fixture
def key() -> Iterator[str]:
    """A fresh key prefix for one test."""
    yield f"cli-{uuid.uuid4().hex[:12]}"


# -- the C ABI tests' raw handle (their helpers are in capi_helpers.py) ----------------------


@pytest.fixture
def raw(cluster: LocalCluster) -> Iterator[Any]:
    """A raw shim handle (``mcs_client *``) on the session cluster, freed afterwards."""
    capi.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    rc = lib.mcs_client_create(out, keys, vals, len(cfg), ffi.NULL, 0)
    assert rc == 0, capi.last_error()
    handle = out[0]
    yield handle
    lib.mcs_client_free(handle)
