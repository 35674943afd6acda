"""asyncio: 1,000 concurrent 4 KiB gets from one event loop vs the same through a thread pool.

A burst issues ``--concurrency`` gets of distinct keys at once and waits for all of them;
each get reads one ``--value-size`` value into its own preallocated buffer:

* ``asyncio``   - ``asyncio.gather`` of ``AsyncClient.get_into([key], [buf])``: each get is
  submitted to the shim's lanes from the event loop; completions come back through the
  shim's eventfd (``loop.add_reader``) - no polling thread, no thread per request;
* ``threads-W`` - a ``ThreadPoolExecutor(W)`` running the blocking ``Client.get_into``;
* ``one batch`` - for reference, the same keys as a single ``get_into`` batch call.

Bursts alternate between modes.  Latency of a get = its completion time minus the burst's
start (all are issued together).  Reported: burst wall time, gets/s, per-get p50/p99, CPU
seconds per burst and the threads the process has while a burst runs (not counting the
idle pool threads of the other modes).  All modes use one
Client, once per shared-pool size in ``--workers`` (default 4, LMCache's default
``num_workers``, and 1: on 2 cores every Mooncake call that waits for a transfer busy-polls
a core, so fewer concurrent calls leave more CPU to the TCP io threads).

    .venv/bin/python bench/async_gets.py          # full run (~30 s)
    .venv/bin/python bench/async_gets.py --quick
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from _common import (
    Arena,
    KiB,
    banner,
    busiest_threads,
    cluster,
    cpu_seconds,
    ms_list,
    our_client,
    parser,
    pc,
    summarize,
    table,
    thread_count,
    thread_cpu,
    write_json,
)

from mooncake_cffi import AsyncClient


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=1000, help="gets per burst")
    p.add_argument("--bursts", type=int, default=20, help="measured bursts per mode")
    p.add_argument("--value-size", type=int, default=4 * KiB)
    p.add_argument("--pools", default="8,64", help="thread-pool sizes to compare")
    p.add_argument(
        "--workers", default="4,1", help="the Client's shared-pool sizes to run (one client each)"
    )
    args = p.parse_args()
    if args.quick:
        args.bursts = 3
    info = banner("async_gets", args)
    n, vs = args.concurrency, args.value_size
    pools = [int(x) for x in args.pools.split(",") if x]
    workers = [int(x) for x in args.workers.split(",") if x]

    src = Arena(n, vs)
    dst = Arena(n, vs, fill=0)
    dviews = dst.views()
    keys = [f"async-gets/{i}" for i in range(n)]
    base_modes = ["asyncio", *(f"threads-{w}" for w in pools), "one batch"]
    modes = [f"w{w} {m}" for w in workers for m in base_modes]
    lat: dict[str, list[float]] = {m: [] for m in modes}
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    threads: dict[str, int] = {}
    errors: dict[str, int] = {m: 0 for m in modes}
    per_thread: dict[str, dict[int, float]] = {m: {} for m in modes}
    threads_base: dict[str, tuple[int, int]] = {}
    lane_stats: dict[str, Any] = {}

    def measure(local: Any, nw: int) -> None:
        client = our_client(local, num_workers=nw, queue_timeout=0)
        for i in range(0, n, 100):
            res = client.put_from(keys[i : i + 100], src.views(100, i))
            assert all(r == 0 for r in res), res
        before = thread_count()
        aclient = AsyncClient(client)
        executors = {w: ThreadPoolExecutor(max_workers=w) for w in pools}
        loop = asyncio.new_event_loop()
        tag = f"w{nw} "

        async def async_burst() -> tuple[list[float], int]:
            t0 = pc()
            done: list[float] = [0.0] * n

            async def one(i: int) -> int:
                r = (await aclient.get_into([keys[i]], [dviews[i]]))[0]
                done[i] = pc() - t0
                return r

            rs = await asyncio.gather(*(one(i) for i in range(n)))
            # threads alive now, less the (idle) thread-pool workers of the other modes
            own = thread_count() - sum(len(ex._threads) for ex in executors.values())
            threads[tag + "asyncio"] = max(threads.get(tag + "asyncio", 0), own)
            return done, sum(1 for r in rs if r != vs)

        def pool_burst(w: int) -> tuple[list[float], int]:
            ex = executors[w]
            t0 = pc()
            done: list[float] = [0.0] * n

            def one(i: int) -> int:
                r = client.get_into([keys[i]], [dviews[i]])[0]
                done[i] = pc() - t0
                return r

            futs = [ex.submit(one, i) for i in range(n)]
            own = thread_count() - sum(len(e._threads) for x, e in executors.items() if x != w)
            m = f"{tag}threads-{w}"
            threads[m] = max(threads.get(m, 0), own)
            rs = [f.result() for f in futs]
            return done, sum(1 for r in rs if r != vs)

        def batch_burst() -> tuple[list[float], int]:
            t0 = pc()
            rs = client.get_into(keys, dviews)
            t = pc() - t0
            threads[tag + "one batch"] = thread_count() - sum(
                len(e._threads) for e in executors.values()
            )
            return [t] * n, sum(1 for r in rs if r != vs)

        def run(mode: str) -> tuple[list[float], int]:
            if mode == "asyncio":
                return loop.run_until_complete(async_burst())
            if mode == "one batch":
                return batch_burst()
            return pool_burst(int(mode.split("-")[1]))

        for m in base_modes:  # warm-up: one burst each (starts the pool threads too)
            run(m)
        for m in base_modes:
            threads.pop(tag + m, None)
        for b in range(args.bursts):
            k = b % len(base_modes)
            for m in base_modes[k:] + base_modes[:k]:
                key = tag + m
                dst.buf[:] = 0
                th0 = thread_cpu()
                c0, t0 = cpu_seconds(), pc()
                done, bad = run(m)
                wall[key].append(pc() - t0)
                cpu[key].append(cpu_seconds() - c0)
                for tid, _name, used in busiest_threads(th0, thread_cpu(), top=100):
                    per_thread[key][tid] = per_thread[key].get(tid, 0.0) + used
                lat[key].extend(done)
                errors[key] += bad
                if bad == 0 and not np.array_equal(dst.buf, src.buf):
                    errors[key] += 1
        after = thread_count() - sum(len(e._threads) for e in executors.values())
        threads_base[f"w{nw}"] = (before, after)
        lane_stats[f"w{nw}"] = client.stats()
        loop.run_until_complete(aclient.aclose())
        loop.close()
        for ex in executors.values():
            ex.shutdown()
        for i in range(0, n, 100):
            client.batch_remove(keys[i : i + 100], force=True)
        client.close()

    t_run = pc()
    with cluster(args.segment, args.pin) as local:
        for nw in workers:
            measure(local, nw)
    run_s = pc() - t_run

    summ = {m: summarize(lat[m]) for m in modes}
    res: dict[str, dict[str, float]] = {}
    for m in modes:
        med = float(np.median(wall[m]))
        res[m] = {
            "burst_ms_median": med * 1e3,
            "burst_ms_p99": float(np.percentile(wall[m], 99) * 1e3),
            "gets_per_s": n / med,
            "get_p50_ms": summ[m]["p50"],
            "get_p99_ms": summ[m]["p99"],
            "cpu_ms_per_burst": float(np.median(cpu[m]) * 1e3),
            "threads": threads.get(m, 0),
        }
    for m in modes:
        used = sorted(per_thread[m].values(), reverse=True)
        total_wall = sum(wall[m])
        res[m]["busiest_threads_share_of_wall"] = [round(u / total_wall, 2) for u in used[:6]]
    table(
        [
            "mode",
            "burst ms (median)",
            "gets/s",
            "get p50 ms",
            "get p99 ms",
            "CPU ms / burst",
            "threads",
            "busiest threads (CPU / wall)",
            "errors",
        ],
        [
            [
                m,
                r["burst_ms_median"],
                r["gets_per_s"],
                r["get_p50_ms"],
                r["get_p99_ms"],
                r["cpu_ms_per_burst"],
                r["threads"],
                " ".join(f"{x:.2f}" for x in r["busiest_threads_share_of_wall"]),
                errors[m],
            ]
            for m, r in res.items()
        ],
        title=f"{n} concurrent gets of {vs // KiB} KiB, {args.bursts} bursts per mode "
        "(latency = completion - burst start); threads before / after the AsyncClient: "
        + ", ".join(f"{k}: {a} / {b}" for k, (a, b) in threads_base.items()),
    )
    write_json(
        "async_gets",
        {
            "params": {
                "concurrency": n,
                "bursts": args.bursts,
                "value_size": vs,
                "pools": pools,
                "num_workers": workers,
                "run_seconds": run_s,
            },
            "threads_before_after_async_client": threads_base,
            "results": res,
            "errors": errors,
            "lane_stats": lane_stats,
            "samples_ms": {m: ms_list(lat[m][:: max(1, len(lat[m]) // 5000)]) for m in modes},
        },
        out=args.out,
        machine=info,
    )


if __name__ == "__main__":
    main()
