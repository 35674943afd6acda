"""Deadlines, retries, forked children and racing first writers, against real clusters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from process_helpers import freeze, thread_states

import mooncake_cffi as mc
from mooncake_cffi import Client, MooncakeTimeoutError, RetryPolicy, TransportError
from mooncake_cffi.admin import AdminClient
from mooncake_cffi.status import MCS_E_TIMEOUT


def unique(prefix: str = "dl") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def frozen_cluster(make_cluster):
    """A cluster whose storage node can be frozen (SIGSTOP) and thawed by the test."""
    local = make_cluster("64 MB").start()
    pid = local.pids["storage"]
    yield local, pid
    os.kill(pid, signal.SIGCONT)


def only_on_the_storage_node(local, key: str) -> None:
    """The premise of a frozen-node test: ``key``'s one replica is on the storage node, the
    one segment the master knows (a segment of some other process would serve it)."""
    admin = AdminClient(local.metrics_url)
    segments = admin.segment_names()
    info = admin.query_key(key)
    assert info is not None, f"{key} is not stored"
    held = [r.segment or r.endpoint for r in info.replicas]
    assert len(segments) == 1 and held == segments, (segments, held)


def test_a_call_into_a_frozen_storage_node_answers_within_its_deadline(frozen_cluster):
    local, pid = frozen_cluster
    with Client(local.client_config(), op_timeout=1.0) as c:
        key = unique()
        c.put(key, b"x" * 4096)
        only_on_the_storage_node(local, key)
        freeze(pid)
        try:
            t0 = time.monotonic()
            with pytest.raises((MooncakeTimeoutError, TransportError)) as info:
                got = c.get(key)
                # not raised: say what it answered and where the master says the value is
                answer = None if got is None else f"{len(got)} bytes"
                pytest.fail(
                    f"a get from a frozen node answered {answer} after "
                    f"{time.monotonic() - t0:.3f} s; storage node threads "
                    f"{thread_states(pid)}; replicas "
                    f"{AdminClient(local.metrics_url).query_key(key)}"
                )
            waited = time.monotonic() - t0
            # The whole get, however many round trips its plan takes (a failed read is
            # looked up, sized and read again), answers within the one deadline.
            assert waited < 1.5, waited
            if isinstance(info.value, MooncakeTimeoutError):
                assert "get" in str(info.value) and "1000 ms" in str(info.value)
                assert isinstance(info.value, TimeoutError) and info.value.retryable
            # a per-call timeout overrides the client's, and the message names it, even when
            # the step that timed out had only part of it left
            t0 = time.monotonic()
            with pytest.raises((MooncakeTimeoutError, TransportError)) as info:
                c.get_into([key], [bytearray(4096)], timeout=0.3)
            assert time.monotonic() - t0 < 1.3
            if isinstance(info.value, MooncakeTimeoutError):
                message = str(info.value)
                assert "300 ms" in message or "the call's deadline: 0.3 s" in message, message
        finally:
            os.kill(pid, signal.SIGCONT)
        # the abandoned batches finish; their buffers were kept alive until then
        deadline = time.monotonic() + 30
        while c.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.in_flight == 0
        assert c.get(key) == b"x" * 4096
        assert c.op_stats()["get_buffer"]["timeouts"] + c.op_stats()["get"]["timeouts"] >= 1


def test_timeouts_must_be_positive(cluster):
    with pytest.raises(ValueError, match="op_timeout"):
        Client(cluster.client_config(), op_timeout=0)
    with Client(cluster.client_config()) as c:
        with pytest.raises(ValueError, match="timeout must be positive"):
            c.exists("k", timeout=-1)


def test_retry_policy_validates_its_fields():
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=2)
    assert len(list(RetryPolicy(attempts=4).delays())) == 3


def test_retries_try_again_only_the_retryable_keys(make_cluster):
    """A full pool (NO_AVAILABLE_HANDLE, retryable) is tried again until space is freed."""
    local = make_cluster("32 MB").start()
    policy = RetryPolicy(attempts=30, backoff=0.05, max_backoff=0.1, jitter=0.1)
    with Client(local.client_config(), retry=policy, op_timeout=10) as c:
        filler = [unique("fill") for _ in range(6)]
        block = b"f" * (4 << 20)
        assert c.batch_put(filler, [block] * len(filler)) == [0] * len(filler)
        big, bad = unique("big"), ""
        freed = threading.Timer(0.3, lambda: c.batch_remove(filler, force=True))
        freed.start()
        try:
            t0 = time.monotonic()
            results = c.batch_put([big], [b"b" * (24 << 20)])
        finally:
            freed.join()
        assert results == [0], results
        assert time.monotonic() - t0 < 10
        assert c.size(big) == 24 << 20
        # a non-retryable failure is not retried (and is reported as it was)
        with pytest.raises(mc.InvalidArgumentError):
            c.batch_put([bad], [b"v"])


def test_a_client_in_a_forked_child_of_a_client_process_fails_at_once(cluster):
    with Client(cluster.client_config()):
        pass
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            t0 = time.monotonic()
            try:
                Client(cluster.client_config())
            except mc.ForkedError as exc:
                if time.monotonic() - t0 < 2 and "spawn" in str(exc):
                    code = 0
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung creating a client")
    assert os.read(read, 1) == b"\x00"
    os.close(read)


def test_racing_put_if_absent_has_exactly_one_winner(cluster):
    keys = [unique("race") for _ in range(20)]
    winners: dict[str, list[int]] = {k: [] for k in keys}
    barrier = threading.Barrier(2)

    def writer(n: int) -> None:
        with Client(cluster.client_config()) as c:
            barrier.wait()
            results = c.batch_put(keys, [f"writer-{n}".encode()] * len(keys), skip_existing=True)
            for k, r in zip(keys, results):
                if r == 0:
                    winners[k].append(n)

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with Client(cluster.client_config()) as c:
        stored = c.batch_get(keys)
        c.batch_remove(keys, force=True)
    for k, value in zip(keys, stored):
        assert len(winners[k]) == 1, (k, winners[k])
        assert value == f"writer-{winners[k][0]}".encode()


def test_mcl2_timeout_fails_a_stuck_command_naming_the_operation(frozen_cluster):
    local, pid = frozen_cluster
    with Client(local.client_config()) as c:
        key = unique("cli")
        c.put(key, b"y" * 4096)
    mcl2 = [sys.executable, "-m", "mooncake_cffi.cli.main"]
    where = ["--master", local.master_addr, "--metadata-server", local.metadata_server]
    freeze(pid)
    try:
        t0 = time.monotonic()
        proc = subprocess.run(
            [*mcl2, *where, "--timeout", "0.5", "get", key, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
        waited = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert proc.returncode == 1, proc.stderr
    assert "get" in proc.stderr and ("MCS_E_TIMEOUT" in proc.stderr or "TRANSFER" in proc.stderr)
    assert waited < 10, waited


def test_a_cancelled_async_get_into_keeps_its_buffer_until_mooncake_is_done(frozen_cluster):
    """wait_for cancels the waiting, not the transfer: the client keeps the batch (and the
    caller's buffer) referenced until Mooncake finishes, then drops it."""
    import asyncio
    import gc

    local, pid = frozen_cluster

    async def main() -> None:
        async with mc.AsyncClient(local.client_config()) as ac:
            key = unique("async")
            await ac.put(key, b"z" * 8192)
            freeze(pid)
            try:
                buf = bytearray(8192)
                with pytest.raises((asyncio.TimeoutError, MooncakeTimeoutError)):
                    await asyncio.wait_for(ac.get_into([key], [buf]), 0.3)
                del buf
                gc.collect()  # the client still holds the buffer: nothing is freed under it
                assert ac.client.in_flight >= 1
            finally:
                os.kill(pid, signal.SIGCONT)
            await asyncio.wait_for(ac.quiesce(), 60)
            assert ac.client.in_flight == 0
            assert await ac.get(key) == b"z" * 8192

    asyncio.run(main())


def test_async_reads_that_time_out_in_their_queue_are_withdrawn_unsent(frozen_cluster):
    """AsyncClient reads queued behind one stuck on a frozen storage node time out at their
    deadline and are taken back from the lane: none of them is sent later (the lane does
    not go on to run work nobody waits for), and the client is whole after the thaw."""
    import asyncio

    local, pid = frozen_cluster
    config = local.client_config(per_op_workers={"retrieve": 1})

    async def main() -> None:
        # one retrieve worker, no merging of small reads: the first read holds the lane
        async with mc.AsyncClient(config, coalesce_keys=1) as ac:
            keys = [unique("withdrawn") for _ in range(6)]
            for k in keys:
                await ac.put(k, k.encode() * 64)
            before = ac.client.stats()["retrieve"]["withdrawn"]
            freeze(pid)
            try:
                t0 = time.monotonic()
                answers = await asyncio.gather(
                    *(ac.get(k, timeout=0.5) for k in keys), return_exceptions=True
                )
                took = time.monotonic() - t0
            finally:
                os.kill(pid, signal.SIGCONT)
            assert took < 0.5 + 1.0, took
            assert all(isinstance(a, MooncakeTimeoutError) for a in answers), answers
            unsent = [a for a in answers if "withdrawn unsent" in str(a)]
            assert len(unsent) >= len(keys) - 1, [str(a) for a in answers]
            assert ac.client.stats()["retrieve"]["withdrawn"] - before >= len(unsent)
            await asyncio.wait_for(ac.quiesce(), 60)
            assert ac.client.in_flight == 0
            assert [await ac.get(k) for k in keys] == [k.encode() * 64 for k in keys]

    asyncio.run(main())


def test_a_withdrawn_landed_read_never_writes_its_buffer_and_an_unlanded_one_does(
    frozen_cluster,
):
    """``submit(..., land=True)``: once ``withdraw`` returns, the read that goes on in
    Mooncake (its storage node frozen, then thawed) lands in the shim's memory, never in
    the caller's buffer, and its key answers MCS_E_TIMEOUT. The same read without
    ``land`` (on a second client, beside it) writes the buffer after the caller stopped
    waiting: the hazard it removes."""
    local, pid = frozen_cluster
    size = 4 << 20  # more than the kernel's socket buffers hold
    config = local.client_config(per_op_workers={"retrieve": 1})
    with Client(config) as landing, Client(config) as plain:
        clients = (landing, plain)
        keys = [unique("landed"), unique("unlanded")]
        values = [os.urandom(size) for _ in keys]
        landing.batch_put(keys, values)
        only_on_the_storage_node(local, keys[0])
        freeze(pid)
        try:
            bufs = [bytearray(size) for _ in keys]
            batches = [
                c.submit("get", [k], [b], land=c is landing) for c, k, b in zip(clients, keys, bufs)
            ]
            limit = time.monotonic() + 10
            while not all(c.stats()["retrieve"]["running"] for c in clients):
                assert time.monotonic() < limit, [c.stats()["retrieve"] for c in clients]
                time.sleep(0.02)
            # both inside Mooncake: nothing of them is queued to take back
            assert [c.withdraw(b) for c, b in zip(clients, batches)] == [0, 0]
            for b in bufs:
                b[:] = b"\xab" * size  # the caller reuses its buffers at once
        finally:
            os.kill(pid, signal.SIGCONT)
        done = []
        for c in clients:
            limit = time.monotonic() + 60
            while not (drained := c.drain()):
                assert time.monotonic() < limit, "a read never ended"
                c.wait(0.5)
            done += drained
        assert [d.id for d in done] == batches
        assert done[0].results == [MCS_E_TIMEOUT], done[0]
        assert bufs[0] == b"\xab" * size, "a withdrawn landed read wrote the caller's buffer"
        assert done[1].results == [size], done[1]
        assert bytes(bufs[1]) == values[1], "the unlanded read did not write late"
        got = bytearray(size)  # the landed key reads whole once the node answers
        landing.submit("get", [keys[0]], [got], land=True)
        limit = time.monotonic() + 60
        while not (drained := landing.drain()):
            assert time.monotonic() < limit, "the landed read never ended"
            landing.wait(0.5)
        assert drained[0].results == [size] and bytes(got) == values[0]
