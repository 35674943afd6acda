"""A chaos run: verified writes and reads from several clients while storage nodes are killed,
frozen and restarted and segments fill until eviction; it counts what must never happen.

    python bench/chaos.py --seconds 600            # as long as asked; prints a JSON summary
    python bench/chaos.py --seconds 60 --seed 7    # the same schedule again

A local cluster of three storage nodes (``--segment-size`` each, small enough that the
writes evict) takes values written with two replicas by:

- threads, each with a :class:`mooncake_cffi.Client` of its own (``op_timeout``);
- an :class:`mooncake_cffi.AsyncClient` running several coroutines;
- the drop-in ``MooncakeDistributedStore``, as a stack sets it up (no options);
- a client in another process (``--processes``).

Every value names its key and carries bytes derived from the key, so a read can only be
right (exactly the value written), a miss, or an error: anything else is a **wrong read**.
Keys are written once each (Mooncake keeps the first writer), then read back at random.
Meanwhile a schedule picks, every ``--every`` seconds, one fault: kill a storage node and
start it again, freeze one (SIGSTOP) for a few seconds, write a burst of large values
that fills the segments until Mooncake evicts, or (``--ha``: three masters elected through
etcd) kill the leader master and start it again.

Counted: operations, wrong reads, **acknowledged writes lost** (a key whose write succeeded
that later reads as missing: allowed, per the failure-semantics page, when both of its
nodes were killed or its value was evicted; counted, not judged), calls that outlived their
deadline by more than ``SLACK``, crashes (an exception that is not a MooncakeError), and the
threads and file descriptors left after every client closed.

:func:`run` is what ``tests/test_chaos.py`` calls, bounded; the figures of longer runs are in
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mooncake_cffi import AsyncClient, Client, MooncakeError
from mooncake_cffi.cluster import LocalCluster

#: A call may answer this much later than its deadline on a loaded 2-core machine.
SLACK = 3.0
#: Value sizes written (bytes): small, page-sized and large.
SIZES = (4096, 65536, 65536, 512 * 1024)
#: The share of a worker's operations that write (the rest read back).
WRITES = 0.3
#: A worker's pause between operations (seconds), so the run is a load, not a flood.
PAUSE = 0.005


def value_of(key: str, size: int) -> bytes:
    """The value written under ``key``: its name, then bytes derived from it."""
    head = f"{key}|{size}|".encode()
    seed = hashlib.blake2b(key.encode(), digest_size=32).digest()
    body = (seed * (size // len(seed) + 1))[: size - len(head)]
    return head + body


def judge(key: str, got: bytes | None) -> str:
    """``right``, ``miss`` or ``wrong`` for what a read of ``key`` returned."""
    if got is None or got == b"":
        return "miss"
    try:
        name, size, _ = got.split(b"|", 2)
        if name.decode() == key and len(got) == int(size) and got == value_of(key, int(size)):
            return "right"
    except ValueError:
        pass
    return "wrong"


@dataclass
class Tally:
    """What the workers saw, shared by them (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    ops: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    late: list[tuple[str, float]] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)  # acknowledged key -> size

    def add(self, what: str) -> None:
        with self.lock:
            self.ops[what] += 1


class Workload:
    """One worker's loop: write new keys, read back acknowledged ones, judge every read."""

    def __init__(self, name: str, tally: Tally, deadline: float, rng: random.Random) -> None:
        self.name = name
        self.tally = tally
        self.deadline = deadline
        self.rng = rng
        self.n = 0

    def next_write(self) -> tuple[str, int]:
        self.n += 1
        size = self.rng.choice(SIZES)
        return f"chaos/{self.name}/{self.n}", size

    def pick_read(self) -> str | None:
        with self.tally.lock:
            if not self.tally.written:
                return None
            keys = list(self.tally.written)
        return self.rng.choice(keys)

    def timed(self, what: str, call: Callable[..., Any], *args: Any) -> Any:
        start = time.monotonic()
        try:
            return call(*args)
        except MooncakeError as exc:
            self.tally.add(f"{what} failed: {exc.name}")
            return MooncakeError
        except Exception as exc:  # a crash: never expected
            with self.tally.lock:
                self.tally.crashes.append(f"{self.name} {what}: {type(exc).__name__}: {exc}")
            return MooncakeError
        finally:
            took = time.monotonic() - start
            if took > self.deadline + SLACK:
                with self.tally.lock:
                    self.tally.late.append((f"{self.name} {what}", round(took, 2)))

    def wrote(self, key: str, size: int, ok: bool) -> None:
        self.tally.add("put ok" if ok else "put failed")
        if ok:
            with self.tally.lock:
                self.tally.written[key] = size

    def read(self, key: str, got: Any) -> None:
        if got is MooncakeError:
            return
        verdict = judge(key, got)
        self.tally.add(f"get {verdict}")
        with self.tally.lock:
            if verdict == "wrong":
                self.tally.wrong.append(f"{self.name}: {key}: {bytes(got[:48])!r}")
            elif verdict == "miss" and key in self.tally.written:
                self.tally.lost.append(key)


