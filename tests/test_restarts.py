"""Restarts while a client stays open, on loopback: a storage node killed and started again,
and the (non-HA) master killed and started again on the same ports.

What is checked: every call answers within its deadline + 1 s; a read of a key stored before
the restart gives the bytes that were written, a miss or a typed, retryable error, never other
bytes; new writes land and read back once the process is back.  The master test records
whether the open client recovered (it prints it and stores it as a junit property).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mooncake_cffi import Client, MooncakeError
from mooncake_cffi.cluster import ClusterError, LocalCluster

#: The client's deadline for every call (seconds); an answer may take this + SLACK.
OP_TIMEOUT = 2.0
SLACK = 1.0
#: How long the tests wait for a restarted process to serve new writes.
RECOVERY_LIMIT = 20.0


def _digest(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Answer:
    """What one call gave: its value, or the MooncakeError it raised, and how long it took."""

    call: str
    took: float
    value: Any = None
    error: MooncakeError | None = None

    def describe(self) -> str:
        what = f"{self.error.name}" if self.error else "ok"
        return f"{self.call}: {what} in {self.took:.2f} s"


def _ask(call: str, fn: Callable[[], Any]) -> Answer:
    start = time.monotonic()
    try:
        value = fn()
    except MooncakeError as exc:
        return Answer(call, time.monotonic() - start, error=exc)
    return Answer(call, time.monotonic() - start, value=value)


class Model:
    """Keys written before a restart, with the digest of what was written."""

    def __init__(self, client: Client, n: int, size: int) -> None:
        self.client = client
        self.values = {f"rs-{uuid.uuid4().hex[:10]}-{i}": os.urandom(size) for i in range(n)}
        self.keys = list(self.values)
        assert client.batch_put(self.keys, list(self.values.values())) == [0] * n
        self.wrong: list[str] = []

    def check_value(self, key: str, got: bytes | None) -> None:
        """A value read for ``key`` must be what was written (None: a miss, allowed)."""
        if got is not None and _digest(got) != _digest(self.values[key]):
            self.wrong.append(f"{key}: {len(got)} bytes that were never written")

    def probes(self, fresh: Callable[[], str]) -> list[tuple[str, Callable[[], Any]]]:
        """Calls that read old keys (checking any bytes returned) and write new ones."""
        c = self.client
        old, pair = self.keys[0], self.keys[1:3]

        def get() -> None:
            self.check_value(old, c.get(old))

        def batch_get() -> None:
            for key, got in zip(pair, c.batch_get(pair), strict=True):
                self.check_value(key, got)

        def get_into() -> None:
            bufs = [bytearray(len(self.values[k])) for k in pair]
            for key, buf, r in zip(pair, bufs, c.get_into(pair, bufs), strict=True):
                if r >= 0:
                    self.check_value(key, bytes(buf[:r]))

        def put() -> None:
            key, value = fresh(), os.urandom(50_000)
            c.put(key, value)
            got = c.get(key)
            if got != value:
                self.wrong.append(
                    f"new write {key} read back as {None if got is None else len(got)}"
                )

        return [
            ("exists", lambda: c.exists(old)),
            ("get", get),
            ("batch_get", batch_get),
            ("get_into", get_into),
            ("put+get", put),
        ]


def _check_answers(answers: list[Answer]) -> None:
    late = [a.describe() for a in answers if a.took > OP_TIMEOUT + SLACK]
    assert not late, f"calls past their deadline + {SLACK} s: {late}"
    untyped = [a.describe() for a in answers if a.error is not None and not a.error.retryable]
    assert not untyped, f"errors that say retrying cannot help: {untyped}"


def _fresh_key() -> str:
    return f"rs-new-{uuid.uuid4().hex[:12]}"


def _until_writes_land(model: Model, answers: list[Answer]) -> float | None:
    """Probe until a new write lands and reads back (seconds it took), or None at the limit."""
    start = time.monotonic()
    while time.monotonic() - start < RECOVERY_LIMIT:
        round_answers = [_ask(name, fn) for name, fn in model.probes(_fresh_key)]
        answers += round_answers
        if all(a.error is None for a in round_answers if a.call == "put+get"):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def _new_writes_read_back(client: Client, n: int = 8) -> None:
    keys = [_fresh_key() for _ in range(n)]
    values = [os.urandom(100_000 + i) for i in range(n)]
    assert client.batch_put(keys, values) == [0] * n
    assert client.batch_get(keys) == values


def test_storage_node_restart_old_keys_miss_or_fail_never_wrong_bytes(make_cluster, capsys):
    cluster = make_cluster("128 MB", client_ttl=2).start()
    with Client(cluster.client_config(), op_timeout=OP_TIMEOUT) as client:
        model = Model(client, n=24, size=200_000)
        answers: list[Answer] = []
        cluster.kill("storage")
        down = [_ask(name, fn) for name, fn in model.probes(_fresh_key)]
        answers += down
        assert any(a.error is not None for a in down), [a.describe() for a in down]
        restarted = time.monotonic()
        cluster.restart("storage")
        landed = _until_writes_land(model, answers)
        assert landed is not None, [a.describe() for a in answers[-5:]]
        recovered = time.monotonic() - restarted
        _new_writes_read_back(client)
        misses = sum(got is None for got in client.batch_get(model.keys))
        # Old keys, once more: what was written, or a miss -- never the new node's memory.
        for key, got in zip(model.keys, client.batch_get(model.keys), strict=True):
            model.check_value(key, got)
        _check_answers(answers)
        assert not model.wrong, model.wrong
        assert client.in_flight == 0 or _drained(client)
        names = sorted({a.error.name for a in answers if a.error is not None})
        with capsys.disabled():
            print(
                f"\n[storage restart] new writes read back {recovered:.1f} s after the restart;"
                f" old keys: {misses} of {len(model.keys)} misses; errors seen: {', '.join(names)}"
            )


def _drained(client: Client, limit: float = 30.0) -> bool:
    """True once every batch a timed-out call left with the shim has finished."""
    start = time.monotonic()
    while client.in_flight and time.monotonic() - start < limit:
        time.sleep(0.2)
    return client.in_flight == 0


def test_master_restart_open_client_recovers_or_fails_cleanly(
    make_cluster, record_property, capsys
):
    cluster = make_cluster("128 MB").start()
    with Client(cluster.client_config(), op_timeout=OP_TIMEOUT) as client:
        model = Model(client, n=8, size=100_000)
        answers: list[Answer] = []
        cluster.kill("master")
        down = [_ask(name, fn) for name, fn in model.probes(_fresh_key)]
        answers += down
        # With the master gone nothing can succeed: every call must fail, typed.
        assert all(a.error is not None for a in down), [a.describe() for a in down]
        restarted = time.monotonic()
        cluster.restart("master")
        recovered = _until_writes_land(model, answers)
        if recovered is not None:
            _new_writes_read_back(client)
            took = time.monotonic() - restarted
            verdict = f"recovered: new writes read back {took:.1f} s after the restart"
        else:
            verdict = f"did not recover within {RECOVERY_LIMIT:.0f} s; every call failed cleanly"
        # A non-HA master forgets every key: old keys are misses, never other bytes.
        for key, got in zip(model.keys, client.batch_get(model.keys), strict=True):
            model.check_value(key, got)
        _check_answers(answers)
        assert not model.wrong, model.wrong
        record_property("master_restart", verdict)
        names = sorted({a.error.name for a in answers if a.error is not None})
        with capsys.disabled():
            print(f"\n[master restart] open client {verdict}; errors seen: {', '.join(names)}")
    # Whatever the open client did, a new client of the restarted master works.
    with Client(cluster.client_config(), op_timeout=OP_TIMEOUT) as fresh:
        _new_writes_read_back(fresh)


@pytest.mark.parametrize("role", ["storage", "master"])
def test_a_restarted_process_listens_where_it_did(make_cluster, role):
    """restart() brings the process back on its own ports (the tests above rely on it)."""
    cluster = make_cluster("64 MB").start()
    before = cluster.procs[role].argv
    cluster.kill(role)
    cluster.restart(role, timeout=15)
    assert cluster.procs[role].argv == before
    assert cluster.alive(role) and _mounted(cluster)


def _mounted(cluster: LocalCluster) -> bool:
    try:
        return len(cluster.segments()) >= 1
    except Exception:  # noqa: BLE001 - a master still starting
        return False


def test_restart_of_a_killed_storage_node_and_what_it_refuses(make_cluster):
    cluster = make_cluster("64 MB", client_ttl=2).start()
    old_pid, old_segments = cluster.pids["storage"], set(cluster.segments())
    with pytest.raises(
        ClusterError, match=r"no such process \(its roles: metadata, master, storage\)"
    ):
        cluster.restart("storage-1")  # roles are storage, storage1...: the error names them
    with pytest.raises(ClusterError, match="restart storage: it is still running"):
        cluster.restart("storage")
    assert cluster.pids["storage"] == old_pid and _processes_with(cluster, "storage") == 1

    cluster.kill("storage")
    cluster.restart("storage")
    new_pid = cluster.pids["storage"]
    assert new_pid != old_pid and cluster.alive("storage")
    assert _processes_with(cluster, "storage") == 1
    assert set(cluster.segments()) - old_segments, "the restarted node mounted no new segment"
    recorded = LocalCluster.load(cluster.state_dir)
    assert recorded is not None and recorded.pids["storage"] == new_pid
    assert recorded.alive("storage")
    # Once the dead node's segment is dropped (client_ttl 2 s), every value lands on the new one.
    deadline = time.monotonic() + 20
    while set(cluster.segments()) & old_segments:
        assert time.monotonic() < deadline, "the dead node's segment was never dropped"
        time.sleep(0.2)
    with Client(cluster.client_config(), op_timeout=OP_TIMEOUT) as client:
        _new_writes_read_back(client)


def test_restart_of_the_master_from_the_state_file_serves_when_it_returns(make_cluster):
    """A cluster loaded from state.json (another process's view, as mcl2's) restarts its
    master; a new client's first writes land, with no retry, as soon as restart() returns."""
    cluster = make_cluster("64 MB", storage_nodes=2).start()
    old_pid = cluster.pids["master"]
    cluster.kill("master")
    loaded = LocalCluster.load(cluster.state_dir)
    assert loaded is not None and not loaded.alive("master")
    try:
        loaded.restart("master")
        assert loaded.pids["master"] != old_pid and loaded.alive("master")
        assert len(loaded.segments()) == 2
        with Client(loaded.client_config(), op_timeout=OP_TIMEOUT) as client:
            _new_writes_read_back(client)
        recorded = LocalCluster.load(cluster.state_dir)
        assert recorded is not None and recorded.pids == loaded.pids
    finally:
        assert "master" in loaded.stop()  # the first object does not know the new process


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _processes_with(cluster: LocalCluster, role: str) -> int:
    """How many live processes carry ``role``'s marker (its port flag) and the cluster's binary."""
    proc = cluster.procs[role]
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _pid_alive(int(entry.name)):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].decode(errors="replace") == proc.argv[0] and proc.marker.encode() in argv:
            count += 1
    return count
