"""The small rough edges a new user met, each pinned against a real cluster.

``mcl2 --json shell`` prints one JSON document per line; ``mcl2 --json cluster status`` never
says ``"running": false`` while ``"serving": true``; a string ``op_timeout`` and a
``global_segment_size`` beyond what Mooncake mounts are refused naming the key (and the
limit); the drop-in refuses a ``local_hostname`` with white space, as ``Client`` does; Ctrl-C
during the exit's wait for an HA client's background teardown ends it at once, saying what
was cut short.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import clean_env
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_OK
from process_helpers import wait_until

from mooncake_cffi import Client
from mooncake_cffi.admin import AdminClient
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.sizes import MAX_SEGMENT_BYTES
from mooncake_cffi.store import MooncakeDistributedStore

# -- mcl2 --json shell: one document per line ----------------------------------------------


def test_json_shell_prints_one_document_per_line(run, key: str, tmp_path: Path) -> None:
    value = tmp_path / "v"
    value.write_bytes(b"12345")
    lines = [
        f"put --overwrite {key}/a {value}",
        f"put --overwrite {key}/b {value}",
        f"stat {key}/a {key}/b",
        f"ls {key}/",
        f"ls -l {key}/",
        f"info {key}/a",
        "segments",
        "metrics",
        f"rm --force {key}/a {key}/b",
    ]
    result = run("--json", "shell", input="\n".join(lines) + "\n")
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout.splitlines()
    assert len(out) == len(lines), out
    docs = [json.loads(line) for line in out]  # each line is a whole document
    assert docs[2] == {f"{key}/a": 5, f"{key}/b": 5}
    assert docs[3] == [f"{key}/a", f"{key}/b"]
    assert [d["key"] for d in docs[4]] == [f"{key}/a", f"{key}/b"]
    assert docs[5][f"{key}/a"]["status"] == "found"
    assert isinstance(docs[6], list) and docs[6]
    assert "keys" in docs[7]
    # Outside the shell, --json stays one indented document.
    alone = run("--json", "stat", f"{key}/missing")
    assert alone.stdout.count("\n") >= 1


# -- cluster status: running and serving agree -----------------------------------------------


def test_cluster_status_running_agrees_with_serving(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(["32 MB", "32 MB"], storage_nodes=2)
    runner = CliRunner()
    env = clean_env(MCL2_STATE_DIR=str(local.state_dir))
    with local:

        def status() -> dict[str, Any]:
            result = runner.invoke(cli, ["--json", "cluster", "status"], env=env)
            doc = json.loads(result.stdout)
            assert result.exit_code == (EXIT_OK if doc["healthy"] else EXIT_ERROR)
            return doc

        healthy = status()
        assert healthy["running"] and healthy["serving"] and healthy["healthy"]
        assert healthy["down"] == []
        local.kill("storage1")
        degraded = status()
        assert degraded["serving"] is True and degraded["down"] == ["storage1"]
        assert degraded["running"] is True  # was False: contradicting "serving"
        assert degraded["healthy"] is False
        text = runner.invoke(cli, ["cluster", "status"], env=env).stdout
        assert "degraded (storage1 down) but serving" in text
        local.kill("storage")
        stopped = status()
        assert stopped["serving"] is False and stopped["running"] is False
        assert sorted(stopped["down"]) == ["storage", "storage1"]


def test_cluster_status_without_a_cluster_says_serving_false(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--json", "cluster", "status"], env=clean_env(MCL2_STATE_DIR=str(tmp_path / "s"))
    )
    assert result.exit_code == EXIT_ERROR
    doc = json.loads(result.stdout)
    assert doc["running"] is False and doc["serving"] is False and doc["healthy"] is False


# -- options refused naming the key ----------------------------------------------------------


@pytest.mark.parametrize("value", ["5", b"5", True, [5], float("nan"), float("inf")])
def test_op_timeout_of_the_wrong_type_names_the_key(
    cluster_config: dict[str, Any], value: Any
) -> None:
    with pytest.raises(ValueError, match=r"op_timeout must be None or positive seconds"):
        Client(cluster_config, op_timeout=value)


def test_op_timeout_as_a_string_in_the_drop_ins_setup_names_the_key(
    cluster: LocalCluster,
) -> None:
    store = MooncakeDistributedStore()
    cfg = {**cluster.client_config(), "op_timeout": "5"}
    with pytest.raises(ValueError, match=r"op_timeout must be None or positive seconds.*'5'"):
        store.setup(cfg)
    assert store.client is None


@pytest.mark.parametrize("size", [str(10**20), str(2**64 - 1), str(MAX_SEGMENT_BYTES + 1)])
def test_a_segment_larger_than_mooncake_mounts_is_refused_naming_the_limit(
    cluster: LocalCluster, size: str
) -> None:
    admin = AdminClient(cluster.metrics_url)
    before = {s.name for s in admin.segments()}
    with pytest.raises(ValueError) as caught:
        Client(cluster.client_config(global_segment_size=size))
    message = str(caught.value)
    assert message.startswith(f"global_segment_size '{size}' is {int(size)} bytes")
    assert f"limit of {MAX_SEGMENT_BYTES} bytes (8 EiB)" in message
    assert {s.name for s in admin.segments()} == before


def test_a_segment_within_the_limit_still_mounts(cluster: LocalCluster) -> None:
    admin = AdminClient(cluster.metrics_url)
    with Client(cluster.client_config(global_segment_size="16 MB")) as client:
        mine = [s for s in admin.segments() if s.name == client.hostname]
        assert [s.capacity_bytes for s in mine] == [16 << 20]


# -- the drop-in refuses what Client refuses ---------------------------------------------------


@pytest.mark.parametrize("host", ["a b", " 127.0.0.1", "127.0.0.1\t", "host\nname"])
def test_the_drop_in_refuses_a_local_hostname_with_white_space(
    cluster: LocalCluster, host: str
) -> None:
    cfg = {**cluster.client_config(), "local_hostname": host}
    with pytest.raises(ValueError, match="local_hostname .* contains white space") as client_err:
        Client(cfg)
    for call in (
        lambda s: s.setup(cfg),
        lambda s: s.setup(
            host, cluster.metadata_server, 0, 16 << 20, "tcp", "", cluster.master_addr
        ),
    ):
        store = MooncakeDistributedStore()
        with pytest.raises(ValueError) as store_err:
            call(store)
        assert str(store_err.value) == str(client_err.value)
        assert store.client is None


# -- Ctrl-C ends the exit's wait for an HA client's teardown -----------------------------------

_EXIT_CHILD = r"""
import atexit, json, sys, time, warnings
warnings.simplefilter("ignore")
from mooncake_cffi import Client
from mooncake_cffi.capi import lib
client = Client(json.loads(sys.argv[1]))
client.put(sys.argv[2], b"v")
client.close()
print(json.dumps({"pending": int(lib.mcs_teardowns_pending())}), flush=True)
# Registered after the package's own exit hook, so it runs just before that hook's wait.
atexit.register(print, "exiting", flush=True)
"""


def _in_futex_wait(pid: int) -> bool:
    """True while the main thread of ``pid`` waits in futex() (/proc/PID/syscall: 202 on
    x86-64), as it does inside the exit's wait for the teardowns."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[:1] == ["202"]
    except OSError:
        return False


@pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed")
@pytest.mark.alone  # a 2 s client TTL: beside another worker's load the child's setup failed
def test_ctrl_c_ends_the_exit_wait_after_an_ha_close_at_once(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster("64 MB", ha=True, masters=2, client_ttl=2)
    with local:
        cfg = local.client_config(global_segment_size="16 MB")
        admin = AdminClient(local.metrics_url)
        nodes = {s.name for s in admin.segments()}  # the storage node's
        for round_ in range(3):
            # The child cut short before leaves its segment mounted until its 2 s TTL
            # passes; a put placed there meanwhile fails (TRANSFER_FAIL): wait it out.
            deadline = time.monotonic() + 15
            while {s.name for s in admin.segments()} - nodes and time.monotonic() < deadline:
                time.sleep(0.2)
            proc = subprocess.Popen(
                [sys.executable, "-c", _EXIT_CHILD, json.dumps(cfg), f"exit-{uuid.uuid4().hex}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **local.client_env()},
            )
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline()
                if not line:  # the child failed before its close: say how
                    proc.wait(timeout=30)
                    assert proc.stderr is not None
                    raise AssertionError(
                        f"round {round_}: the child exited {proc.returncode} before closing: "
                        + proc.stderr.read()[-3000:]
                    )
                assert json.loads(line)["pending"] >= 1, line
                assert proc.stdout.readline() == "exiting\n"
                wait_until(  # inside the exit's wait (it lasts up to 30 s), or gone
                    "the child to wait at its exit",
                    lambda p=proc: p.poll() is not None or _in_futex_wait(p.pid),
                )
                assert proc.poll() is None, "the exit did not wait for the teardown"
                t0 = time.monotonic()
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=10)
                took = time.monotonic() - t0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            print(f"\n[exit-wait] round {round_}: Ctrl-C ended it in {took:.2f} s")
            assert proc.returncode == 130, err[-2000:]
            assert took < 1.5
            assert "interrupted at exit while waiting for 1 client teardown(s)" in err
            assert "cut short" in err and "TTL" in err
            assert "Traceback" not in err and "Segmentation" not in err


# -- the docs' examples --------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _python_block(page: Path, heading: str) -> str:
    """The first ```python block after ``heading`` on ``page``."""
    text = page.read_text()
    after = text[text.index(heading) :]
    start = after.index("```python\n") + len("```python\n")
    return after[start : after.index("```", start)]


def test_the_python_guides_l1_staging_example_runs_on_tcp(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    code = _python_block(DOCS / "guide" / "python.md", "## L1 memory, RDMA and staging")
    with make_cluster("64 MB") as local:
        config = local.client_config()
        assert config["protocol"] == "tcp"
        scope: dict[str, Any] = {"Client": Client, "config": config}
        exec(compile(code, "docs/guide/python.md", "exec"), scope)
        client = scope["client"]
        try:
            assert client.l1_registered
            assert client.get("k0") == b"v0"
            assert client.staging.get(["k1", "k2", "missing"]) == [b"v1", b"v2", None]
        finally:
            client.close()


def test_the_migrating_page_installs_from_the_clone() -> None:
    text = (DOCS / "guide" / "migrating.md").read_text()
    assert 'pip install "mooncake-cffi[cpu]"' not in text
    assert "pip install '.[cpu]'" in text and "clone" in text