def client_worker(w: Workload, config: dict[str, Any], stop: threading.Event) -> None:
    try:
        with Client(config, op_timeout=w.deadline) as client:
            while not stop.wait(PAUSE):
                if w.rng.random() < WRITES:
                    key, size = w.next_write()
                    r = w.timed("put", client.put, key, value_of(key, size))
                    w.wrote(key, size, r is not MooncakeError)
                else:
                    key = w.pick_read()
                    if key is not None:
                        w.read(key, w.timed("get", client.get, key))
    except Exception as exc:
        with w.tally.lock:
            w.tally.crashes.append(f"{w.name}: {type(exc).__name__}: {exc}")


def async_worker(w: Workload, config: dict[str, Any], stop: threading.Event) -> None:
    async def one(ac: AsyncClient, task: int) -> None:
        while not stop.is_set():
            await asyncio.sleep(PAUSE)
            start = time.monotonic()
            try:
                if w.rng.random() < WRITES:
                    key, size = w.next_write()
                    key += f"-t{task}"
                    await ac.put(key, value_of(key, size))
                    w.wrote(key, size, True)
                else:
                    key2 = w.pick_read()
                    if key2 is None:
                        await asyncio.sleep(0.01)
                        continue
                    w.read(key2, await ac.get(key2))
            except MooncakeError as exc:
                w.tally.add(f"async failed: {exc.name}")
            except Exception as exc:
                with w.tally.lock:
                    w.tally.crashes.append(f"{w.name}: {type(exc).__name__}: {exc}")
            took = time.monotonic() - start
            if took > w.deadline + SLACK:
                with w.tally.lock:
                    w.tally.late.append((f"{w.name} async", round(took, 2)))

    async def main() -> None:
        ac = AsyncClient(config, op_timeout=w.deadline)
        try:
            await asyncio.gather(*(one(ac, t) for t in range(4)))
        finally:
            await ac.aclose()

    try:
        asyncio.run(main())
    except Exception as exc:
        with w.tally.lock:
            w.tally.crashes.append(f"{w.name}: {type(exc).__name__}: {exc}")


def drop_in_worker(w: Workload, config: dict[str, Any], stop: threading.Event) -> None:
    from mooncake_cffi.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    try:
        setup = {k: v for k, v in config.items() if k != "replica_num"}  # not a setup key
        if store.setup(setup) != 0:
            with w.tally.lock:
                w.tally.crashes.append(f"{w.name}: setup failed")
            return
        while not stop.wait(PAUSE):
            if w.rng.random() < WRITES:
                key, size = w.next_write()
                rc = w.timed("store put", store.put, key, value_of(key, size))
                w.wrote(key, size, rc == 0)
            else:
                key = w.pick_read()
                if key is not None:
                    w.read(key, w.timed("store get", store.get, key))
    finally:
        store.close()


#: The loop a client process runs (``--processes``): prints one JSON summary line at the end.
PROCESS_LOOP = """
import json, random, sys, threading, time
sys.path.insert(0, sys.argv[3])
import chaos
tally = chaos.Tally()
w = chaos.Workload(sys.argv[4], tally, float(sys.argv[2]), random.Random(sys.argv[4]))
stop = threading.Event()
threading.Timer(float(sys.argv[5]), stop.set).start()
chaos.client_worker(w, json.loads(sys.argv[1]), stop)
print(json.dumps({"ops": dict(tally.ops), "wrong": tally.wrong, "late": tally.late,
                  "crashes": tally.crashes, "lost": tally.lost}))
"""


class Schedule:
    """The faults: one every ``every`` seconds, chosen by ``rng``; every one is undone."""

    def __init__(self, cluster: LocalCluster, rng: random.Random, every: float) -> None:
        self.cluster = cluster
        self.rng = rng
        self.every = every
        self.log: list[str] = []
        self.fill: Callable[[], None] | None = None

    def run(self, stop: threading.Event) -> None:
        roles = self.cluster.storage_roles
        while not stop.wait(self.every):
            faults = ("kill", "freeze", "fill") + (("leader",) if self.cluster.ha else ())
            fault = self.rng.choice(faults)
            role = self.rng.choice(roles)
            started = time.monotonic()
            if fault == "leader":  # the leader master killed: another is elected
                index = self.cluster.leader()
                role = self.cluster.master_roles[0 if index is None else index]
                self.cluster.kill(role)
                stop.wait(self.rng.uniform(0.5, 2.0))
                self.cluster.restart(role)
            elif fault == "kill":
                self.cluster.kill(role)
                stop.wait(self.rng.uniform(0.5, 2.0))
                self.cluster.restart(role)
            elif fault == "freeze":
                pid = self.cluster.pids[role]
                if pid:
                    os.kill(pid, signal.SIGSTOP)
                    stop.wait(self.rng.uniform(1.0, 4.0))
                    os.kill(pid, signal.SIGCONT)
            elif self.fill is not None:
                self.fill()
            self.log.append(
                f"{fault} {role if fault != 'fill' else ''} {time.monotonic() - started:.1f}s"
            )


