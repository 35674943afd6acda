"""Timed-out writes have a knowable outcome: a storage node frozen mid-write, then thawed.

Every round freezes the cluster's one storage node, writes many keys of real sizes with a
short deadline (the write times out while the node cannot take the bytes), thaws the node
after a varying pause, and asks the timeout what became of each key.  The answer must agree
with the store: every key said LANDED reads back as the bytes written, every key said
NOT_LANDED reads as missing, and once the batch has ended no key is UNKNOWN.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import signal
import time
import uuid

import pytest
from process_helpers import freeze

from mooncake_cffi import AsyncClient, Client, MooncakeTimeoutError
from mooncake_cffi.outcome import KeyOutcome, WriteState
from mooncake_cffi.store import MooncakeDistributedStore

KIB = 1024
#: Keys per batch and their sizes: 48 values of 96-352 KiB (about 10 MiB a batch).
N_KEYS = 48
#: Pauses before the thaw, in seconds: short ones let the frozen transfers finish, long ones
#: outlast Mooncake's transfer timeout (MC_TCP_STATUS_TIMEOUT_SEC, set to 1 s here).
PAUSES = (0.05, 0.3, 1.0, 3.0, 6.0)


@pytest.fixture
def frozen_cluster(make_cluster, monkeypatch):
    """A cluster whose storage node the test freezes (SIGSTOP) and thaws.

    Mooncake gives a write up after 1 s without the node's acknowledgement (read at each
    transfer; the client no longer shortens it), so a long freeze makes writes that did not
    land.  That is the setting under which a given-up write's queued bytes may land in
    another key (docs/guide/failures.md): here the node is frozen, so they are still in its
    receive queue at the thaw, and the node copies them then, before the next round writes."""
    monkeypatch.setenv("MC_TCP_STATUS_TIMEOUT_SEC", "1")
    local = make_cluster("256 MB").start()
    pid = local.pids["storage"]
    yield local, pid
    os.kill(pid, signal.SIGCONT)


def values_for(prefix: str, n: int = N_KEYS) -> tuple[list[str], list[bytes]]:
    keys = [f"{prefix}-{i}" for i in range(n)]
    values = [os.urandom(16) * ((96 + (i * 37) % 256) * KIB // 16) for i in range(n)]
    return keys, values


def check_against_store(
    c: Client, keys: list[str], values: list[bytes], outcome: list[KeyOutcome]
) -> dict[WriteState, int]:
    """Assert that ``outcome`` agrees with what the store holds; the count of each state."""
    assert [o.key for o in outcome] == keys
    stored = c.batch_get(keys, timeout=30)
    counts = dict.fromkeys(WriteState, 0)
    for key, value, got, o in zip(keys, values, stored, outcome):
        counts[o.state] += 1
        if o.state is WriteState.LANDED:
            assert got == value, (key, o, None if got is None else len(got))
        elif o.state is WriteState.NOT_LANDED:
            assert got is None, (key, o, len(got))
            assert o.code is not None and o.code < 0, o
        else:
            pytest.fail(f"{key}: {o} after its batch ended")
    return counts


def timed_out_write(call, pid: int, pause: float) -> MooncakeTimeoutError:
    """Freeze the node, run ``call`` (which must time out), thaw it after ``pause``."""
    freeze(pid)
    try:
        with pytest.raises(MooncakeTimeoutError) as info:
            call()
        time.sleep(pause)
    finally:
        os.kill(pid, signal.SIGCONT)
    return info.value


def test_a_timed_out_batch_put_tells_per_key_whether_it_landed(frozen_cluster):
    local, pid = frozen_cluster
    totals = dict.fromkeys(WriteState, 0)
    with Client(local.client_config(), op_timeout=0.4) as c:
        for rnd, pause in enumerate(PAUSES * 2):
            keys, values = values_for(f"wo-{uuid.uuid4().hex[:8]}-{rnd}")
            op = c.batch_upsert if rnd % 2 else c.batch_put
            err = timed_out_write(functools.partial(op, keys, values), pid, pause)
            assert err.write is not None and err.write.keys == keys, err
            assert err.write.op == ("upsert" if rnd % 2 else "put")
            early = err.outcome(timeout=0)
            # the store says "not landed" only of a batch that had ended (a code is known)
            assert all(o.state is not WriteState.NOT_LANDED or o.code is not None for o in early), (
                early
            )
            final = err.outcome(timeout=60)
            assert err.write.done, err.write
            assert all(o.source == "completion" for o in final), final
            counts = check_against_store(c, keys, values, final)
            for s, n in counts.items():
                totals[s] += n
            # by key, as a caller who only kept the keys asks
            assert c.batches.write_outcome(keys[:3], timeout=0) == final[:3]
        assert c.in_flight == 0
    # both outcomes happened: frozen briefly the writes landed, frozen long they failed
    assert totals[WriteState.LANDED] > 0 and totals[WriteState.NOT_LANDED] > 0, totals


def test_single_put_and_put_from_timeouts_resolve(frozen_cluster):
    local, pid = frozen_cluster
    with Client(local.client_config(), op_timeout=0.4) as c:
        for rnd, pause in enumerate(PAUSES):
            keys, values = values_for(f"wo1-{uuid.uuid4().hex[:8]}-{rnd}", 2)
            err = timed_out_write(functools.partial(c.put, keys[0], values[0]), pid, pause)
            buf = bytearray(values[1])
            err2 = None
            try:
                c.put_from([keys[1]], [buf])
            except MooncakeTimeoutError as exc:  # the node may be thawed by now
                err2 = exc
            out = err.outcome(timeout=60)
            check_against_store(c, keys[:1], values[:1], out)
            if err2 is not None:
                check_against_store(c, keys[1:], values[1:], err2.outcome(timeout=60))
            with pytest.raises(ValueError, match="no write of key"):
                c.batches.write_outcome([f"never-{uuid.uuid4().hex}"])


def test_a_timed_out_read_has_no_write_outcome(frozen_cluster):
    local, pid = frozen_cluster
    with Client(local.client_config(), op_timeout=0.4) as c:
        key = f"wor-{uuid.uuid4().hex[:8]}"
        c.put(key, b"r" * 200 * KIB)
        err = timed_out_write(lambda: c.get_into([key], [bytearray(200 * KIB)]), pid, 0.05)
        assert err.write is None
        with pytest.raises(ValueError, match="not a write"):
            err.outcome()


def test_an_async_timed_out_write_resolves_on_the_loop(frozen_cluster):
    local, pid = frozen_cluster

    async def main() -> dict[WriteState, int]:
        totals = dict.fromkeys(WriteState, 0)
        async with AsyncClient(local.client_config(), op_timeout=0.4) as ac:
            for rnd, pause in enumerate(PAUSES):
                keys, values = values_for(f"woa-{uuid.uuid4().hex[:8]}-{rnd}")
                freeze(pid)
                try:
                    with pytest.raises(MooncakeTimeoutError) as info:
                        await ac.batch_put(keys, values)
                    await asyncio.sleep(pause)
                finally:
                    os.kill(pid, signal.SIGCONT)
                write = info.value.write
                assert write is not None
                final = await write.outcome_async(timeout=60)
                counts = check_against_store(ac.client, keys, values, final)
                for s, n in counts.items():
                    totals[s] += n
        return totals

    totals = asyncio.run(main())
    assert totals[WriteState.UNKNOWN] == 0, totals


def test_the_drop_in_answers_rpc_timeout_and_its_client_tells_the_outcome(frozen_cluster):
    local, pid = frozen_cluster
    store = MooncakeDistributedStore()
    assert (
        # The deadline alone: failing open, the breaker would answer the later rounds.
        store.setup(
            {
                **local.client_config(),
                "local_buffer_size": "64 MB",
                "op_timeout": 0.4,
                "fail_open": False,
            }
        )
        == 0
    )
    try:
        for rnd, pause in enumerate(PAUSES):
            keys, values = values_for(f"wod-{uuid.uuid4().hex[:8]}-{rnd}", 16)
            bufs = [ctypes.create_string_buffer(v, len(v)) for v in values]
            freeze(pid)
            try:
                codes = store.batch_put_from(
                    keys, [ctypes.addressof(b) for b in bufs], [len(v) for v in values]
                )
                time.sleep(pause)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert set(codes) == {-901}, codes  # RPC_TIMEOUT, as Mooncake's deadline says
            out = store.client.batches.write_outcome(keys, timeout=60)
            check_against_store(store.client, keys, values, out)
            del bufs
    finally:
        store.close()
