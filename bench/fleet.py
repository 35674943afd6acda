"""Many engines, one store: processes sharing one cluster, and lookups as the store grows.

Both classes in the same run, the drop-in as a stack gets it (no setup options) and
Mooncake's own, taking turns; each side's processes are spawned, set up exactly as a stack
sets them up (TCP, no segment of their own), and verify every value they read.

``throughput`` - for 1 and 2 storage nodes (``--nodes``), P processes (``--procs``) x T
threads (``--threads``) per process, values of 64 KiB, 1 MiB and 4 MiB (``--values``):
each thread stores fresh values with ``batch_put_from`` from a registered buffer, 16 MiB a
call, then reads another process's values (its own when P is 1) with ``batch_get_into``
into a registered buffer and checks the tag each value starts with. The aggregate MiB/s
of a phase is what all threads moved between a start line and the last thread's end; the
loopback ceiling (``_common.loopback_bandwidth``, 1 and 4 streams) is measured in the
same run. Values are force-removed between points, untimed.

``growth`` - one process per class fills the store, half the keys each (128-byte values,
1,000 a call), to each of ``--keys`` (1k, 100k, 1M); at each size both take turns at
``batch_is_exist`` of 16 stored keys after a ``--gap`` idle pause. Reported: the median
and p10-p90 of each class, their ratio, the drop-in's against its own at the first size,
and the RSS of the master and of each client process.

    .venv/bin/python bench/fleet.py                       # both parts (~15 min)
    .venv/bin/python bench/fleet.py --part growth --keys 1000,100000,1000000
    .venv/bin/python bench/fleet.py --quick               # a smoke run (~2 min)

Writes ``bench/out/fleet.json``; ``bench/plot.py`` draws it (``docs/images/fleet.png``).
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import random
import statistics
import struct
import threading
import time
from typing import Any

from _common import (
    GiB,
    KiB,
    MiB,
    banner,
    cluster,
    loopback_bandwidth,
    parser,
    spawned_store,
    table,
    write_json,
)

from mooncake_cffi import Client

LABEL = {"ours": "drop-in", "theirs": "Mooncake's"}
CALL_BYTES = 16 * MiB  # one batch call's bytes, whatever the value size
TAG = struct.Struct("<4sIII")  # b"mcfl", process, thread, value index: each value's first 16 bytes
MAGIC = b"mcfl"


# ------------------------------------------------------------------ in the spawned processes


def _rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Point:
    """One process's share of a throughput point: ``threads`` threads, each making
    ``calls`` batch calls of 16 MiB in values of ``size`` bytes, tallied together."""

    def __init__(
        self,
        store: Any,
        view: memoryview,
        base: int,
        index: int,
        peer: int,
        impl: str,
        size: int,
        calls: int,
    ) -> None:
        self.store, self.view, self.base = store, view, base
        self.index, self.peer, self.impl = index, peer, impl
        self.size, self.calls, self.per_call = size, calls, CALL_BYTES // size
        self.tally = {"failed_puts": 0, "failed_gets": 0, "wrong": 0}
        self.lock = threading.Lock()

    def keys(self, proc: int, thread: int, call: int) -> list[str]:
        return [
            f"fleet/{self.impl}/{self.size}/{proc}/{thread}/{call}/{k}"
            for k in range(self.per_call)
        ]

    def slots(self, offset: int) -> list[int]:
        return [self.base + offset + k * self.size for k in range(self.per_call)]

    def put(self, thread: int) -> None:
        src = thread * 2 * CALL_BYTES
        ptrs, sizes, failed = self.slots(src), [self.size] * self.per_call, 0
        for c in range(self.calls):
            for k in range(self.per_call):
                TAG.pack_into(
                    self.view, src + k * self.size, MAGIC, self.index, thread, c * self.per_call + k
                )
            codes = self.store.batch_put_from(self.keys(self.index, thread, c), ptrs, sizes)
            failed += sum(1 for rc in codes if rc != 0)
        with self.lock:
            self.tally["failed_puts"] += failed

    def get(self, thread: int) -> None:
        dst = thread * 2 * CALL_BYTES + CALL_BYTES
        ptrs, sizes, failed, wrong = self.slots(dst), [self.size] * self.per_call, 0, 0
        for c in range(self.calls):
            got = self.store.batch_get_into(self.keys(self.peer, thread, c), ptrs, sizes)
            for k, n in enumerate(got):
                tag = (MAGIC, self.peer, thread, c * self.per_call + k)
                if n != self.size:
                    failed += 1
                elif TAG.unpack_from(self.view, dst + k * self.size) != tag:
                    wrong += 1
        with self.lock:
            self.tally["failed_gets"] += failed
            self.tally["wrong"] += wrong

    def own_keys(self, threads: int) -> list[str]:
        return [
            k
            for t in range(threads)
            for c in range(self.calls)
            for k in self.keys(self.index, t, c)
        ]


def mover(
    impl: str,
    index: int,
    procs: int,
    metadata: str,
    master: str,
    plan: list[tuple[int, int, int]],
    line: Any,
    out: Any,
) -> None:
    """One process of the throughput part: for each (threads, value size, calls per
    thread) of ``plan``, a put phase and a get phase between the controller's start and
    end lines, then its values removed; puts its tallies on ``out``."""
    store = spawned_store(impl, metadata, master)
    region = mmap.mmap(-1, 2 * max(t for t, _, _ in plan) * CALL_BYTES)
    base = _address(region)
    if store.register_buffer(base, len(region)) != 0:
        raise RuntimeError(f"{impl}: register_buffer failed")
    view = memoryview(region)
    tallies = []
    line.wait()  # set up
    for threads, size, calls in plan:
        point = Point(store, view, base, index, (index + 1) % procs, impl, size, calls)
        for phase in (point.put, point.get):
            workers = [threading.Thread(target=phase, args=(t,)) for t in range(threads)]
            line.wait()  # start
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            line.wait()  # end
        store.batch_remove(point.own_keys(threads), True)
        line.wait()  # removed
        tallies.append(point.tally)
    store.unregister_buffer(base)
    store.close()
    view.release()
    out.put((index, tallies, _rss_kib()))


def _address(region: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(region))


def looker(impl: str, metadata: str, master: str, conn: Any) -> None:
    """One process of the growth part, driven over ``conn``: ("fill", keys) stores them;
    ("look", keys, rounds, gap, seed) answers each lookup's seconds; ("rss",) its RSS."""
    store = spawned_store(impl, metadata, master)
    value = bytes(128)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg[0] == "fill":
            keys = msg[1]
            failed = 0
            for i in range(0, len(keys), 1000):
                chunk = keys[i : i + 1000]
                if store.put_batch(chunk, [value] * len(chunk)) != 0:
                    failed += len(chunk)
            conn.send(failed)
        elif msg[0] == "look":
            _, pool, rounds, gap, seed = msg
            rng = random.Random(seed)
            took, misses = [], 0
            for _ in range(rounds):
                keys = rng.sample(pool, 16)
                time.sleep(gap)
                t0 = time.perf_counter()
                found = store.batch_is_exist(keys)
                took.append(time.perf_counter() - t0)
                misses += sum(1 for f in found if f != 1)
            conn.send((took, misses))
        elif msg[0] == "rss":
            conn.send(_rss_kib())
        else:
            store.close()
            conn.send("closed")
            return


