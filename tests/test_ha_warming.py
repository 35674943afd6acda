"""A newly elected HA leader's warming placeholder reads as "no leader yet", never as an address.

Upstream HA (Mooncake PR #3743) makes a new leader write ``__mooncake_service_warming__:<lease
id>`` into etcd's ``master_view`` key, and its RPC address only once it is ready.  These tests
write that placeholder themselves into a real etcd (the one a local HA cluster runs, through
etcd's v3 JSON gateway on 127.0.0.1) under a cluster id of their own, and check what each
reader of the leader makes of it: ``mcl2 doctor``, the ``mcl2`` commands that go to the
leader's admin API, and the client (through its fail-fast etcd probe, in a process of its own:
Mooncake keeps one cluster id per process).  The last test replaces the placeholder with the
real leader's address half a second into a client's setup, as a leader that finished warming
up would: the client waits it out and works.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import console

from mooncake_cffi.cluster import LocalCluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("etcd"), reason="etcd is not installed"),
]

EXIT_ERROR = 1
PLACEHOLDER = "__mooncake_service_warming__:7587883123456789"
#: How long the placeholder stays after a client's setup starts, in the last test.
WARM_UP = 1.5
CLIENT = """
import json, sys, time
from mooncake_cffi import Client, MooncakeError
cfg = json.loads(sys.argv[1])
print("setting up", flush=True)
t0 = time.monotonic()
try:
    with Client(cfg, connect_timeout=float(sys.argv[2]), op_timeout=5.0) as client:
        client.put("warming/k", b"after the warm-up")
        print(json.dumps({"ok": client.get("warming/k").decode(), "s": time.monotonic() - t0}))
except MooncakeError as exc:
    print(json.dumps({"error": exc.name, "message": str(exc), "s": time.monotonic() - t0}))
"""


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("warming"), "64 MB", ha=True, masters=1)
    try:
        yield local.start(timeout=60)
    finally:
        local.stop()


def _etcd(local: LocalCluster, call: str, **fields: str) -> dict[str, Any]:
    body = json.dumps({k: base64.b64encode(v.encode()).decode() for k, v in fields.items()})
    request = urllib.request.Request(
        f"http://{local.etcd_endpoint}/v3/kv/{call}", data=body.encode(), method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def view_key(cluster_id: str) -> str:
    return f"mooncake-store/{cluster_id}/master_view"


def write_view(local: LocalCluster, cluster_id: str, value: str) -> None:
    _etcd(local, "put", key=view_key(cluster_id), value=value)


def read_view(local: LocalCluster, cluster_id: str) -> str | None:
    kvs = _etcd(local, "range", key=view_key(cluster_id)).get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def run_client(local: LocalCluster, cluster_id: str, connect_timeout: float) -> dict[str, Any]:
    cfg = local.client_config(cluster_id=cluster_id)
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, json.dumps(cfg), str(connect_timeout)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def mcl2(local: LocalCluster, cluster_id: str, *args: str) -> subprocess.CompletedProcess:
    cfg = local.client_config()
    return console(
        "--master",
        cfg["master_server_addr"],
        "--metadata-server",
        cfg["metadata_server"],
        "--cluster-id",
        cluster_id,
        "--connect-timeout",
        "1",
        *args,
        env={},
    )


def test_the_real_leader_names_an_address(ha: LocalCluster) -> None:
    """The cluster the placeholder is compared with: its own view is an address."""
    view = read_view(ha, str(ha.cluster_id))
    assert view is not None and view.startswith("127.0.0.1:"), view


def test_doctor_reads_the_placeholder_as_no_leader_yet(ha: LocalCluster) -> None:
    write_view(ha, "warming-doctor", PLACEHOLDER)
    result = mcl2(ha, "warming-doctor", "doctor")
    out = result.stdout.decode()
    assert result.returncode == EXIT_ERROR, out
    line = next(x for x in out.splitlines() if x.split()[1:2] == ["leader:"])
    assert line.startswith("FAIL  leader: no leader yet for cluster id 'warming-doctor'"), line
    assert f"holds '{PLACEHOLDER}' in {view_key('warming-doctor')}" in line
    assert "ok    etcd:" in out and "skip  round trip" in out
    # Never taken as host:port (it used to be: "Servname not supported for ai_socktype").
    assert "RPC port" not in out and "Servname" not in out


def test_mcl2_commands_of_the_leader_say_no_leader_yet(ha: LocalCluster) -> None:
    write_view(ha, "warming-cli", PLACEHOLDER)
    for command in (["ls"], ["exists", "k"]):
        result = mcl2(ha, "warming-cli", *command)
        err = result.stderr.decode()
        assert result.returncode == EXIT_ERROR, (command, err)
        assert "no leader yet" in err and PLACEHOLDER in err, (command, err)
        assert len(err.strip().splitlines()) == 1, err  # one line, no traceback


def test_a_client_fails_fast_naming_the_placeholder(ha: LocalCluster) -> None:
    write_view(ha, "warming-client", PLACEHOLDER)
    result = run_client(ha, "warming-client", connect_timeout=1.0)
    assert result.get("error") == "MCS_E_UNREACHABLE", result
    message = result["message"]
    assert "no leader yet" in message and PLACEHOLDER in message, message
    assert view_key("warming-client") in message, message
    # Within the connect timeout (plus start-up), not after Mooncake's ~90 s of retries.
    assert result["s"] < 10.0, result


def test_a_client_waits_out_a_warm_up_that_ends_within_its_connect_timeout(
    ha: LocalCluster,
) -> None:
    """The probe re-reads the view while it holds the placeholder: a client whose setup starts
    before the address is written, with enough connect time, sets up once it is."""
    leader = read_view(ha, str(ha.cluster_id))
    assert leader is not None
    write_view(ha, "warming-late", PLACEHOLDER)
    cfg = ha.client_config(cluster_id="warming-late")
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT, json.dumps(cfg), "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "setting up"
        time.sleep(WARM_UP)  # how long the view stays a placeholder: the fault, not a wait
        write_view(ha, "warming-late", leader)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result.get("ok") == "after the warm-up", result
    # It waited for the address, and set up within its connect timeout.
    assert WARM_UP <= result["s"] < 8.0, result
