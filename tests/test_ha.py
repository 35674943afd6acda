"""HA masters on etcd: clients connect through ``etcd://``, and survive the leader's death.

The failover test runs a mixed load (puts of fresh keys, gets and exists of acknowledged ones)
in two client processes at once, one with this package's Client and one with Mooncake's own
``MooncakeDistributedStore`` (one etcd leader watch per process is all Mooncake supports, so
they cannot share one), kills the leading master in the middle, and checks that

* every call returns (a value or a typed error) within 5 s, also those in flight at the kill;
* puts and gets succeed again within 15 s of the kill;
* no write acknowledged 3 s or more before the kill is lost.  Younger acknowledged writes can
  be lost (the standby replays the oplog once a second); they are counted and printed.

This module is also the client process: ``python test_ha.py ours|theirs CONFIG SECONDS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from process_helpers import gone, wait_until

MIB = 1 << 20
CALL_DEADLINE = 5.0
RECOVERY_DEADLINE = 15.0
SAFE_AGE = 3.0
VALUE = b"h" * 4096


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence UnknownConfigKeyWarning: whether Mooncake-side key lists name these keys (the
    shim's cluster_id, the ReplicateConfig fields) is not what these tests check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


# -- the client process ---------------------------------------------------------------------


def _open(kind: str, cfg: dict[str, Any]) -> tuple[Any, dict[str, Callable[..., Any]]]:
    """A client of ``kind`` and its put/get/exists, each returning True/False (never raising)."""
    if kind == "ours":
        from mooncake_cffi import Client
        from mooncake_cffi.errors import MooncakeError

        client = Client(cfg)

        def call(fn: Callable[[], Any]) -> tuple[bool, str]:
            try:
                return bool(fn() is not False), ""
            except MooncakeError as exc:
                return False, exc.name

        ops = {
            "put": lambda k: call(lambda: client.put(k, VALUE)),
            "get": lambda k: call(lambda: client.get(k) == VALUE),
            "exists": lambda k: call(lambda: client.exists(k)),
        }
        return client, ops
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(
        cfg["local_hostname"],
        cfg["metadata_server"],
        0,
        16 * MIB,
        "tcp",
        "",
        cfg["master_server_addr"],
    )
    if rc != 0:
        raise SystemExit(f"MooncakeDistributedStore.setup returned {rc}")
    ops = {
        "put": lambda k: (store.put(k, VALUE) == 0, ""),
        "get": lambda k: (store.get(k) == VALUE, ""),
        "exists": lambda k: (store.is_exist(k) == 1, ""),
    }
    return store, ops


def workload(kind: str, cfg: dict[str, Any], seconds: float) -> None:
    """Mixed load for ``seconds``; prints one JSON report (events with monotonic times)."""
    client, ops = _open(kind, cfg)
    events: list[tuple[str, float, float, bool, str]] = []
    acked: list[tuple[str, float]] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    print("ready", flush=True)

    def writer() -> None:
        n = 0
        while time.monotonic() < stop_at:
            key = f"ha-{kind}-{os.getpid()}-{n}"
            n += 1
            t0 = time.monotonic()
            ok, err = ops["put"](key)
            t1 = time.monotonic()
            with lock:
                events.append(("put", t0, t1, ok, err))
                if ok:
                    acked.append((key, t1))
            time.sleep(0.01)

    def reader(op: str) -> None:
        i = 0
        while time.monotonic() < stop_at:
            with lock:
                key = acked[i % len(acked)][0] if acked else "ha-none"
            i += 7
            t0 = time.monotonic()
            ok, err = ops[op](key)
            with lock:
                events.append((op, t0, time.monotonic(), ok, err))
            time.sleep(0.01)

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(op,)) for op in ("get", "exists")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # After the load: which acknowledged writes can still be read?
    missing = []
    for key, when in acked:
        ok = False
        for _ in range(3):
            ok, _err = ops["get"](key)
            if ok:
                break
            time.sleep(0.2)
        if not ok:
            missing.append((key, when))
    t0 = time.monotonic()
    if kind == "ours":
        client.close()  # bounded soon after a failover too (tests/test_ha_close.py)
    report = {"events": events, "acked": len(acked), "missing": missing}
    report["close_s"] = time.monotonic() - t0
    print(json.dumps(report), flush=True)
    sys.stdout.flush()
    os._exit(0)


# -- the etcd:// probe ---------------------------------------------------------------------


def _ha_config(master: str) -> dict[str, Any]:
    return {
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "master_server_addr": master,
        "cluster_id": "mcs-probe-test",
        "protocol": "tcp",
        "global_segment_size": "0",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_etcd_endpoints_fail_fast_naming_each() -> None:
    from mooncake_cffi import Client
    from mooncake_cffi.errors import MooncakeError

    a, b = _free_port(), _free_port()
    start = time.monotonic()
    with pytest.raises(MooncakeError) as info, _quiet():
        Client(_ha_config(f"etcd://127.0.0.1:{a};127.0.0.1:{b}"))
    assert time.monotonic() - start < 3.0
    message = str(info.value)
    assert info.value.name == "MCS_E_UNREACHABLE"
    assert f"127.0.0.1:{a}: Connection refused" in message
    assert f"127.0.0.1:{b}: Connection refused" in message


def test_an_etcd_address_that_is_not_etcd_is_named() -> None:
    from mooncake_cffi import Client
    from mooncake_cffi.errors import MooncakeError

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.0 404 Not Found\r\n\r\nnothing here")

        server = threading.Thread(target=answer, daemon=True)
        server.start()
        with pytest.raises(MooncakeError, match="not like etcd") as info, _quiet():
            Client(_ha_config(f"etcd://127.0.0.1:{port}"), connect_timeout=1.0)
        assert info.value.name == "MCS_E_UNREACHABLE"
        server.join(timeout=5)


def test_an_etcd_address_without_endpoints_is_invalid() -> None:
    from mooncake_cffi import Client

    with pytest.raises(ValueError, match="names no etcd endpoint"), _quiet():
        Client(_ha_config("etcd://;"))
    with pytest.raises(ValueError, match="has no port"), _quiet():
        Client(_ha_config("etcd://127.0.0.1"))


# -- failover ------------------------------------------------------------------------------


def _start_client(kind: str, local: Any, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, **local.client_env(), "MCS_HA_SECONDS": str(seconds)}
    if kind == "ours":
        # Ours gets the cluster id from its config's cluster_id key alone.
        env.pop("MC_STORE_CLUSTER_ID", None)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), kind, json.dumps(local.client_config())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parent.parent.parent,  # not the source tree
    )
    return proc


def _analyse(report: dict[str, Any], killed_at: float) -> dict[str, Any]:
    events = report["events"]
    slowest = max(t1 - t0 for _, t0, t1, _, _ in events)
    in_flight = [e for e in events if e[1] <= killed_at <= e[2]]
    first_ok = {}
    for op in ("put", "get"):
        after = [t1 for o, t0, t1, ok, _ in events if o == op and ok and t0 >= killed_at]
        first_ok[op] = (min(after) - killed_at) if after else None
    old_lost = [k for k, when in report["missing"] if when <= killed_at - SAFE_AGE]
    young_lost = [k for k, when in report["missing"] if killed_at - SAFE_AGE < when <= killed_at]
    young_acked = sum(
        1
        for o, _, t1, ok, _ in events
        if o == "put" and ok and killed_at - SAFE_AGE < t1 <= killed_at
    )
    errors = sorted({e[4] for e in events if not e[3] and e[4]})
    return {
        "slowest_call_s": slowest,
        "in_flight_at_kill": len(in_flight),
        "slowest_in_flight_s": max((e[2] - e[1] for e in in_flight), default=0.0),
        "first_ok_after_kill_s": first_ok,
        "old_lost": old_lost,
        "young_lost": len(young_lost),
        "young_acked": young_acked,
        "acked": report["acked"],
        "errors": errors,
        "close_s": report.get("close_s"),
    }


@pytest.mark.usefixtures("etcd")
def test_leader_killed_during_a_mixed_load(
    make_cluster: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    local = make_cluster("64 MB", storage_nodes=2, ha=True, masters=3, client_ttl=2).start()
    before_kill, after_kill = 3.0, 20.0
    seconds = before_kill + after_kill
    clients = {kind: _start_client(kind, local, seconds) for kind in ("ours", "theirs")}
    try:
        for kind, proc in clients.items():
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", f"{kind} client did not start"
        time.sleep(before_kill)  # the load's length before the fault, not a wait for a state
        leader = local.status()["leader"]
        assert leader is not None
        killed_at = time.monotonic()
        local.kill(leader)
        reports = {}
        for kind, proc in clients.items():
            out, _ = proc.communicate(timeout=seconds + 120)
            assert proc.returncode == 0, f"{kind} client failed"
            reports[kind] = _analyse(json.loads(out.strip().splitlines()[-1]), killed_at)
        new_leader = local.status()["leader"]
    finally:
        for proc in clients.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with capsys.disabled():
        print(f"\n[ha] killed {leader}; new leader {new_leader}")
        for kind, r in reports.items():
            print(f"[ha] {kind}: {json.dumps(r)}")
    assert new_leader is not None and new_leader != leader
    for kind, r in reports.items():
        assert r["slowest_call_s"] < CALL_DEADLINE, (kind, r)
        for op, t in r["first_ok_after_kill_s"].items():
            assert t is not None and t < RECOVERY_DEADLINE, (kind, op, r)
        assert r["old_lost"] == [], (kind, r)
    assert reports["ours"]["close_s"] <= 2.0, reports["ours"]


if __name__ == "__main__":
    workload(sys.argv[1], json.loads(sys.argv[2]), float(os.environ["MCS_HA_SECONDS"]))


def _mcl2(state_dir: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCL2_", "MC_STORE_"))}
    env["MCL2_STATE_DIR"] = str(state_dir)
    mcl2 = Path(sys.executable).parent / "mcl2"
    return subprocess.run(
        [str(mcl2), *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        cwd=state_dir.parent,
    )


@pytest.mark.usefixtures("etcd")
@pytest.mark.own_cluster  # `mcl2 cluster up`: no fixture marks it
def test_mcl2_runs_an_ha_cluster_in_one_command(tmp_path: Path) -> None:
    state = tmp_path / "state"
    try:
        up = _mcl2(
            state,
            "cluster",
            "up",
            "--ha",
            "--masters",
            "3",
            "--storage-nodes",
            "3",
            "--segment-size",
            "32MB,48MB,64MB",
            "--client-ttl",
            "2",
        )
        assert up.returncode == 0, up.stderr.decode()
        assert b"etcd://127.0.0.1:" in up.stdout and b"cluster_id" in up.stdout
        status = _mcl2(state, "--json", "cluster", "status")
        assert status.returncode == 0, status.stderr.decode()
        info = json.loads(status.stdout)
        assert info["healthy"] and info["ha"] and info["leader"] in ("master", "master1", "master2")
        roles = {r: p.get("role") for r, p in info["processes"].items() if r.startswith("master")}
        assert sorted(roles.values()) == ["leader", "standby", "standby"], roles
        assert sorted(s["total_bytes"] for s in info["memory"]["segments"].values()) == [
            32 * MIB,
            48 * MIB,
            64 * MIB,
        ]
        # The data commands use the local cluster's etcd:// address and cluster id.
        assert _mcl2(state, "put", "ha-cli-key", stdin=b"through etcd").returncode == 0
        got = _mcl2(state, "get", "ha-cli-key")
        assert got.returncode == 0 and got.stdout == b"through etcd", got.stderr.decode()
        # A crashed node and a crashed standby: down stops the rest and says so.
        pids = info["pids"]
        standby = next(r for r, role in roles.items() if role == "standby")
        for role in ("storage1", standby):
            os.kill(pids[role], 9)
        for role in ("storage1", standby):
            wait_until(f"the killed {role} to be gone", lambda r=role: gone(pids[r]))
    finally:
        down = _mcl2(state, "--json", "cluster", "down")
    assert down.returncode == 0, down.stderr.decode()
    report = json.loads(down.stdout)
    assert sorted(report["gone_roles"]) == sorted(["storage1", standby])
    assert len(report["stopped_roles"]) == 6  # etcd, metadata, two masters, two nodes
    for pid in pids.values():
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
