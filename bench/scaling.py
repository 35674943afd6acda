"""Scaling: batch put/get throughput and p99 as value size and batch size grow.

Two sweeps, each point measured with our Client (default shared pool; a synchronous batch
runs on the calling thread as one Mooncake call) and with Mooncake's own client, alternating
repetition by repetition:

* value size 4 KiB .. 4 MiB at ``--size-batch`` keys per batch;
* batch size 1 .. 1024 keys at ``--batch-value`` bytes per value.

A repetition stores fresh keys with one batch call, reads them back with one batch call, and
force-removes them (untimed).  Each point runs enough repetitions to move ``--target-bytes``
(at least ``--min-reps``, at most ``--max-reps``).  Buffers are registered for Mooncake's
client, unregistered for ours (TCP).

    .venv/bin/python bench/scaling.py            # full run (~2 min)
    .venv/bin/python bench/scaling.py --quick
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import (
    Arena,
    GiB,
    KiB,
    MiB,
    banner,
    cluster,
    our_client,
    parser,
    pc,
    table,
    their_store,
    warm_segment,
    write_json,
)

SIZES = [4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB]
BATCHES = [1, 4, 16, 64, 256, 1024]


def human(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--size-batch", type=int, default=16, help="keys per batch in the size sweep")
    p.add_argument("--batch-value", type=int, default=64 * KiB, help="value size, batch sweep")
    p.add_argument("--target-bytes", type=int, default=160 * MiB, help="bytes moved per point")
    p.add_argument("--min-reps", type=int, default=15)
    p.add_argument("--max-reps", type=int, default=150)
    args = p.parse_args()
    if args.quick:
        args.target_bytes, args.min_reps, args.max_reps = 16 * MiB, 3, 10
    info = banner("scaling", args)

    points = [("size", args.size_batch, vs) for vs in SIZES]
    points += [("batch", n, args.batch_value) for n in BATCHES]
    max_bytes = max(n * vs for _, n, vs in points)
    arena_src = Arena(1, max_bytes)
    arena_dst = Arena(1, max_bytes, fill=0)
    results: list[dict[str, Any]] = []

    with cluster(args.segment, args.pin) as local:
        ours = our_client(local)
        theirs = their_store(local)
        for a in (arena_src, arena_dst):
            if theirs.register_buffer(a.base, max_bytes):
                raise RuntimeError("register_buffer failed")
        warm_s = warm_segment(ours, 2 * max_bytes + 128 * MiB)
        print(f"# warmed the segment in {warm_s:.1f} s", flush=True)
        t_run = pc()
        for sweep, n, vs in points:
            src_v = [arena_src.buf[i * vs : (i + 1) * vs] for i in range(n)]
            dst_v = [arena_dst.buf[i * vs : (i + 1) * vs] for i in range(n)]
            src_p = [arena_src.base + i * vs for i in range(n)]
            dst_p = [arena_dst.base + i * vs for i in range(n)]
            sizes = [vs] * n
            reps = int(np.clip(args.target_bytes // (n * vs), args.min_reps, args.max_reps))
            t: dict[str, dict[str, list[float]]] = {
                c: {"put": [], "get": []} for c in ("ours", "theirs")
            }
            bad = 0
            for rep in range(reps + 1):  # first repetition is a warm-up
                order = ("ours", "theirs") if rep % 2 == 0 else ("theirs", "ours")
                for who in order:
                    keys = [f"sc/{sweep}/{n}/{vs}/{who}/{rep}/{i}" for i in range(n)]
                    t0 = pc()
                    if who == "ours":
                        r1 = ours.put_from(keys, src_v)
                    else:
                        r1 = theirs.batch_put_from(keys, src_p, sizes)
                    t1 = pc()
                    if who == "ours":
                        r2 = ours.get_into(keys, dst_v)
                    else:
                        r2 = theirs.batch_get_into(keys, dst_p, sizes)
                    t2 = pc()
                    ours.batch_remove(keys, force=True)
                    bad += sum(1 for x in r1 if x != 0) + sum(1 for x in r2 if x != vs)
                    if rep:
                        t[who]["put"].append(t1 - t0)
                        t[who]["get"].append(t2 - t1)
            row: dict[str, Any] = {"sweep": sweep, "keys": n, "value_size": vs, "reps": reps}
            for who in ("ours", "theirs"):
                for op in ("put", "get"):
                    a = np.asarray(t[who][op])
                    med = float(np.median(a))
                    row[f"{who}_{op}_GiBps"] = n * vs / med / GiB
                    row[f"{who}_{op}_kops"] = n / med / 1e3
                    row[f"{who}_{op}_p50_ms"] = med * 1e3
                    row[f"{who}_{op}_p99_ms"] = float(np.percentile(a, 99) * 1e3)
            row["errors"] = bad
            results.append(row)
            print(
                f"# {sweep:5s} {n:5d} x {human(vs):>7s}: ours put {row['ours_put_GiBps']:.3f} "
                f"get {row['ours_get_GiBps']:.3f} GiB/s; theirs put {row['theirs_put_GiBps']:.3f} "
                f"get {row['theirs_get_GiBps']:.3f} GiB/s ({reps} reps)",
                flush=True,
            )
        run_s = pc() - t_run
        lane_stats = ours.stats()
        ours.close()
        theirs.close()

    for sweep, title in (
        ("size", f"Value-size sweep, {args.size_batch} keys per batch"),
        ("batch", f"Batch-size sweep, {human(args.batch_value)} values"),
    ):
        rows = []
        for r in results:
            if r["sweep"] != sweep:
                continue
            rows.append(
                [
                    r["keys"],
                    human(r["value_size"]),
                    r["ours_put_GiBps"],
                    r["ours_put_kops"],
                    r["ours_put_p99_ms"],
                    r["ours_get_GiBps"],
                    r["ours_get_kops"],
                    r["ours_get_p99_ms"],
                    r["theirs_put_GiBps"],
                    r["theirs_get_GiBps"],
                    r["errors"],
                ]
            )
        table(
            [
                "keys",
                "value",
                "put GiB/s",
                "put kkeys/s",
                "put p99 ms",
                "get GiB/s",
                "get kkeys/s",
                "get p99 ms",
                "theirs put GiB/s",
                "theirs get GiB/s",
                "errors",
            ],
            rows,
            title=title + " (ours unless marked; median throughput, p99 per batch call)",
        )
    write_json(
        "scaling",
        {
            "params": {
                "size_batch": args.size_batch,
                "batch_value": args.batch_value,
                "target_bytes": args.target_bytes,
                "min_reps": args.min_reps,
                "max_reps": args.max_reps,
                "segment": args.segment,
                "registered": {"ours": False, "theirs": True},
                "run_seconds": run_s,
            },
            "results": results,
            "lane_stats": lane_stats,
        },
        out=args.out,
        machine=info,
    )


if __name__ == "__main__":
    main()
