"""close() and aclose() under load, against a real cluster: thousands of small batches of
every operation queued on the lanes, the close at a random point, many rounds, from
threads and from asyncio; and close() followed by a normal interpreter exit.

Every scenario runs in a process of its own with a watchdog: a close that does not return
within CLOSE_BOUND seconds makes that process print its Python stacks and exit, and
the whole process is bounded by a timeout, so a hang fails the test with the round it
happened in instead of blocking the suite."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mooncake_cffi.cluster import LocalCluster

#: Seconds one close may take here (a single-master close takes 0.3-1 s on this machine;
#: the rest is slack for a loaded 2-core runner).
CLOSE_BOUND = 20.0

SCENARIO = r"""
import asyncio, faulthandler, json, random, sys, threading, time
from mooncake_cffi import AsyncClient, Client
from mooncake_cffi.errors import ClosedError, MooncakeError, QueueFullError

mode, rounds, seed, bound = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
base = json.loads(sys.argv[5])
rng = random.Random(seed)
OPS = ["exists", "size", "get", "get_buffer", "put", "upsert", "remove"]
# Lane layouts: the defaults, a smaller shared pool, a lane per operation, one worker for
# everything (a stopping lane once left workers asleep with small reads still queued).
LAYOUTS = [
    {},
    {"num_workers": 2},
    {"per_op_workers": {"lookup": 1, "retrieve": 2, "store": 1, "delete": 1}},
    {"num_workers": 1, "coalesce_keys": 64},
]
prefix = f"cs-{seed}"
readable = [f"{prefix}-r{i}" for i in range(32)]

def watchdog(what):
    # A hang prints the Python threads' stacks ("Timeout (...)!") and ends this process.
    faulthandler.dump_traceback_later(bound, exit=True)
    print(f"CLOSING {what}", flush=True)

def disarm():
    faulthandler.cancel_dump_traceback_later()

def submit_one(c, n, ops=OPS):
    op = rng.choice(ops)
    k = [rng.choice(readable) for _ in range(rng.randint(1, 3))]
    k = list(dict.fromkeys(k))
    if op == "get":
        return c.submit(op, k, [bytearray(64) for _ in k])
    if op in ("put", "upsert"):
        return c.submit(op, k, [b"v" * 16 for _ in k])
    if op == "remove":
        return c.submit(op, [f"{prefix}-x{n}"], force=True)
    return c.submit(op, k)

def one_client(r, closes):
    # A client: a burst of small batches queued, submitters racing its close.
    c = Client({**base, **LAYOUTS[r % len(LAYOUTS)]})
    stop = threading.Event()

    def submitter():
        n = 0
        while not stop.is_set():
            n += 1
            try:
                submit_one(c, n)
            except ClosedError:
                return
            except QueueFullError:
                time.sleep(0.0005)
            if n % 256 == 0:
                try:
                    c.drain()
                except MooncakeError:
                    return

    # The burst: all operations mixed, or one alone (small reads of one operation queued
    # behind each other, as when a lane's stop once left workers asleep).
    ops = rng.choice([OPS, ["exists"], ["get"], ["size"], OPS])
    for n in range(rng.choice([300, 600, 1500])):
        try:
            submit_one(c, n, ops)
        except QueueFullError:
            break
    workers = [threading.Thread(target=submitter) for _ in range(rng.randint(0, 2))]
    for t in workers:
        t.start()
    time.sleep(rng.choice([0, 0, 0.001, 0.005, 0.02]))
    t0 = time.monotonic()
    c.close()
    closes.append(time.monotonic() - t0)
    stop.set()
    for t in workers:
        t.join()

