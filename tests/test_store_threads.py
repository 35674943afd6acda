"""The drop-in from several threads at once, and with a deadline from the setup dict when a
storage node stops answering (where Mooncake's own client waits its 30 s TCP timeout)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from process_helpers import freeze
from store_helpers import Memory, setup_args, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import MooncakeDistributedStore


@pytest.fixture(scope="module")
def store(cluster: LocalCluster) -> Iterator[MooncakeDistributedStore]:
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    yield s
    s.close()


def _worker(s: MooncakeDistributedStore, t: str, errors: list[str], rounds: int) -> None:
    mem = Memory(8 * 1024)
    for i in range(rounds):
        key, value = f"{t}-{i}", (f"{t}:{i}:".encode() * 200)[: 1000 + i]
        checks: list[tuple[str, Any, Any]] = [
            ("put", s.put(key, value), 0),
            ("get", s.get(key), value),
            ("is_exist", s.is_exist(key), 1),
            ("get_size", s.get_size(key), len(value)),
            ("get_into", s.get_into(key, mem.ptr, mem.size), len(value)),
            ("get_batch", s.get_batch([key, key + "-none"]), [value, b""]),
            ("batch_is_exist", s.batch_is_exist([key, key + "-none"]), [1, 0]),
            ("batch_put_from", s.batch_put_from([key + "-c"], [mem.ptr], [len(value)]), [0]),
            ("copy", s.get(key + "-c"), value),
            ("batch_remove", s.batch_remove([key, key + "-c"], True), [0, 0]),
        ]
        for name, got, want in checks:
            if got != want:
                errors.append(f"{t} round {i}: {name} gave {got!r:.60} not {want!r:.60}")
                return


def test_many_threads_share_one_store(store: MooncakeDistributedStore) -> None:
    errors: list[str] = []
    threads = [
        threading.Thread(target=_worker, args=(store, tag(f"th{n}"), errors, 25)) for n in range(8)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads)
    assert not errors, errors[:5]


def test_threads_racing_on_one_key_all_get_a_code_and_one_value_wins(
    store: MooncakeDistributedStore,
) -> None:
    key, results = tag("race"), []
    lock = threading.Lock()

    def put(i: int) -> None:
        rc = store.put(key, bytes([i]) * 5000)
        with lock:
            results.append(rc)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    # Mooncake keeps the first value; racing writers see 0 or REPLICA_IS_NOT_READY (-703).
    assert len(results) == 8 and set(results) <= {0, -703} and 0 in results
    value = store.get(key)
    assert len(value) == 5000 and len(set(value)) == 1


def test_a_deadline_from_the_setup_dict_bounds_calls_to_a_frozen_node(make_cluster: Any) -> None:
    local = make_cluster("64 MB").start()
    pid = local.pids["storage"]
    s = MooncakeDistributedStore()
    # The deadline alone (the breaker would answer every call after the first at once).
    cfg = {**local.client_config(), "op_timeout": 1.0, "fail_open": False}
    assert s.setup(cfg) == 0
    mem = Memory(4096)
    try:
        key = tag("frozen")
        assert s.put(key, b"x" * 4096) == 0
        freeze(pid)
        try:
            started = time.monotonic()
            assert s.get(key) == b""  # Mooncake's answer for a value it cannot read
            assert s.get_into(key, mem.ptr, mem.size) in (-901, -800)
            assert s.batch_get_into([key], [mem.ptr], [mem.size])[0] in (-901, -800)
            assert time.monotonic() - started < 5, "a call did not keep its deadline"
            assert s.is_exist(key) == 1  # the master still answers
        finally:
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while s.get(key) != b"x" * 4096 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.get(key) == b"x" * 4096
        assert s.get_into(key, mem.ptr, mem.size) == 4096
    finally:
        s.close()


def test_the_staged_path_of_protocols_that_need_registered_memory(
    store: MooncakeDistributedStore,
) -> None:
    # On RDMA the bytes calls copy values through memory registered for the call and gets go
    # through Mooncake's local buffer; run that path over TCP here (there is no RDMA device).
    calls = store._x
    calls.staged = True
    try:
        t = tag("staged")
        assert store.put(f"{t}-a", b"alpha") == 0
        assert store.put_batch([f"{t}-b", f"{t}-c"], [b"beta", memoryview(b"gamma")]) == 0
        assert store.upsert(f"{t}-a", b"ALPHA") == 0
        assert store.put_parts(f"{t}-p", b"pa", b"rts") == 0
        assert store.put(f"{t}-e", b"") == -600
        assert store.get(f"{t}-a") == b"ALPHA"
        assert store.get_batch([f"{t}-b", f"{t}-c", f"{t}-p", f"{t}-none"]) == [
            b"beta",
            b"gamma",
            b"parts",
            b"",
        ]
    finally:
        calls.staged = False


def test_a_forked_child_gets_a_code_instead_of_hanging(store: MooncakeDistributedStore) -> None:
    key = tag("fork")
    assert store.put(key, b"parent's") == 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call answers at once, none touches the parent's client
        os.close(read)
        answers = (store.is_exist(key), store.get(key), store.put(key + "c", b"x"))
        os.write(write, repr(answers).encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the forked child hung")
    assert os.read(read, 1000).decode() == "(-1, b'', -1)"
    os.close(read)
    assert store.get(key) == b"parent's"