def run(
    seconds: float,
    *,
    seed: int = 0,
    threads: int = 3,
    processes: int = 1,
    deadline: float = 2.0,
    every: float = 4.0,
    segment_size: str = "96 MB",
    state_dir: str | None = None,
    ha: bool = False,
) -> dict[str, Any]:
    """One chaos run of about ``seconds``; its summary (see the module docstring)."""
    rng = random.Random(seed)
    tally = Tally()
    threads_before = threading.active_count()
    fds_before = len(os.listdir("/proc/self/fd"))
    with tempfile.TemporaryDirectory(prefix="chaos-", dir=state_dir) as tmp:
        cluster = LocalCluster(Path(tmp), segment_size, storage_nodes=3, ha=ha)
        cluster.start()
        try:
            config = cluster.client_config(replica_num=2)
            stop = threading.Event()
            workers: list[threading.Thread] = []
            for i in range(threads):
                w = Workload(f"t{i}", tally, deadline, random.Random(rng.random()))
                workers.append(threading.Thread(target=client_worker, args=(w, config, stop)))
            wa = Workload("async", tally, deadline, random.Random(rng.random()))
            workers.append(threading.Thread(target=async_worker, args=(wa, config, stop)))
            ws = Workload("store", tally, deadline, random.Random(rng.random()))
            workers.append(threading.Thread(target=drop_in_worker, args=(ws, config, stop)))
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        PROCESS_LOOP,
                        json.dumps(config),
                        str(deadline),
                        str(Path(__file__).parent),
                        f"p{i}",
                        str(seconds),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=dict(os.environ, **cluster.client_env()),
                )  # fmt: skip
                for i in range(processes)
            ]
            schedule = Schedule(cluster, rng, every)
            filler = Workload("fill", tally, deadline, random.Random(rng.random()))

            def fill() -> None:  # large values until the segments evict
                with Client(config, op_timeout=deadline) as c:
                    for n in range(40):
                        key = f"chaos/fill/{filler.n}-{n}"
                        filler.n += 1
                        r = filler.timed("fill put", c.put, key, value_of(key, 4 << 20))
                        filler.wrote(key, 4 << 20, r is not MooncakeError)

            schedule.fill = fill
            faults = threading.Thread(target=schedule.run, args=(stop,))
            for t in workers:
                t.start()
            faults.start()
            time.sleep(seconds)
            stop.set()
            faults.join()
            for t in workers:
                t.join(timeout=60)
            hung = [t.name for t in workers if t.is_alive()]
            for p in procs:
                out, _ = p.communicate(timeout=120)
                lines = (out or "").strip().splitlines()
                if p.returncode != 0 or not lines:
                    tally.crashes.append(f"client process exited {p.returncode}")
                    continue
                sub = json.loads(lines[-1])
                tally.ops.update(sub["ops"])
                tally.wrong += sub["wrong"]
                tally.late += [tuple(x) for x in sub["late"]]
                tally.crashes += sub["crashes"]
                tally.lost += sub["lost"]
        finally:
            cluster.stop()
    # Threads and fds left once every client is closed (Mooncake's teardown threads end
    # on their own: wait for them a moment).
    end = time.monotonic() + 30
    while threading.active_count() > threads_before and time.monotonic() < end:
        time.sleep(0.2)
    return {
        "seconds": seconds,
        "seed": seed,
        "ops": dict(sorted(tally.ops.items())),
        "operations": sum(tally.ops.values()),
        "wrong_reads": tally.wrong,
        "acknowledged_writes_lost": len(set(tally.lost)),
        # By writer: t*, async and p* write two replicas, store (the drop-in, as a stack
        # calls it) one, fill the large values that make the segments evict.
        "lost_by_writer": dict(Counter(k.split("/")[1].split("-")[0] for k in set(tally.lost))),
        "late_calls": tally.late,
        "crashes": tally.crashes,
        "hung_workers": hung,
        "faults": schedule.log,
        "threads_left": threading.active_count() - threads_before,
        "fds_left": len(os.listdir("/proc/self/fd")) - fds_before,
        "load_at_start": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=2.0, help="each client's op_timeout")
    parser.add_argument("--every", type=float, default=4.0, help="seconds between faults")
    parser.add_argument("--segment-size", default="96 MB")
    parser.add_argument("--ha", action="store_true", help="HA masters; also kill the leader")
    args = parser.parse_args()
    summary = run(
        args.seconds,
        seed=args.seed,
        threads=args.threads,
        processes=args.processes,
        deadline=args.deadline,
        every=args.every,
        segment_size=args.segment_size,
        ha=args.ha,
    )
    print(json.dumps(summary, indent=1))
    bad = summary["wrong_reads"] or summary["crashes"] or summary["late_calls"]
    sys.exit(1 if bad or summary["hung_workers"] else 0)


if __name__ == "__main__":
    main()
