"""The drop-in fails open by default: a store that stops answering costs one call a bounded
wait, the calls after it answer at once, and reuse resumes by itself when the store is back.

Each test freezes (SIGSTOP) or kills a process of a cluster of its own and sets up the
drop-in as a stack does, with nothing of this package's in its setup.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from process_helpers import freeze

from mooncake_cffi.status import OP_EXISTS
from mooncake_cffi.store import MooncakeDistributedStore
from mooncake_cffi.store.calls import StoreCalls
from mooncake_cffi.store.fail_open import DEADLINE, PROBE_EVERY, FailOpen
from mooncake_cffi.store.live_hits import ANSWER_WITHIN
from mooncake_cffi.store.node_health import FRESH_FOR
from mooncake_cffi.store.node_health import PROBE_EVERY as HEALTH_EVERY

#: Scheduling slack on a loaded 2-core machine, beyond Mooncake's shortened wait.
SLACK = 3.0
#: How long a test waits for the breaker to close once the store is back.
RECOVERY = PROBE_EVERY + DEADLINE + 10.0


def positional_setup(local: Any, store: MooncakeDistributedStore) -> int:
    """``setup`` as vLLM's connector calls it: positional, Mooncake's keys only."""
    return store.setup(
        local.client_host, local.metadata_server, 0, 16 << 20, "tcp", "", local.master_addr
    )


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"{what} not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


@pytest.fixture
def local(make_cluster):
    cluster = make_cluster("64 MB").start()
    yield cluster
    for pid in cluster.pids.values():  # thaw whatever a test froze
        if pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


@pytest.fixture
def store(local):
    s = MooncakeDistributedStore()
    assert positional_setup(local, s) == 0
    yield s
    s.close()


def test_fail_open_is_the_default_and_can_be_turned_off(local, store):
    assert isinstance(store._x, FailOpen)
    other = MooncakeDistributedStore()
    assert other.setup(local.client_config(fail_open=False)) == 0
    try:
        assert isinstance(other._x, StoreCalls)
    finally:
        other.close()
    with pytest.raises(ValueError, match="fail_open must be true or false"):
        MooncakeDistributedStore().setup(local.client_config(fail_open="sometimes"))


def test_the_shortened_rpc_wait_stays_with_the_client_that_asked(local, monkeypatch):
    """The drop-in's 2 s master RPC wait is set for its own setup only: processes started
    after it (an engine's workers, which may run Mooncake's class) inherit nothing."""
    monkeypatch.delenv("MC_RPC_TIMEOUT_MS", raising=False)
    s = MooncakeDistributedStore()
    assert positional_setup(local, s) == 0
    try:
        assert "MC_RPC_TIMEOUT_MS" not in os.environ
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ.get('MC_RPC_TIMEOUT_MS'))"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert child.stdout.strip() == "None", child.stdout
        # a value the environment gives is the user's: kept, and left in place
        monkeypatch.setenv("MC_RPC_TIMEOUT_MS", "5000")
        other = MooncakeDistributedStore()
        assert positional_setup(local, other) == 0
        other.close()
        assert os.environ["MC_RPC_TIMEOUT_MS"] == "5000"
    finally:
        s.close()


@pytest.mark.parametrize("role", ["master", "storage"])
def test_a_frozen_process_costs_one_bounded_call_then_answers_at_once(local, store, role, caplog):
    caplog.set_level(logging.WARNING, logger="mooncake_cffi.fail_open")
    key = f"frozen-{role}-{uuid.uuid4().hex[:8]}"
    value = os.urandom(64 << 10)
    assert store.put(key, value) == 0
    assert store.get(key) == value
    freeze(local.pids[role])
    first = [timed(lambda: store.get(key)) for _ in range(3)]
    # Every call is bounded; the one that finds the store frozen waits for Mooncake's
    # shortened wait, and the breaker answers the rest at once.
    assert all(took <= DEADLINE + SLACK for _, took in first), first
    assert all(got in (b"", value) for got, _ in first)
    assert store._x.breaker.open, first
    for _ in range(20):
        (exists, got, batch), took = timed(
            lambda: (store.is_exist(key), store.get(key), store.batch_is_exist([key, "x"]))
        )
        assert took < 0.5, took
        code = store._x.breaker.code  # the failure that opened it: -900, -901 or -800
        assert code in (-900, -901, -800)
        assert (exists, got, batch) == (code, b"", [code, code])
    os.kill(local.pids[role], signal.SIGCONT)
    wait_until("the breaker closing", lambda: not store._x.breaker.open, RECOVERY)
    wait_until("the value read again", lambda: store.get(key) == value, RECOVERY)
    assert store.is_exist(key) == 1
    # the operator is told when calls start failing at once, why, and when they resume
    said = [r.getMessage() for r in caplog.records if r.name == "mooncake_cffi.fail_open"]
    assert len(said) >= 2 and "fail at once" in said[0] and "answers again" in said[-1], said
    assert any(f"({code})" in said[0] for code in (-900, -901, -800)), said


def test_a_killed_master_fails_fast_and_a_restarted_one_is_used_again(local, store):
    key = f"killed-{uuid.uuid4().hex[:8]}"
    assert store.put(key, b"v" * 4096) == 0
    local.kill("master")
    for _ in range(10):
        _, took = timed(lambda: (store.is_exist(key), store.get(key), store.put(key + "n", b"x")))
        assert took <= DEADLINE + SLACK, took
    local.restart("master")

    def reused() -> bool:
        return store.put(key + "-after", b"y" * 4096) == 0 and store.get(key + "-after") != b""

    wait_until("a put and get after the master's restart", reused, RECOVERY + 30)


def test_a_failed_setup_says_why_where_the_stacks_user_sees_it(caplog):
    store = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR, logger="mooncake_cffi.store"):
        rc = store.setup(
            "127.0.0.1", "http://127.0.0.1:1/metadata", 0, 16 << 20, "tcp", "", "127.0.0.1:1"
        )
    assert rc == -1
    assert "127.0.0.1:1" in caplog.text and "setup failed" in caplog.text, caplog.text


#: How soon a dead or frozen node's keys must stop counting as hits: the monitor's worst
#: case (PROBE_EVERY + FRESH_FOR, 0.4 s) and scheduling slack on a loaded 2-core machine.
#: The benchmark (bench/health.py) measures the window itself.
STALE_LIMIT = HEALTH_EVERY + FRESH_FOR + 1.0


@pytest.mark.parametrize("fault", ["frozen", "killed"])
def test_a_lookup_stops_promising_a_failed_storage_nodes_keys(local, store, fault, caplog):
    """The master keeps a frozen or dead node's keys in its books (its own answer stays 1,
    as Mooncake's class answers); the drop-in's lookups answer them 0 within STALE_LIMIT of
    the fault, every lookup within ANSWER_WITHIN, so a stack recomputes instead of starting
    a load that would fail; a frozen node's keys are promised again once it answers. While
    every node is up, lookups are the master's answer alone (no check)."""
    caplog.set_level(logging.WARNING, logger="mooncake_cffi.store")
    keys = [f"promised-{i}-{uuid.uuid4().hex[:8]}" for i in range(16)]
    for k in keys:
        assert store.put(k, os.urandom(32 << 10)) == 0
    missing = f"never-{uuid.uuid4().hex[:8]}"
    assert store.batch_is_exist([*keys, missing]) == [1] * 16 + [0]
    live = store._x.live
    assert live.checks >= 1
    wait_until("the monitor trusting the node", live.health.healthy, 10)
    checks = live.checks
    for _ in range(20):  # every node up: no check, however many lookups
        assert store.batch_is_exist(keys) == [1] * 16
        time.sleep(0.01)
    assert live.checks - checks <= 1, "lookups were checked while every node was up"
    unchecked = store._x.calls  # the drop-in's calls without the breaker and the check
    pid = local.pids["storage"]
    try:
        faulted = time.monotonic()
        if fault == "frozen":
            freeze(pid)
        else:
            local.kill("storage")
        assert unchecked.keys(OP_EXISTS, keys) == [1] * 16  # the master's books
        while True:
            answer, took = timed(lambda: store.batch_is_exist([*keys, missing]))
            assert took <= ANSWER_WITHIN + SLACK, took
            if 1 not in answer:
                break
            assert time.monotonic() - faulted <= STALE_LIMIT, "keys still promised"
            time.sleep(0.005)
        window = time.monotonic() - faulted
        assert window <= STALE_LIMIT, window
        for _ in range(10):  # and none promised after, each answered at once
            (one, batch), took = timed(
                lambda: (store.is_exist(keys[0]), store.batch_is_exist(keys))
            )
            assert took < 0.5 + SLACK and one != 1 and 1 not in batch, (one, batch, took)
    finally:
        if fault == "frozen":
            os.kill(pid, signal.SIGCONT)
    if fault == "frozen":
        wait_until(
            "the keys promised again", lambda: store.batch_is_exist(keys) == [1] * 16, RECOVERY
        )
        assert store.is_exist(keys[-1]) == 1
        # the log said when the node fell silent, and when it answered again
        said = [r.getMessage() for r in caplog.records if r.name == "mooncake_cffi.store"]
        silent = [i for i, m in enumerate(said) if "has not answered a read" in m]
        back = [i for i, m in enumerate(said) if "answers again" in m]
        assert silent and back and silent[0] < back[-1], said


