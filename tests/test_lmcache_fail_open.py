"""The LMCache connector fails open by default: with the master frozen or killed, a batch
fails within Mooncake's shortened wait, the batches after it fail at once (LMCache then
recomputes), and lookups and loads find their keys again by themselves once it is back."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from lmcache_helpers import WAIT_S, readable
from process_helpers import freeze

from mooncake_cffi.lmcache import MooncakeConnector
from mooncake_cffi.store.fail_open import DEADLINE, PROBE_EVERY

#: Scheduling slack on a loaded 2-core machine, beyond Mooncake's shortened wait.
SLACK = 3.0


def drain_one(conn: MooncakeConnector, task: int, timeout: float) -> tuple[tuple, float]:
    start = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - start)
        assert left > 0, f"task {task} did not complete within {timeout} s"
        if readable(conn.event_fd(), left):
            for c in conn.drain_completions():
                if c[0] == task:
                    return c, time.monotonic() - start


@pytest.fixture
def local(make_cluster):
    cluster = make_cluster("64 MB").start()
    yield cluster
    pid = cluster.pids.get("master")
    if pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("fault", ["frozen", "killed"])
def test_a_master_that_stops_answering_fails_batches_at_once_until_it_is_back(local, fault):
    conn = MooncakeConnector(**local.client_config(key_prefix=f"fo-{uuid.uuid4().hex[:8]}/"))
    try:
        value = memoryview(bytearray(os.urandom(65536)))
        done, _ = drain_one(conn, conn.submit_batch_set(["a"], [value]), WAIT_S)
        assert done[1], done
        if fault == "frozen":
            freeze(local.pids["master"])
        else:
            local.kill("master")
        # A lookup needs only the master: Mooncake's RPC wait bounds it, which the first
        # client of the process set (an earlier test's deadline, in a shared worker).
        rpc_wait = float(os.environ.get("MC_RPC_TIMEOUT_MS", DEADLINE * 1000)) / 1000
        limit = max(DEADLINE, rpc_wait) + SLACK
        first, took = drain_one(conn, conn.submit_batch_exists(["a"]), limit + 5)
        assert took <= limit, (took, rpc_wait)
        assert first[3] == [False], first
        for _ in range(10):  # the breaker answers the rest at once
            c, took = drain_one(conn, conn.submit_batch_exists(["a"]), WAIT_S)
            assert (c[1], c[3]) == (False, [False]) and took < 0.5, (c, took)
            out = memoryview(bytearray(65536))
            c, took = drain_one(conn, conn.submit_batch_get(["a"], [out]), WAIT_S)
            assert (c[1], c[3]) == (False, [False]) and took < 0.5, (c, took)
        if fault == "frozen":
            os.kill(local.pids["master"], signal.SIGCONT)
        else:
            local.restart("master")
        deadline = time.monotonic() + PROBE_EVERY + DEADLINE + 30
        while True:  # lookups answer again, by themselves (a restarted master lost the key)
            c, _ = drain_one(conn, conn.submit_batch_exists(["a"]), WAIT_S)
            if c[1]:
                break
            assert time.monotonic() < deadline, f"lookups still failing: {c}"
            time.sleep(0.2)
        if fault == "frozen":
            assert c[3] == [True]
    finally:
        conn.close()


def test_a_load_from_a_frozen_storage_node_fails_at_its_deadline_and_never_writes_late(local):
    conn = MooncakeConnector(**local.client_config(key_prefix=f"fs-{uuid.uuid4().hex[:8]}/"))
    try:
        value = os.urandom(1 << 20)
        done, _ = drain_one(conn, conn.submit_batch_set(["a"], [memoryview(value)]), WAIT_S)
        assert done[1], done
        freeze(local.pids["storage"])
        out = bytearray(1 << 20)
        try:
            load, took = drain_one(
                conn, conn.submit_batch_get(["a"], [memoryview(out)]), DEADLINE + SLACK + 5
            )
            assert (load[1], load[3]) == (False, [False]) and "MCS_E_TIMEOUT" in load[2], load
            assert took <= DEADLINE + SLACK, took
        finally:
            os.kill(local.pids["storage"], signal.SIGCONT)
        # The read goes on in the connector's own memory: once Mooncake is done with it
        # (nothing in flight), LMCache's buffer is still as it was.
        deadline = time.monotonic() + 60
        while conn.client.in_flight:
            assert time.monotonic() < deadline, "the abandoned load never ended"
            conn.drain_completions()
            time.sleep(0.1)
        assert out == bytearray(1 << 20)
        deadline = time.monotonic() + PROBE_EVERY + DEADLINE + 30
        while True:  # loads serve the value again, by themselves
            again = bytearray(1 << 20)
            c, _ = drain_one(conn, conn.submit_batch_get(["a"], [memoryview(again)]), WAIT_S + 5)
            if c[1]:
                break
            assert time.monotonic() < deadline, f"loads still failing: {c}"
            time.sleep(0.2)
        assert bytes(again) == value
    finally:
        conn.close()


def test_an_abandoned_load_withdraws_its_own_batch_after_empty_and_refused_ones(local):
    # Empty and refused batches take a task id of the connector's own but no client batch,
    # so the two ids drift apart; an abandoned load must withdraw the client's batch it
    # became, never the one whose client id equals its task id.
    conn = MooncakeConnector(**local.client_config(key_prefix=f"fw-{uuid.uuid4().hex[:8]}/"))
    submitted: list[int] = []
    withdrawn: list[int] = []
    client = conn.client
    submit, withdraw = client.submit, client.batches.withdraw

    def recording_submit(*args, **kwargs):
        batch = submit(*args, **kwargs)
        submitted.append(batch)
        return batch

    def recording_withdraw(batch: int) -> int:
        withdrawn.append(batch)
        return withdraw(batch)

    client.submit = recording_submit  # type: ignore[method-assign]
    client.batches.withdraw = recording_withdraw  # type: ignore[method-assign]
    try:
        value = os.urandom(1 << 20)
        keys = [f"k{i}" for i in range(4)]
        for k in keys:
            done, _ = drain_one(conn, conn.submit_batch_set([k], [memoryview(value)]), WAIT_S)
            assert done[1], done
        for _ in range(3):  # drift: tasks with no client batch behind them
            drain_one(conn, conn.submit_batch_get([], []), WAIT_S)
            drain_one(conn, conn.submit_batch_get(["x"], []), WAIT_S)  # refused: no buffer
        freeze(local.pids["storage"])
        try:
            loads = {}
            for k in keys:
                before = len(submitted)
                out = memoryview(bytearray(1 << 20))
                task = conn.submit_batch_get([k], [out])
                assert len(submitted) == before + 1, "a load reached the client"
                loads[task] = submitted[-1]
            assert any(task != batch for task, batch in loads.items()), "the ids drifted"
            done = {}  # every completion kept: one drain may bring several loads' at once
            limit = time.monotonic() + DEADLINE + SLACK + 5
            while set(loads) - set(done):
                assert time.monotonic() < limit, f"loads {set(loads) - set(done)} never ended"
                if readable(conn.event_fd(), 0.5):
                    done.update((c[0], c) for c in conn.drain_completions())
            for task in loads:
                assert done[task][1] is False and "MCS_E_TIMEOUT" in done[task][2], done[task]
        finally:
            os.kill(local.pids["storage"], signal.SIGCONT)
        assert withdrawn, "abandoned loads withdraw what is still queued"
        assert set(withdrawn) <= set(loads.values()), (withdrawn, loads)
    finally:
        conn.close()
