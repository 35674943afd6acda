"""Shared fixtures: real local Mooncake clusters, markers by fixture, logs on failure.

``cluster`` is one LocalCluster for the whole session (started on first use, stopped at the
end); ``cluster_config`` is a client config for it.  ``three_nodes`` is a second session
cluster, of three storage nodes, for the replica tests.  ``make_cluster`` creates extra
clusters for a single test and stops them afterwards, whatever the test did;
``make_module_cluster`` does the same for one test module (for tests that share a cluster
of a shape of their own).  The engine tier (tests/test_engine_*.py, in the venv of
scripts/install_engine.sh) shares ``engine_model``, a model made on the spot, and
``engine_reference``, its answers without a connector.  ``etcd`` skips a test when etcd
is not installed (HA masters and etcd metadata need it); ``netns`` skips it without
network namespaces (root, ip, nft).

Each test is marked by the fixtures it uses, directly or through other fixtures (see
``FIXTURE_MARKERS``; the markers are described in pyproject.toml), so that ``pytest -m``
picks a part of the suite; the quick loop (scripts/test.sh --quick) is what needs no cluster
and the client's tests on the shared one (docs/contributing.md).

When a test that used a cluster fails, the last lines of the master's and the storage
node's logs (with their paths) are added to its report.  For the mcl2 tests, ``run``
invokes mcl2 in-process against the session cluster and ``key`` is a fresh key prefix.
"""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Callable, Generator, Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import clean_env, cluster_env
from click.testing import CliRunner, Result
from mooncake_cffi.cli import cli

from mooncake_cffi import capi, topology
from mooncake_cffi.capi import ffi, lib
from mooncake_cffi.cluster import LocalCluster

#: What the suite skipped and why, and the skips a tier forbids (tests/skip_budget.py).
pytest_plugins = ("skip_budget",)

# A suite started as a background job inherits SIGINT ignored, and so would every mcl2 it
# starts (Python installs no KeyboardInterrupt handler then, as Unix tools should).  The
# signal tests need Ctrl-C delivered: restore it here, and so for the processes started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

LOG_TAIL_LINES = 30
LOG_LINE_CHARS = 500

_SESSION_CLUSTERS = pytest.StashKey[dict[str, LocalCluster]]()
_TEST_CLUSTERS = pytest.StashKey[list[LocalCluster]]()