# ------------------------------------------------------------------ the controller


def _plan(
    threads: list[int], values: list[int], procs: int, target: int
) -> list[tuple[int, int, int]]:
    """(threads, value size, calls per thread) moving about ``target`` bytes a phase."""
    return [
        (t, v, max(1, round(target / (procs * t * CALL_BYTES)))) for t in threads for v in values
    ]


def throughput_run(
    local: Any, impl: str, procs: int, plan: list[tuple[int, int, int]]
) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    line = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    workers = [
        ctx.Process(
            target=mover,
            args=(impl, i, procs, local.metadata_server, local.master_addr, plan, line, out),
        )
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    line.wait(timeout=120)
    cells = []
    for threads, size, calls in plan:
        nbytes = procs * threads * calls * CALL_BYTES
        cell: dict[str, Any] = {"impl": impl, "procs": procs, "threads": threads, "value": size}
        for phase in ("put", "get"):
            line.wait(timeout=300)
            t0 = time.perf_counter()
            line.wait(timeout=300)
            cell[f"{phase}_mib_s"] = nbytes / (time.perf_counter() - t0) / MiB
        line.wait(timeout=300)
        cell["bytes"] = nbytes
        cells.append(cell)
    tallies: dict[int, Any] = {}
    for _ in workers:
        index, t, rss = out.get(timeout=120)
        tallies[index] = (t, rss)
    for w in workers:
        w.join(timeout=60)
    for n, cell in enumerate(cells):
        for what in ("failed_puts", "failed_gets", "wrong"):
            cell[what] = sum(tallies[i][0][n][what] for i in tallies)
    return cells


def throughput(args: Any) -> dict[str, Any]:
    ceiling = {
        "1 stream": loopback_bandwidth(1.0, streams=1) * GiB / MiB,
        "4 streams": loopback_bandwidth(1.0, streams=4) * GiB / MiB,
    }
    print(
        f"# loopback ceiling: {ceiling['1 stream']:.0f} MiB/s (1 stream), "
        f"{ceiling['4 streams']:.0f} MiB/s (4 streams)",
        flush=True,
    )
    cells: list[dict[str, Any]] = []
    for nodes in args.nodes:
        with cluster([args.segment] * nodes) as local:
            warm = Client(local.client_config())
            _warm(warm, nodes * 2 * args.target)
            warm.close()
            for rnd in range(args.rounds):
                for procs in args.procs:
                    order = ["ours", "theirs"] if (rnd + procs) % 2 == 0 else ["theirs", "ours"]
                    for impl in order:
                        plan = _plan(args.threads, args.values, procs, args.target)
                        for cell in throughput_run(local, impl, procs, plan):
                            cell.update(nodes=nodes, round=rnd)
                            cells.append(cell)
                            print(_cell_line(cell), flush=True)
    return {"ceiling_mib_s": ceiling, "cells": cells}


def _warm(client: Client, nbytes: int) -> None:
    """Touch the segments' pages once, so no class pays their first faults."""
    chunk = 4 * MiB
    value = bytes(chunk)
    keys = [f"fleet/warm/{i}" for i in range(nbytes // chunk)]
    for i in range(0, len(keys), 16):
        client.batch_put(keys[i : i + 16], [value] * len(keys[i : i + 16]))
    client.batch_remove(keys, force=True)


def _cell_line(c: dict[str, Any]) -> str:
    return (
        f"  {c['nodes']} node(s) {c['procs']} x {c['threads']} {LABEL[c['impl']]:>10} "
        f"{c['value'] // KiB:>5} KiB: put {c['put_mib_s']:7.0f} get {c['get_mib_s']:7.0f} MiB/s"
        f"  failed {c['failed_puts']}/{c['failed_gets']} wrong {c['wrong']}"
    )


def growth(args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    levels = []
    with cluster(args.growth_segment) as local:
        master_pid = local.pids["master"]
        sides = {}
        for impl in ("ours", "theirs"):
            here, there = ctx.Pipe()
            proc = ctx.Process(
                target=looker, args=(impl, local.metadata_server, local.master_addr, there)
            )
            proc.start()
            if not here.poll(120):
                raise RuntimeError(f"{impl}: the lookup process did not start")
            here.recv()
            sides[impl] = (proc, here)
        stored = 0
        for level in args.keys:
            new = [f"fleet/grow/{i}" for i in range(stored, level)]
            t0 = time.perf_counter()
            failed = 0
            for n, impl in enumerate(sides):
                sides[impl][1].send(("fill", new[n::2]))
            for impl in sides:
                failed += sides[impl][1].recv()
            fill_s = time.perf_counter() - t0
            stored = level
            pool = [
                f"fleet/grow/{i}"
                for i in random.Random(level).sample(range(level), min(level, 20000))
            ]
            took: dict[str, list[float]] = {"ours": [], "theirs": []}
            misses = dict.fromkeys(took, 0)
            for rnd in range(args.look_rounds):
                order = ["ours", "theirs"] if rnd % 2 == 0 else ["theirs", "ours"]
                for impl in order:
                    sides[impl][1].send(("look", pool, args.lookups, args.gap, rnd))
                    t, m = sides[impl][1].recv()
                    took[impl] += t
                    misses[impl] += m
            rss = {}
            for impl in sides:
                sides[impl][1].send(("rss",))
                rss[impl] = sides[impl][1].recv()
            level_out = {
                "keys": level,
                "fill_s": fill_s,
                "failed_puts": failed,
                "misses": misses,
                "lookup_ms": {k: [x * 1e3 for x in v] for k, v in took.items()},
                "rss_kib": {"master": _rss_kib(master_pid), **rss},
            }
            levels.append(level_out)
            print(_level_line(level_out), flush=True)
        for proc, conn in sides.values():
            conn.send(("close",))
            conn.recv()
            proc.join(timeout=60)
    return {"gap_s": args.gap, "levels": levels}


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _level_line(lv: dict[str, Any]) -> str:
    o, t = (statistics.median(lv["lookup_ms"][k]) for k in ("ours", "theirs"))
    rss = {k: v / 1024 for k, v in lv["rss_kib"].items()}
    return (
        f"  {lv['keys']:>8} keys (filled in {lv['fill_s']:.1f} s): drop-in {o:.3f} ms, "
        f"Mooncake's {t:.3f} ms, ratio {o / t:.2f}; RSS MiB master {rss['master']:.0f}, "
        f"drop-in {rss['ours']:.0f}, Mooncake's {rss['theirs']:.0f}"
    )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _summaries(data: dict[str, Any]) -> None:
    if "throughput" in data:
        tp = data["throughput"]
        best_ceiling = max(tp["ceiling_mib_s"].values())
        groups: dict[tuple[Any, ...], dict[str, list[float]]] = {}
        for c in tp["cells"]:
            key = (c["nodes"], c["procs"], c["threads"], c["value"])
            g = groups.setdefault(key, {})
            for phase in ("put", "get"):
                g.setdefault(f"{c['impl']} {phase}", []).append(c[f"{phase}_mib_s"])
        rows = []
        for (nodes, procs, threads, value), g in sorted(groups.items()):
            row: list[Any] = [nodes, procs, threads, f"{value // KiB} KiB"]
            for phase in ("put", "get"):
                o, t = (
                    statistics.median(g[f"ours {phase}"]),
                    statistics.median(g[f"theirs {phase}"]),
                )
                row += [round(o), round(t), round(o / t, 2)]
            rows.append(row)
        table(
            [
                "nodes",
                "P",
                "T",
                "value",
                "put drop-in",
                "put Mooncake's",
                "ratio",
                "get drop-in",
                "get Mooncake's",
                "ratio",
            ],
            rows,
            f"Aggregate MiB/s (median of rounds); loopback ceiling {best_ceiling:.0f} MiB/s",
        )
        wrong = sum(c["wrong"] for c in tp["cells"])
        failed = sum(c["failed_puts"] + c["failed_gets"] for c in tp["cells"])
        best = max((c[f"{p}_mib_s"], c["impl"], p) for c in tp["cells"] for p in ("put", "get"))
        print(
            f"wrong values {wrong}, failed calls' keys {failed}; best {best[0]:.0f} MiB/s "
            f"({LABEL[best[1]]} {best[2]}) = {best[0] / best_ceiling:.2f} of the ceiling"
        )
    if "growth" in data:
        lv = data["growth"]["levels"]
        base = statistics.median(lv[0]["lookup_ms"]["ours"])
        rows = []
        for x in lv:
            o, t = x["lookup_ms"]["ours"], x["lookup_ms"]["theirs"]
            rows.append(
                [
                    x["keys"],
                    f"{statistics.median(o):.3f} ({_q(o, 0.1):.3f}-{_q(o, 0.9):.3f})",
                    f"{statistics.median(t):.3f} ({_q(t, 0.1):.3f}-{_q(t, 0.9):.3f})",
                    round(statistics.median(o) / statistics.median(t), 2),
                    round(statistics.median(o) / base, 2),
                    round(x["rss_kib"]["master"] / 1024),
                    round(x["rss_kib"]["ours"] / 1024),
                    round(x["rss_kib"]["theirs"] / 1024),
                ]
            )
        table(
            [
                "keys",
                "drop-in ms (p10-p90)",
                "Mooncake's ms (p10-p90)",
                "ratio",
                "drop-in / its first",
                "master RSS MiB",
                "drop-in RSS MiB",
                "Mooncake's RSS MiB",
            ],
            rows,
            f"batch_is_exist of 16 keys after a {data['growth']['gap_s'] * 1e3:.0f} ms gap",
        )


def main() -> None:
    # Mooncake's INFO lines, a dozen per process set up, go unless asked for
    os.environ.setdefault("GLOG_minloglevel", "1")
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("both", "throughput", "growth"), default="both")
    p.add_argument("--nodes", type=_ints, default=[1, 2], help="storage node counts (1,2)")
    p.add_argument("--procs", type=_ints, default=[1, 2, 4, 8], help="processes per class")
    p.add_argument("--threads", type=_ints, default=[1, 4], help="threads per process")
    p.add_argument("--values", type=_ints, default=[64 * KiB, MiB, 4 * MiB], help="value sizes")
    p.add_argument("--target", type=int, default=512 * MiB, help="bytes a phase moves")
    p.add_argument("--rounds", type=int, default=2, help="turns of both classes per point")
    p.add_argument("--keys", type=_ints, default=[1000, 100_000, 1_000_000])
    p.add_argument("--lookups", type=int, default=50, help="lookups per turn")
    p.add_argument("--look-rounds", type=int, default=6, help="turns per store size")
    p.add_argument("--gap", type=float, default=0.010, help="idle seconds before a lookup")
    p.add_argument("--growth-segment", default="1 GB", help="segment of the growth part")
    args = p.parse_args()
    if args.quick:
        args.procs, args.threads, args.values = [1, 4], [1, 4], [MiB]
        args.nodes, args.target, args.rounds = [1], 128 * MiB, 1
        args.keys, args.look_rounds, args.lookups = [1000, 20_000], 2, 20
    info = banner("fleet", args)
    data: dict[str, Any] = {"params": {k: v for k, v in vars(args).items() if k != "out"}}
    if args.part in ("both", "throughput"):
        data["throughput"] = throughput(args)
    if args.part in ("both", "growth"):
        data["growth"] = growth(args)
    _summaries(data)
    write_json("fleet", data, args.out, info)


if __name__ == "__main__":
    main()