def test_a_data_calls_default_deadline_grows_with_the_bytes_it_moves(local, store):
    """Under fail-open a data call's deadline is DEADLINE plus PER_MIB per MiB it moves
    (a 96 MiB load of a long prompt's KV gets 8 s on a loaded machine, not 2), counted over
    every part of a multi-part value; a store given its own op_timeout keeps it as it is."""
    from mooncake_cffi.store.fail_open import PER_MIB

    calls = store._x.calls
    mib = 1 << 20

    class Batch:  # what the limit reads of a private batch: the bytes it moves
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

        def payload(self) -> int:
            return self.nbytes

    assert calls._limit(Batch(96 * mib)) == pytest.approx(DEADLINE + 96 * PER_MIB)
    assert calls._limit(Batch(0)) == pytest.approx(DEADLINE)
    # the bytes a real multi-part write moves: 3 parts of 1 MiB and one of 2 MiB
    bufs = [bytearray(mib) for _ in range(3)] + [bytearray(2 * mib)]
    ptrs = [ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) for b in bufs]
    keys = [f"parts-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    seen: list[float] = []
    real = calls._limit
    calls._limit = lambda packed: seen.append(packed.payload()) or real(packed)  # type: ignore[method-assign]
    try:
        assert store.batch_put_from_multi_buffers(
            keys, [ptrs[:3], ptrs[3:]], [[mib] * 3, [2 * mib]]
        ) == [0, 0]
    finally:
        del calls._limit
    assert seen == [5 * mib], seen
    other = MooncakeDistributedStore()
    assert other.setup(local.client_config(op_timeout=5)) == 0
    try:
        assert other._x.calls.per_mib is None
    finally:
        other.close()


def test_the_stores_of_one_cluster_in_a_process_share_one_health_monitor(local):
    stores = [MooncakeDistributedStore() for _ in range(3)]
    for s in stores:
        assert positional_setup(local, s) == 0
    try:
        health = stores[0]._x.live.health
        assert all(s._x.live.health is health for s in stores)
        keys = [f"shared-{i}-{uuid.uuid4().hex[:8]}" for i in range(4)]
        for k in keys:
            assert stores[0].put(k, b"s" * 4096) == 0
        assert stores[1].batch_is_exist(keys) == [1] * 4  # one client's check teaches all
        wait_until("the shared monitor trusting the node", health.healthy, 10)
        assert len(health.states()) == 1
        stores[1].close()
        stores[0].close()
        probes = health.probes
        wait_until("probes going on for the store left", lambda: health.probes > probes + 3, 10)
        assert stores[2].batch_is_exist(keys) == [1] * 4
    finally:
        for s in stores:
            s.close()
    assert health._closed, "the last store's close stops the monitor"
