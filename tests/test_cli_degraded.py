"""mcl2 on a local cluster that lost a process it can do without, from mcl2 alone.

The README's fault walk-throughs, run with the installed console script: one of three storage
nodes killed, then all of them; the HA leader killed and a standby taking over.  mcl2 keeps
using the cluster while it can serve, warns once (one line on stderr, silenced by -q) which
process is down and how to bring it back, `cluster status` shows it, `cluster restart` brings
it back; it refuses only a cluster that cannot serve, saying why.  The HA run also checks
`mcl2 doctor` on etcd:// masters, from the local cluster and from explicit options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_OK

MCL2 = Path(sys.executable).with_name("mcl2")
pytestmark = [
    pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed"),
    pytest.mark.own_cluster,  # `mcl2 cluster up`: no fixture marks it
]
needs_etcd = pytest.mark.usefixtures("etcd")


class Mcl2:
    """The console script against the local cluster in one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MCL2_", "MC_"))}
        self.env["MCL2_STATE_DIR"] = str(state_dir)

    def __call__(
        self, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(MCL2), *args],
            input=stdin,
            capture_output=True,
            env={**self.env, **(env or {})},
            timeout=120,
            check=False,
        )

    def ok(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        done = self(*args, stdin=stdin)
        assert done.returncode == EXIT_OK, (args, done.stdout, done.stderr)
        return done

    def status(self) -> dict[str, object]:
        return json.loads(self("cluster", "status", "--json").stdout)


@pytest.fixture
def mcl2(tmp_path: Path) -> Iterator[Mcl2]:
    run = Mcl2(tmp_path / "state")
    try:
        yield run
    finally:
        run("cluster", "down")


def warnings_in(err: bytes) -> list[str]:
    return [line for line in err.decode().splitlines() if line.startswith("mcl2: warning:")]


def wait_until(what: str, check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_one_of_three_storage_nodes_down_is_warned_about_and_restarted(mcl2: Mcl2) -> None:
    mcl2.ok("cluster", "up", "--storage-nodes", "3", "--segment-size", "64MB", "--client-ttl", "2")
    key = f"degraded-{uuid.uuid4().hex[:8]}"
    copied = mcl2.ok("--json", "put", "--replicas", "3", f"{key}-r", stdin=b"three copies")
    assert json.loads(copied.stdout)[f"{key}-r"]["replicas"] == 3
    killed = mcl2.ok("cluster", "kill", "storage2")
    assert b"killed storage2" in killed.stderr

    # The master drops the dead node's segment after the client TTL; until then a put may
    # land on it (TRANSFER_FAIL), which is Mooncake's behaviour, not mcl2's.
    wait_until(
        "the master to drop storage2's segment",
        lambda: len(json.loads(mcl2("--json", "segments").stdout or b"[]")) == 2,
    )
    # The README's replica walk-through: the copies on the live nodes still serve the key.
    assert mcl2.ok("get", f"{key}-r").stdout == b"three copies"
    replicas = json.loads(mcl2.ok("--json", "info", f"{key}-r").stdout)[f"{key}-r"]["replicas"]
    assert len(replicas) == 2
    put = mcl2.ok("put", key, stdin=b"still served")
    (warning,) = warnings_in(put.stderr)
    assert "storage2 is down" in warning and "`mcl2 cluster restart storage2`" in warning
    assert mcl2.ok("get", key).stdout == b"still served"
    assert key.encode() in mcl2.ok("ls").stdout
    assert json.loads(mcl2.ok("--json", "info", key).stdout)[key]["status"] == "found"
    quiet = mcl2.ok("-q", "get", key)
    assert quiet.stderr == b"" and quiet.stdout == b"still served"

    status = mcl2("cluster", "status")
    assert status.returncode == EXIT_ERROR  # not healthy: a process is down
    out = status.stdout.decode()
    assert "degraded (storage2 down) but serving" in out
    assert "DOWN" in next(line for line in out.splitlines() if line.startswith("  storage2 "))
    assert "`mcl2 cluster restart storage2`" in out
    info = mcl2.status()
    assert info["down"] == ["storage2"] and info["serving"] is True

    again = mcl2.ok("cluster", "up")
    assert b"already running" in again.stdout and warnings_in(again.stderr)

    # Without any storage node the cluster cannot serve: refused, saying why and what to do.
    mcl2.ok("cluster", "kill", "storage")
    mcl2.ok("cluster", "kill", "storage1")
    refused = mcl2("put", f"{key}-2", stdin=b"x")
    assert refused.returncode == EXIT_ERROR
    assert b"cannot serve: no storage node is running" in refused.stderr
    assert b"`mcl2 cluster restart` brings them back" in refused.stderr
    assert b"run `mcl2 cluster up`" not in refused.stderr
    up = mcl2("cluster", "up")
    assert up.returncode == EXIT_ERROR and b"cannot serve" in up.stderr
    assert mcl2.status()["serving"] is False

    restarted = mcl2.ok("cluster", "restart")
    for role in ("storage", "storage1", "storage2"):
        assert f"restarted {role} (pid ".encode() in restarted.stderr
    assert mcl2.ok("cluster", "status").returncode == EXIT_OK
    # Until the master drops the killed nodes' old segments (client TTL, 2 s), a put may be
    # placed on one of them and fail with TRANSFER_FAIL: Mooncake's placement, as above.
    landed = []

    def put_lands() -> bool:
        done = mcl2("put", f"{key}-3", stdin=b"healthy again")
        if done.returncode == 0:
            landed.append(done)
        else:
            assert b"TRANSFER_FAIL" in done.stderr, done.stderr
        return done.returncode == 0

    wait_until("a put to land after the restart", put_lands, timeout=15.0)
    assert warnings_in(landed[0].stderr) == []
    alone = mcl2.ok("cluster", "restart", "storage")
    assert b"storage is running" in alone.stderr and b"left alone" in alone.stderr
    unknown = mcl2("cluster", "restart", "storage9")
    assert unknown.returncode == 2 and b"its roles are" in unknown.stderr


@needs_etcd
def test_ha_leader_killed_standby_serves_and_doctor_checks_etcd(mcl2: Mcl2, tmp_path: Path) -> None:
    mcl2.ok(
        "cluster", "up", "--ha", "--masters", "3", "--segment-size", "64MB", "--client-ttl", "2"
    )
    key = f"ha-{uuid.uuid4().hex[:8]}"
    mcl2.ok("put", key, stdin=b"before the failover")
    info = mcl2.status()
    leader = str(info["leader"])

    doctor = json.loads(mcl2.ok("doctor", "--json").stdout)
    checks = {c["check"]: c for c in doctor["checks"]}
    assert list(checks)[:4] == ["etcd", "leader", "masters", "local cluster"]
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert f"{leader} leader" in checks["masters"]["detail"]

    mcl2.ok("cluster", "kill", leader)
    refusals: list[bytes] = []

    def serves() -> bool:
        got = mcl2("get", key)
        if got.returncode != EXIT_OK:
            refusals.append(got.stderr)
        return got.returncode == EXIT_OK

    wait_until("a standby to take over", serves, timeout=60)
    for err in refusals:  # while the standbys elect a leader: no "run `mcl2 cluster up`"
        assert b"cluster up`," not in err, err
    got = mcl2.ok("get", key)
    assert got.stdout == b"before the failover"  # the oplog kept it
    (warning,) = warnings_in(got.stderr)
    assert f"{leader} is down" in warning and f"`mcl2 cluster restart {leader}`" in warning

    info = mcl2.status()
    assert info["down"] == [leader] and info["serving"] is True
    new_leader = str(info["leader"])
    assert new_leader != leader

    doctor = mcl2("doctor", "--json")
    assert doctor.returncode == EXIT_OK, doctor.stdout
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["masters"]["status"] == "warn" and f"{leader} DOWN" in checks["masters"]["detail"]
    assert checks["local cluster"]["status"] == "warn"
    assert checks["round trip"]["status"] == "ok"

    # The same cluster from explicit options: etcd://, its cluster id, the leader's admin API.
    endpoint = str(info["master_addr"]).removeprefix("etcd://")
    where = [
        "--master",
        f"etcd://127.0.0.1:1;{endpoint}",  # a dead endpoint first: one answering is enough
        "--metadata-server",
        str(info["metadata_server"]),
        "--admin",
        str(info["metrics_url"]),
    ]
    elsewhere = {"MCL2_STATE_DIR": str(tmp_path / "no-local-cluster")}
    explicit = mcl2(*where, "--cluster-id", str(info["cluster_id"]), "doctor", env=elsewhere)
    assert explicit.returncode == EXIT_OK, explicit.stdout
    lines = explicit.stdout.decode().splitlines()
    assert lines[0].startswith("warn  etcd: 1 of 2 endpoints healthy"), lines
    assert lines[1].startswith("ok    leader:") and "leads and accepts connections" in lines[1]
    assert not any("Name or service not known" in line for line in lines)
    no_id = mcl2(*where, "doctor", env=elsewhere)
    assert no_id.returncode == EXIT_ERROR
    assert b"FAIL  leader: " in no_id.stdout and b"--cluster-id" in no_id.stdout

    restarted = mcl2.ok("cluster", "restart", leader)
    assert f"restarted {leader}".encode() in restarted.stderr
    info = mcl2.status()
    assert info["down"] == [] and info["healthy"] is True
    assert info["processes"][leader]["role"] == "standby"  # type: ignore[index]