#: The markers a test gets from a fixture in its closure (the fixtures it asks for, and
#: theirs).  ``cluster``: it needs a running cluster; ``own_cluster``: one other than the
#: session's (started for the test or its module, or of another shape); ``ha``: etcd (HA
#: masters, etcd metadata); ``namespaces``: network-namespace hosts (root); ``cli``: mcl2.
FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "cluster": ("cluster",),
    "three_nodes": ("cluster", "own_cluster"),
    "make_cluster": ("cluster", "own_cluster"),
    "make_module_cluster": ("cluster", "own_cluster"),
    "etcd": ("ha",),
    "netns": ("namespaces",),
    "run": ("cli",),
}
#: The markers of the face a module tests, by its name: mcl2 (which the mcl2 modules also
#: start as a process), the drop-in MooncakeDistributedStore, the LMCache plugins.
MODULE_MARKERS = {
    "test_cli.py": "cli",
    "test_cli_*.py": "cli",
    "test_store_*.py": "store",
    "test_lmcache_*.py": "lmcache",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its fixtures (``FIXTURE_MARKERS``) and its module's name
    (``MODULE_MARKERS``), and a test marked ``own_cluster`` by hand (one that starts a
    cluster through ``mcl2 cluster up``) ``cluster`` as well."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marks = {m for name in names & FIXTURE_MARKERS.keys() for m in FIXTURE_MARKERS[name]}
        marks.update(m for pattern, m in MODULE_MARKERS.items() if fnmatch(item.path.name, pattern))
        if item.get_closest_marker("own_cluster") is not None:
            marks.add("cluster")
        for mark in sorted(marks):
            item.add_marker(mark)
        if config.pluginmanager.hasplugin("xdist"):
            # With -n N --dist loadgroup: a module's tests stay on one worker (its module
            # fixtures start once), and every network-namespace test on the same one.
            group = "netns" if "namespaces" in marks else item.path.name
            item.add_marker(pytest.mark.xdist_group(group))


def _session_cluster(
    request: pytest.FixtureRequest, local: LocalCluster, name: str
) -> Iterator[LocalCluster]:
    request.config.stash.setdefault(_SESSION_CLUSTERS, {})[name] = local  # before start: its
    try:  # logs explain a failure to start
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A running master + storage node on 127.0.0.1, shared by the whole session.  Tests
    keep to keys of their own (a unique prefix) and change nothing else in it: a test that
    stops, freezes or restarts a process, empties the cluster or fills it takes
    ``make_cluster``."""
    local = LocalCluster(tmp_path_factory.mktemp("mooncake-cluster"))
    yield from _session_cluster(request, local, "cluster")


@pytest.fixture(scope="session")
def three_nodes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A master and three 64 MB storage nodes, shared by the whole session (the replica
    tests: replicas on distinct nodes, preferred segments); the same rules as ``cluster``."""
    local = LocalCluster(tmp_path_factory.mktemp("three"), "64 MB", storage_nodes=3)
    yield from _session_cluster(request, local, "three_nodes")


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


@pytest.fixture(scope="module")
def make_module_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., LocalCluster]]:
    """``make_cluster`` for one test module: its clusters are stopped after the module's
    last test (for tests that share a cluster of a shape of their own)."""
    made: list[LocalCluster] = []
    request.node.stash[_TEST_CLUSTERS] = made
    base = tmp_path_factory.mktemp(request.node.name.removesuffix(".py"))

    def factory(segment_size: str | list[str] = "1 GB", **shape: Any) -> LocalCluster:
        """``shape``: LocalCluster's keywords (storage_nodes, ha, masters, placement...)."""
        local = LocalCluster(base / f"cluster{len(made)}", segment_size=segment_size, **shape)
        made.append(local)
        return local

    yield factory
    for local in made:
        local.stop()


@pytest.fixture(scope="session")
def etcd() -> str:
    """The etcd executable (HA masters and etcd metadata start one); skips the test when
    it is not installed.  Marks the test ``ha``."""
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    return path


@pytest.fixture(scope="session")
def netns() -> None:
    """Skips the test where network-namespace hosts cannot be made (mooncake_cffi.topology:
    root, ip, nft).  Marks the test ``namespaces``."""
    reason = topology.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


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
    clusters = [c for node in item.listchain() for c in node.stash.get(_TEST_CLUSTERS, [])]
    names = getattr(item, "fixturenames", ())
    for name, local in item.config.stash.get(_SESSION_CLUSTERS, {}).items():
        if name in names:
            clusters.append(local)
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


# -- the engine tier's model and reference answers (its helpers are in engine_helpers.py) ----


@pytest.fixture(scope="session")
def engine_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Llama of random weights and its tokenizer, made for this session."""
    from engine_helpers import make_model

    return make_model(tmp_path_factory.mktemp("engine-model"))


@pytest.fixture(scope="session")
def engine_reference(engine_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tier's prompts answered by vLLM without a connector (``engine_helpers.Reference``),
    once per session: the tokens every other run must give, and the cold times."""
    from engine_helpers import Reference, record

    ref = Reference(engine_model, tmp_path_factory.mktemp("engine-cold") / "vllm.log")
    times = sorted(run["e2e"] for run in ref.runs.values())
    ttfts = sorted(run["ttft"] or 0.0 for run in ref.runs.values())
    record(
        "cold reference",
        engine_start_s=ref.ready_s,
        e2e_median_s=times[len(times) // 2],
        e2e_max_s=times[-1],
        ttft_median_s=ttfts[len(ttfts) // 2],
    )
    return ref
