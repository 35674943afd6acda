"""Batch throughput against Mooncake's own client, same cluster, same run, alternating.

Each repetition stores ``--keys`` fresh values of ``--value-size`` bytes with one batch
call, reads them back with one batch call into a second buffer set, then force-removes
them (untimed).  Every repetition runs Mooncake's ``batch_put_from`` / ``batch_get_into``
and each of our variants in turn (the order rotates each repetition):

* ``ours``      - ``Client.put_from`` / ``get_into``, default shared pool (the batch runs on
  the calling thread: one Mooncake call, like theirs), buffers unregistered;
* ``ours-l1``   - the same with the buffers registered as L1 (``register_l1=True``);
* ``tiles-*``   - ``per_op_workers={store: S, retrieve: S}`` with ``tile_bytes=T``: the batch
  is split into tiles of at most T bytes that the lane's S workers (plus the caller) run in
  parallel; still one completion per batch.

Mooncake's client always gets registered buffers (``register_buffer``).  The loopback TCP
bandwidth (1 and 2 streams, Python sockets) is measured in the same run as the ceiling.

    .venv/bin/python bench/throughput.py           # full run (~1 min)
    .venv/bin/python bench/throughput.py --quick
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import (
    Arena,
    GiB,
    MiB,
    banner,
    busiest_threads,
    cluster,
    loopback_bandwidth,
    ms_list,
    our_client,
    parser,
    pc,
    ratio,
    table,
    their_store,
    thread_cpu,
    warm_segment,
    write_json,
)

# name -> (Client kwargs, uses L1)
TILE_VARIANTS = [
    ("tiles-s2-16M", 2, 16 * MiB),
    ("tiles-s2-8M", 2, 8 * MiB),
    ("tiles-s2-4M", 2, 4 * MiB),
    ("tiles-s3-8M", 3, 8 * MiB),
]


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=20, help="repetitions per client")
    p.add_argument("--keys", type=int, default=64, help="keys per batch")
    p.add_argument("--value-size", type=int, default=MiB, help="bytes per value")
    p.add_argument("--profile-reps", type=int, default=5, help="reps of the CPU profile phase")
    args = p.parse_args()
    if args.quick:
        args.reps, args.profile_reps = 3, 2
    info = banner("throughput", args)
    n, vs = args.keys, args.value_size
    batch_bytes = n * vs

    lo_before = {
        "1 stream": loopback_bandwidth(1.0),
        "2 streams": loopback_bandwidth(1.0, streams=2),
    }
    print(
        f"# loopback TCP: {lo_before['1 stream']:.2f} GiB/s (1 stream), "
        f"{lo_before['2 streams']:.2f} GiB/s (2 streams)",
        flush=True,
    )

    # One arena: sources in slots [0, n), destinations in [n, 2n).
    arena = Arena(2 * n, vs)
    src_v, dst_v = arena.views(n), arena.views(n, n)
    src_p, dst_p = arena.ptrs(n), arena.ptrs(n, n)
    sizes = [vs] * n
    times: dict[str, dict[str, list[float]]] = {}
    errors: dict[str, int] = {}

    with cluster(args.segment, args.pin) as local:
        clients: dict[str, Any] = {
            "ours": our_client(local),
            "ours-l1": our_client(local, l1=arena.buf, register_l1=True),
        }
        for name, workers, tile in TILE_VARIANTS:
            clients[name] = our_client(
                local,
                per_op_workers={"store": workers, "retrieve": workers},
                tile_bytes=tile,
            )
        theirs = their_store(local)
        rc = theirs.register_buffer(arena.base, 2 * n * vs)
        if rc:
            raise RuntimeError(f"register_buffer failed: {rc}")
        admin = clients["ours"]
        warm_s = warm_segment(admin, 2 * batch_bytes + 256 * MiB)
        print(f"# warmed the segment in {warm_s:.1f} s", flush=True)

        def run_ours(c: Any, keys: list[str]) -> tuple[float, float, int]:
            t0 = pc()
            r1 = c.put_from(keys, src_v)
            t1 = pc()
            r2 = c.get_into(keys, dst_v)
            t2 = pc()
            bad = sum(1 for x in r1 if x != 0) + sum(1 for x in r2 if x != vs)
            return t1 - t0, t2 - t1, bad

        def run_theirs(keys: list[str]) -> tuple[float, float, int]:
            t0 = pc()
            r1 = theirs.batch_put_from(keys, src_p, sizes)
            t1 = pc()
            r2 = theirs.batch_get_into(keys, dst_p, sizes)
            t2 = pc()
            bad = sum(1 for x in r1 if x != 0) + sum(1 for x in r2 if x != vs)
            return t1 - t0, t2 - t1, bad

        names = ["theirs", *clients]
        for nm in names:
            times[nm] = {"put": [], "get": []}
            errors[nm] = 0
        warm_reps = 1
        t_run = pc()
        for rep in range(warm_reps + args.reps):
            k = rep % len(names)
            for nm in names[k:] + names[:k]:
                keys = [f"tp/{nm}/{rep}/{i}" for i in range(n)]
                if nm == "theirs":
                    tp, tg, bad = run_theirs(keys)
                else:
                    tp, tg, bad = run_ours(clients[nm], keys)
                admin.batch_remove(keys, force=True)
                errors[nm] += bad
                if rep >= warm_reps:
                    times[nm]["put"].append(tp)
                    times[nm]["get"].append(tg)
        run_s = pc() - t_run

        # Who burns the CPU: per-thread CPU seconds over a few more reps per client.  A
        # thread whose CPU time is close to the wall time spins (Mooncake polls for transfer
        # completion); the busiest thread of the storage node is its TCP io thread.
        cpu_profile: dict[str, Any] = {}
        storage_pid = local.pids["storage"]
        for nm in names:
            me0, st0, t0 = thread_cpu(), thread_cpu(storage_pid), pc()
            for rep in range(args.profile_reps):
                keys = [f"tp-prof/{nm}/{rep}/{i}" for i in range(n)]
                if nm == "theirs":
                    run_theirs(keys)
                else:
                    run_ours(clients[nm], keys)
                admin.batch_remove(keys, force=True)
            wall = pc() - t0
            mine, theirs_node = (
                busiest_threads(me0, thread_cpu()),
                busiest_threads(st0, thread_cpu(storage_pid), 2),
            )
            cpu_profile[nm] = {
                "wall_s": round(wall, 3),
                "client_threads": mine,
                "storage_threads": theirs_node,
                "client_cpu_s": round(sum(x[2] for x in mine), 3),
            }
        lane_stats = {nm: c.stats() for nm, c in clients.items()}
        for c in clients.values():
            c.close()
        theirs.close()

    lo_after = {
        "1 stream": loopback_bandwidth(1.0),
        "2 streams": loopback_bandwidth(1.0, streams=2),
    }
    loop1 = (lo_before["1 stream"] + lo_after["1 stream"]) / 2
    loop2 = (lo_before["2 streams"] + lo_after["2 streams"]) / 2

    def gibs(ts: list[float]) -> float:
        return batch_bytes / float(np.median(ts)) / GiB

    res: dict[str, dict[str, float]] = {}
    for nm in names:
        res[nm] = {
            "put_GiBps": gibs(times[nm]["put"]),
            "get_GiBps": gibs(times[nm]["get"]),
            "put_p99_ms": float(np.percentile(times[nm]["put"], 99) * 1e3),
            "get_p99_ms": float(np.percentile(times[nm]["get"], 99) * 1e3),
        }
        res[nm]["put_vs_theirs"] = ratio(res[nm]["put_GiBps"], res["theirs"]["put_GiBps"])
        res[nm]["get_vs_theirs"] = ratio(res[nm]["get_GiBps"], res["theirs"]["get_GiBps"])
        res[nm]["put_of_loopback"] = ratio(res[nm]["put_GiBps"], loop1)
        res[nm]["get_of_loopback"] = ratio(res[nm]["get_GiBps"], loop1)
    table(
        [
            "client",
            "put GiB/s",
            "x theirs",
            "put p99 ms",
            "get GiB/s",
            "x theirs",
            "get p99 ms",
            "put / loopback",
            "get / loopback",
            "errors",
        ],
        [
            [
                nm,
                r["put_GiBps"],
                r["put_vs_theirs"],
                r["put_p99_ms"],
                r["get_GiBps"],
                r["get_vs_theirs"],
                r["get_p99_ms"],
                r["put_of_loopback"],
                r["get_of_loopback"],
                errors[nm],
            ]
            for nm, r in res.items()
        ],
        title=f"{n} x {vs // 1024} KiB per batch, median of {args.reps} alternating reps; "
        f"loopback TCP {loop1:.2f} GiB/s (1 stream), {loop2:.2f} GiB/s (2 streams)",
    )
    best = max(
        (nm for nm in names if nm != "theirs"),
        key=lambda x: min(res[x]["put_vs_theirs"], res[x]["get_vs_theirs"]),
    )
    targets = {
        "default_put_vs_theirs": res["ours"]["put_vs_theirs"],
        "default_get_vs_theirs": res["ours"]["get_vs_theirs"],
        "best_variant": best,
        "best_put_vs_theirs": res[best]["put_vs_theirs"],
        "best_get_vs_theirs": res[best]["get_vs_theirs"],
        "target": ">= 1.0 (stretch >= 1.3)",
    }
    table(
        ["measure", "value"],
        [[k, v] for k, v in targets.items()],
        title="Targets (throughput ratio ours / Mooncake's client)",
    )
    srows = []
    for nm, st in lane_stats.items():
        for lane in ("store", "retrieve", "shared"):
            s = st[lane]
            if s["completed"]:
                srows.append(
                    [
                        nm,
                        lane,
                        int(s["workers"]),
                        int(s["completed"]),
                        int(s["keys"]),
                        s["p50_us"] / 1e3,
                        s["p99_us"] / 1e3,
                    ]
                )
    table(
        ["client", "lane", "workers", "batches", "keys", "p50 ms", "p99 ms"],
        srows,
        title="client.stats() (whole run, includes warm-up and removals)",
    )
    prow = []
    for nm, cp in cpu_profile.items():
        top = cp["client_threads"]
        spin = [x for x in top if x[2] >= 0.6 * cp["wall_s"]]
        prow.append(
            [
                nm,
                cp["wall_s"],
                cp["client_cpu_s"],
                len(spin),
                ", ".join(f"{x[2]:.2f}" for x in top[:5]),
                ", ".join(f"{x[2]:.2f}" for x in cp["storage_threads"]),
            ]
        )
    table(
        [
            "client",
            "wall s",
            "client CPU s",
            "threads >= 60% busy",
            "busiest client threads (CPU s)",
            "storage node (CPU s)",
        ],
        prow,
        title=f"Per-thread CPU over {args.profile_reps} put+get reps (/proc/<pid>/task/*/stat)",
    )
    write_json(
        "throughput",
        {
            "params": {
                "reps": args.reps,
                "keys": n,
                "value_size": vs,
                "segment": args.segment,
                "tile_variants": [
                    {"name": nm, "store_retrieve_workers": w, "tile_bytes": t}
                    for nm, w, t in TILE_VARIANTS
                ],
                "registered": {"theirs": True, "ours": False, "ours-l1": True, "tiles-*": False},
                "run_seconds": run_s,
            },
            "loopback_GiBps": {"before": lo_before, "after": lo_after},
            "results": res,
            "targets": targets,
            "errors": errors,
            "lane_stats": lane_stats,
            "cpu_profile": cpu_profile,
            "samples_ms": {nm: {op: ms_list(v) for op, v in t.items()} for nm, t in times.items()},
        },
        out=args.out,
        machine=info,
    )


if __name__ == "__main__":
    main()