def threads_round(r):
    # Two clients at once, each closed from its own thread.
    closes = []
    watchdog(f"threads round {r}")
    both = [threading.Thread(target=one_client, args=(r + i, closes)) for i in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    disarm()
    return closes

async def async_round(r):
    # Two AsyncClients, four tasks of upserts and gets each, both closed at once.
    clients = [AsyncClient({**base, **LAYOUTS[(r + i) % len(LAYOUTS)]}) for i in range(2)]

    async def worker(ac, mine):
        n = 0
        while True:
            n += 1
            k = rng.choice(mine)
            try:
                if n % 2:
                    await ac.upsert(k, b"v" * 16)
                else:
                    await ac.get(k)
            except ClosedError:
                return

    # Each task its own keys: two upserts of one key race in Mooncake's master (the
    # loser's put ends in ILLEGAL_CLIENT across clients, REPLICA_IS_NOT_READY within one
    # while the winner's replica is written), which is not what this tests.
    tasks = [
        asyncio.create_task(worker(ac, readable[4 * i + j :: 8]))
        for i, ac in enumerate(clients)
        for j in range(4)
    ]
    await asyncio.sleep(rng.choice([0, 0.002, 0.01, 0.05, 0.1]))
    watchdog(f"asyncio round {r}")

    async def timed_close(ac):
        t0 = time.monotonic()
        await ac.aclose()
        return time.monotonic() - t0

    closes = await asyncio.gather(*(timed_close(ac) for ac in clients))
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), bound)
    disarm()
    bad = [x for x in results if isinstance(x, BaseException)]
    assert not bad, bad
    return list(closes)

with Client({**base, "num_workers": 1}) as first:
    first.batch_upsert(readable, [b"v" * 16] * len(readable))
closes = []
for r in range(rounds):
    took = threads_round(r) if mode == "threads" else asyncio.run(async_round(r))
    closes += took
    print(f"round {r}: closes {[round(t * 1000) for t in took]} ms", flush=True)
print(json.dumps({"closes": closes}))
"""

# Queues small batches of every operation, closes, and leaves through a normal interpreter
# exit (or without closing: the client's atexit hook closes it).
EXIT = r"""
import json, sys
from mooncake_cffi import Client
c = Client(json.loads(sys.argv[2]))
keys = [f"ce-{i}" for i in range(16)]
c.batch_upsert(keys, [b"v" * 16] * len(keys))
for n in range(int(sys.argv[3])):
    op = ("exists", "size", "get", "get_buffer", "upsert", "remove")[n % 6]
    k = [keys[n % 16]]
    if op == "get":
        c.submit(op, k, [bytearray(64)])
    elif op == "upsert":
        c.submit(op, k, [b"w" * 16])
    elif op == "remove":
        c.submit(op, [f"ce-x{n}"], force=True)
    else:
        c.submit(op, k)
if sys.argv[1] == "close":
    c.close()
print("leaving", flush=True)
"""


def run(script: str, args: list[str], timeout: float) -> str:
    """Run ``script`` with ``args`` in a fresh interpreter; its stdout.  A hang, or a
    watchdog that fired, fails with the output so far."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise AssertionError(f"no exit within {timeout} s; last output:\n{out[-2000:]}") from None
    if done.returncode and "Timeout (" in done.stderr:
        last = [x for x in done.stdout.splitlines() if x.startswith("CLOSING")][-1:]
        raise AssertionError(
            f"close() did not return within {CLOSE_BOUND} s ({last}); stacks:\n"
            f"{done.stderr[-6000:]}"
        )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout


def config(cluster: LocalCluster) -> str:
    return json.dumps(cluster.client_config())


@pytest.mark.parametrize(("mode", "rounds"), [("threads", 8), ("asyncio", 10)])
def test_closes_at_random_points_under_queued_batches_return(
    cluster: LocalCluster, mode: str, rounds: int
) -> None:
    seed = 27_000 + rounds
    out = run(SCENARIO, [mode, str(rounds), str(seed), str(CLOSE_BOUND), config(cluster)], 240)
    closes: list[float] = json.loads(out.splitlines()[-1])["closes"]
    assert len(closes) == 2 * rounds
    assert max(closes) < CLOSE_BOUND, out


@pytest.mark.parametrize(("how", "batches"), [("close", 3000), ("atexit", 1000)])
def test_queued_batches_then_a_normal_exit_returns(
    cluster: LocalCluster, how: str, batches: int
) -> None:
    out = run(EXIT, [how, config(cluster), str(batches)], 60)
    assert out.endswith("leaving\n")
