"""Small calls under concurrency: our clients against Mooncake's own, same cluster, same run.

Three comparisons, each ours then theirs then ours ... in alternating rounds (``--rounds``),
no CPU pinning (``--pin split`` is there to compare), calls/s per round:

* ``get T``    - T threads (1 and 8) each calling ``get`` of a 4 KiB value in a loop for
  ``--seconds``: ``Client.get`` against ``MooncakeDistributedStore.get``;
* ``exists T`` - the same with ``Client.exists`` against ``is_exist``;
* ``asyncio``  - 2,000 gets of 4 KiB values with 64 in flight from one event loop:
  ``AsyncClient.get`` against Mooncake's ``get`` through ``loop.run_in_executor`` with a
  16-thread pool (what inference stacks do today);
* ``drop-in ...`` - the same three with the drop-in ``MooncakeDistributedStore`` of
  ``mooncake_cffi.store`` set up as a stack sets it up (positionally: failing open, data
  calls with a deadline on a lane) in place of ``Client``: ``get`` / ``is_exist`` from
  threads, ``get`` through the same executor.

Printed per row: the median calls/s of each side, their ratio (ours / theirs; > 1: we are
faster) and the p10..p90 spread of the per-round ratios; and the single-thread rates.

    .venv/bin/python bench/concurrency.py [--rounds N] [--seconds S] [--quick] [--pin split]
"""

from __future__ import annotations

import asyncio
import statistics
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import (
    KiB,
    banner,
    cluster,
    dropin_store,
    our_client,
    parser,
    pc,
    table,
    their_store,
    write_json,
)

from mooncake_cffi import AsyncClient

N_KEYS = 256
VALUE = 4 * KiB


def _rate(call: Callable[[int], Any], threads: int, seconds: float) -> float:
    """Calls/s of ``threads`` threads each calling ``call(i)`` for ``seconds``."""
    stop = threading.Event()
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)

    def loop(t: int) -> None:
        start_line.wait()
        i, n = t, 0
        while not stop.is_set():
            call(i % N_KEYS)
            i += threads
            n += 1
        counts[t] = n

    pool = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    start_line.wait()
    t0 = pc()
    stop.wait(seconds)
    stop.set()
    for th in pool:
        th.join()
    return sum(counts) / (pc() - t0)


async def _burst_async(ac: AsyncClient, keys: list[str], total: int, window: int) -> float:
    sem = asyncio.Semaphore(window)

    async def one(i: int) -> None:
        async with sem:
            await ac.get(keys[i % len(keys)])

    t0 = pc()
    await asyncio.gather(*(one(i) for i in range(total)))
    return total / (pc() - t0)


async def _burst_executor(
    get: Callable[[str], Any], pool: ThreadPoolExecutor, keys: list[str], total: int, window: int
) -> float:
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(window)

    async def one(i: int) -> None:
        async with sem:
            await loop.run_in_executor(pool, get, keys[i % len(keys)])

    t0 = pc()
    await asyncio.gather(*(one(i) for i in range(total)))
    return total / (pc() - t0)


def _spread(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    ratios = sorted(o / t for o, t in zip(ours, theirs))
    p = lambda q: ratios[min(len(ratios) - 1, int(round(q * (len(ratios) - 1))))]  # noqa: E731
    return statistics.median(ours) / statistics.median(theirs), p(0.1), p(0.9)


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=1.5, help="per threads measurement")
    p.add_argument("--threads", default="1,8")
    p.add_argument("--async-total", type=int, default=2000)
    p.add_argument("--async-window", type=int, default=64)
    args = p.parse_args()
    if args.quick:
        args.rounds, args.seconds = 2, 0.5
    info = banner("concurrency", args)
    threads = [int(x) for x in args.threads.split(",")]
    rows: dict[str, dict[str, list[float]]] = {}

    with cluster(args.segment, args.pin) as local:
        ours = our_client(local)
        theirs = their_store(local)
        dropin = dropin_store(local)
        keys = [f"conc/{i:04d}" for i in range(N_KEYS)]
        value = bytes(range(256)) * (VALUE // 256)
        ours.batch_put(keys, [value] * N_KEYS)
        assert theirs.get(keys[0]) == value

        contenders: dict[str, dict[str, Callable[[int], Any]]] = {}
        # Client's rows, then the drop-in's: each face's get and exists against Mooncake's
        faces = {"": (ours.get, ours.exists), "drop-in ": (dropin.get, dropin.is_exist)}
        for face, (get, exists) in faces.items():
            for t in threads:
                contenders[f"{face}get {t}"] = {
                    "ours": lambda i, get=get: get(keys[i]),
                    "theirs": lambda i: theirs.get(keys[i]),
                }
                contenders[f"{face}exists {t}"] = {
                    "ours": lambda i, exists=exists: exists(keys[i]),
                    "theirs": lambda i: theirs.is_exist(keys[i]),
                }
        pool = ThreadPoolExecutor(16)
        for r in range(args.rounds):
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for name, sides in contenders.items():
                t = int(name.split()[-1])
                for side in order:
                    rate = _rate(sides[side], t, args.seconds)
                    rows.setdefault(name, {}).setdefault(side, []).append(rate)

            async def asyncio_round(order: tuple[str, ...] = order) -> None:
                async with AsyncClient(ours) as ac:
                    for side in order:
                        if side == "ours":
                            rate = await _burst_async(ac, keys, args.async_total, args.async_window)
                        else:
                            rate = await _burst_executor(
                                theirs.get, pool, keys, args.async_total, args.async_window
                            )
                        rows.setdefault("asyncio", {}).setdefault(side, []).append(rate)
                for side in order:
                    get = dropin.get if side == "ours" else theirs.get
                    total, window = args.async_total, args.async_window
                    rate = await _burst_executor(get, pool, keys, total, window)
                    rows.setdefault("drop-in asyncio", {}).setdefault(side, []).append(rate)

            asyncio.run(asyncio_round())
        pool.shutdown()
        dropin.close()
        theirs.close()
        ours.close()

    out = []
    for name, sides in rows.items():
        ratio, lo, hi = _spread(sides["ours"], sides["theirs"])
        out.append(
            [
                name,
                f"{statistics.median(sides['ours']):,.0f}",
                f"{statistics.median(sides['theirs']):,.0f}",
                f"{ratio:.2f}",
                f"{lo:.2f}-{hi:.2f}",
            ]
        )
    table(
        ["calls", "ours calls/s", "Mooncake calls/s", "ours/theirs", "p10-p90"],
        out,
        title=f"concurrency: {args.rounds} rounds, pin={args.pin}",
    )
    write_json("concurrency", {"args": vars(args) | {"out": None}, "rows": rows}, args.out, info)


if __name__ == "__main__":
    main()
