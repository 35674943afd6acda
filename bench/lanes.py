"""Lane isolation: LMCache's lane experiment over TCP loopback, in one run.

Every round submits ``--batches`` store batches (``--batch-keys`` fresh keys of
``--value-size`` bytes each) together, then times a lookup (``batch_exists`` of
``--lookup-keys`` keys stored in the previous round) and a load (``get_into`` of
``--load-keys`` other such keys into preallocated buffers), and times each store
batch from its submit to its completion.  Three configurations run round-robin in
the same process against the same cluster:

* ``pool``  - our Client, shared pool ``num_workers=4`` (LMCache's default);
* ``lanes`` - our Client, ``per_op_workers={lookup: 1, retrieve: 1, store: 2}``;
* ``floor`` - Mooncake's own client: the same lookups and loads on the main thread
  while two plain threads run the same store batches with ``batch_put_from`` (no
  pool).  On 2 cores this is the CPU-contention floor under any lookup made while
  stores stream.

Stores of our clients use ``submit`` (completions timed by a thread blocked in
``Client.wait``); lookups and loads are synchronous calls (they run on the caller's
thread when their lane has an idle worker slot, else they queue).  Keys of round
r-2 are force-removed after round r (outside the timings), so the pool never fills
and every store moves data.  Buffers: Mooncake's client gets registered buffers
(``register_buffer``); ours are unregistered (TCP needs no registration).

    .venv/bin/python bench/lanes.py            # full run (~1 min)
    .venv/bin/python bench/lanes.py --quick    # smoke run
"""

from __future__ import annotations

import queue
import random
import threading
from typing import Any

from _common import (
    Arena,
    MiB,
    banner,
    busiest_threads,
    cluster,
    ms_list,
    our_client,
    parser,
    pc,
    ratio,
    summarize,
    table,
    their_store,
    thread_cpu,
    warm_segment,
    write_json,
)

CONFIGS: tuple[str, ...] = ("pool", "lanes", "floor")
OURS = ("pool", "lanes")
LANE_CFG = {"lookup": 1, "retrieve": 1, "store": 2}


class Drainer(threading.Thread):
    """Timestamps our client's completions as soon as ``Client.wait`` reports them."""

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.done: dict[int, tuple[float, Any]] = {}
        self.cv = threading.Condition()
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            if not self.client.wait(timeout=0.1):
                continue
            now = pc()
            comps = self.client.drain()
            with self.cv:
                for comp in comps:
                    self.done[comp.id] = (now, comp)
                self.cv.notify_all()

    def collect(self, ids: list[int], timeout: float = 60.0) -> list[tuple[float, Any]]:
        with self.cv:
            if not self.cv.wait_for(lambda: all(i in self.done for i in ids), timeout):
                raise RuntimeError("store completions did not arrive in time")
            return [self.done.pop(i) for i in ids]

    def stop(self) -> None:
        self.stopping = True
        self.join()


class PlainStorers:
    """Two plain threads running Mooncake's batch_put_from: the floor's store streams."""

    def __init__(self, store: Any, threads: int = 2) -> None:
        self.store = store
        self.jobs: list[queue.Queue[Any]] = [queue.Queue() for _ in range(threads)]
        self.results: queue.Queue[tuple[float, list[int]]] = queue.Queue()
        self.threads = [
            threading.Thread(target=self._loop, args=(q,), daemon=True) for q in self.jobs
        ]
        for t in self.threads:
            t.start()

    def _loop(self, jobs: queue.Queue[Any]) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            keys, ptrs, sizes = job
            res = self.store.batch_put_from(keys, ptrs, sizes)
            self.results.put((pc(), res))

    def submit(self, batches: list[tuple[list[str], list[int], list[int]]]) -> None:
        for i, b in enumerate(batches):
            self.jobs[i % len(self.jobs)].put(b)

    def collect(self, n: int) -> list[tuple[float, list[int]]]:
        return [self.results.get(timeout=60) for _ in range(n)]

    def stop(self) -> None:
        for q in self.jobs:
            q.put(None)
        for t in self.threads:
            t.join()


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=200, help="measured rounds per configuration")
    p.add_argument("--warmup", type=int, default=5, help="discarded rounds per configuration")
    p.add_argument("--batches", type=int, default=4, help="store batches per round")
    p.add_argument("--batch-keys", type=int, default=16, help="keys per store batch")
    p.add_argument("--value-size", type=int, default=MiB, help="bytes per value")
    p.add_argument("--lookup-keys", type=int, default=4, help="keys per lookup")
    p.add_argument("--load-keys", type=int, default=4, help="keys per load")
    p.add_argument(
        "--tile-bytes",
        type=int,
        default=4 * MiB,
        help="also run 'lanes+tiles': the lanes config with tile_bytes=N (0: skip)",
    )
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    global CONFIGS, OURS
    if args.tile_bytes:
        CONFIGS = ("pool", "lanes", "lanes+tiles", "floor")
        OURS = ("pool", "lanes", "lanes+tiles")
    if args.quick:
        args.rounds, args.warmup = 12, 2
    info = banner("lanes", args)
    rng = random.Random(args.seed)

    nb, nk, vs = args.batches, args.batch_keys, args.value_size
    per_round = nb * nk
    src = Arena(per_round, vs)  # read-only sources, shared by all configurations
    dst = {c: Arena(args.load_keys, vs, fill=0) for c in CONFIGS}
    sizes = [vs] * per_round

    lat: dict[str, dict[str, list[float]]] = {
        c: {"lookup": [], "load": [], "store": []} for c in CONFIGS
    }
    store_phase: dict[str, list[float]] = {c: [] for c in CONFIGS}
    depth: dict[str, list[tuple[int, int, int, int]]] = {c: [] for c in OURS}
    errors: dict[str, int] = {c: 0 for c in CONFIGS}
    # Per-thread CPU seconds while each configuration's rounds run (from submit to the last
    # store completion, plus the lookup and load): who competes for the 2 cores.
    busy: dict[str, dict[int, float]] = {c: {} for c in CONFIGS}
    busy_wall: dict[str, float] = {c: 0.0 for c in CONFIGS}
    busy_storage: dict[str, float] = {c: 0.0 for c in CONFIGS}

    with cluster(args.segment, args.pin) as local:
        clients = {
            "pool": our_client(local, num_workers=4),
            "lanes": our_client(local, num_workers=4, per_op_workers=LANE_CFG),
        }
        if args.tile_bytes:
            clients["lanes+tiles"] = our_client(
                local, num_workers=4, per_op_workers=LANE_CFG, tile_bytes=args.tile_bytes
            )
        theirs = their_store(local)
        for a in [src, *dst.values()]:
            rc = theirs.register_buffer(a.base, a.n * a.size)
            if rc:
                raise RuntimeError(f"register_buffer failed: {rc}")
        live = 3 * per_round * vs * len(CONFIGS)
        warm_s = warm_segment(clients["pool"], live + 256 * MiB)
        print(f"# warmed {live / MiB + 256:.0f} MiB of the segment in {warm_s:.1f} s", flush=True)
        drainers = {c: Drainer(cl) for c, cl in clients.items()}
        for d in drainers.values():
            d.start()
        storers = PlainStorers(theirs, threads=2)
        storage_pid = local.pids["storage"]

        def keys_of(cfg: str, r: int) -> list[str]:
            return [f"lanes-bench/{cfg}/r{r}/{i}" for i in range(per_round)]

        # Round -1: something to look up and load in round 0.
        for cfg in CONFIGS:
            res = clients["pool"].put_from(keys_of(cfg, -1), src.views())
            assert all(r == 0 for r in res), res

        def one_round(cfg: str, r: int, measured: bool) -> None:
            keys = keys_of(cfg, r)
            prev = rng.sample(keys_of(cfg, r - 1), args.lookup_keys + args.load_keys)
            lk, ld = prev[: args.lookup_keys], prev[args.lookup_keys :]
            batches = [keys[b * nk : (b + 1) * nk] for b in range(nb)]
            if measured:
                th0, st0 = thread_cpu(), thread_cpu(storage_pid)
            if cfg == "floor":
                t_sub = pc()
                storers.submit(
                    [(bk, src.ptrs(nk, b * nk), sizes[:nk]) for b, bk in enumerate(batches)]
                )
                t0 = pc()
                found = theirs.batch_is_exist(lk)
                t1 = pc()
                got = theirs.batch_get_into(ld, dst[cfg].ptrs(), [vs] * len(ld))
                t2 = pc()
                done = storers.collect(nb)
                ends = [t for t, _ in done]
                bad = sum(1 for _, res in done for x in res if x != 0)
            else:
                c = clients[cfg]
                ids, t_sub = [], pc()
                for b, bk in enumerate(batches):
                    ids.append(c.submit("put", bk, src.views(nk, b * nk)))
                st = c.stats()
                look_lane = "shared" if cfg == "pool" else "lookup"
                store_lane = "shared" if cfg == "pool" else "store"
                depth[cfg].append(
                    (
                        int(st[look_lane]["running"]),
                        int(st[look_lane]["queued"]),
                        int(st[store_lane]["running"]),
                        int(st[store_lane]["queued"]),
                    )
                )
                t0 = pc()
                found = c.batch_exists(lk)
                t1 = pc()
                got = c.get_into(ld, dst[cfg].views())
                t2 = pc()
                done = drainers[cfg].collect(ids)
                ends = [t for t, _ in done]
                bad = sum(1 for _, comp in done if not comp.ok)
            bad += sum(1 for f in found if not f) + sum(1 for g in got if g != vs)
            errors[cfg] += bad
            if measured:
                lat[cfg]["lookup"].append(t1 - t0)
                lat[cfg]["load"].append(t2 - t1)
                lat[cfg]["store"].extend(t - t_sub for t in ends)
                store_phase[cfg].append(max(ends) - t_sub)
                th1, st1 = thread_cpu(), thread_cpu(storage_pid)
                busy_wall[cfg] += pc() - t_sub
                for tid, _nm, used in busiest_threads(th0, th1, top=1000):
                    busy[cfg][tid] = busy[cfg].get(tid, 0.0) + used
                busy_storage[cfg] += sum(u for _, _, u in busiest_threads(st0, st1, top=1000))
            if r >= 1:
                clients["pool"].batch_remove(keys_of(cfg, r - 2), force=True)

        total = args.warmup + args.rounds
        t_run = pc()
        for r in range(total):
            k = r % len(CONFIGS)
            order = CONFIGS[k:] + CONFIGS[:k]  # rotate who goes first
            for cfg in order:
                one_round(cfg, r, measured=r >= args.warmup)
            if r % 50 == 49:
                print(f"# round {r + 1}/{total}  {pc() - t_run:.0f} s", flush=True)
        run_s = pc() - t_run

        lane_stats = {c: cl.stats() for c, cl in clients.items()}
        storers.stop()
        for d in drainers.values():
            d.stop()
        for cfg in CONFIGS:
            for r in (total - 2, total - 1):
                clients["pool"].batch_remove(keys_of(cfg, r), force=True)
        for cl in clients.values():
            cl.close()
        theirs.close()

    # ------------------------------------------------------------------ report
    summ = {c: {op: summarize(v) for op, v in lat[c].items()} for c in CONFIGS}
    bytes_round = per_round * vs
    thr = {c: bytes_round * len(store_phase[c]) / sum(store_phase[c]) / MiB for c in CONFIGS}
    rows = []
    for c in CONFIGS:
        s = summ[c]
        rows.append(
            [
                c,
                s["lookup"]["avg"],
                s["lookup"]["p50"],
                s["lookup"]["p99"],
                s["load"]["avg"],
                s["load"]["p50"],
                s["load"]["p99"],
                s["store"]["avg"],
                s["store"]["p99"],
                thr[c],
                errors[c],
            ]
        )
    table(
        [
            "config",
            "lookup avg",
            "lookup p50",
            "lookup p99",
            "load avg",
            "load p50",
            "load p99",
            "store avg",
            "store p99",
            "store MiB/s",
            "errors",
        ],
        rows,
        title=f"Latency in ms, {args.rounds} measured rounds per config ({args.warmup} warm-up "
        f"discarded); {nb} x {nk} x {vs // 1024} KiB stores per round; "
        f"lookup {args.lookup_keys} keys, load {args.load_keys} x {vs // 1024} KiB",
    )

    targets: dict[str, dict[str, Any]] = {}
    pool, floor = summ["pool"], summ["floor"]
    for v in [c for c in OURS if c != "pool"]:
        lanes = summ[v]
        checks = [
            ("lookup p50: pool / {v}", pool["lookup"]["p50"], lanes["lookup"]["p50"], ">= 10"),
            ("lookup p99: {v} / floor", lanes["lookup"]["p99"], floor["lookup"]["p99"], "<= 1.5"),
            ("lookup p99: pool / {v}", pool["lookup"]["p99"], lanes["lookup"]["p99"], "report"),
            ("load p99: pool / {v}", pool["load"]["p99"], lanes["load"]["p99"], ">= 3"),
            ("store MiB/s: {v} / pool", thr[v], thr["pool"], ">= 0.9"),
        ]
        for label, a, b, want in checks:
            val = ratio(a, b)
            met = None
            if want.startswith(">="):
                met = val >= float(want[2:])
            elif want.startswith("<="):
                met = val <= float(want[2:])
            targets[label.format(v=v)] = {"value": val, "target": want, "met": met}
    table(
        ["target", "value", "wanted", "met"],
        [[k, v["value"], v["target"], v["met"]] for k, v in targets.items()],
        title="Targets",
    )

    # What the lookup found when it started (sampled right after the stores were submitted).
    drows = []
    for c in OURS:
        d = depth[c][args.warmup :] if len(depth[c]) > args.warmup else depth[c]
        n = max(1, len(d))
        drows.append(
            [
                c,
                sum(x[0] for x in d) / n,
                sum(x[1] for x in d) / n,
                sum(1 for x in d if x[0] >= (4 if c == "pool" else 1)) / n,
                sum(x[2] for x in d) / n,
                sum(x[3] for x in d) / n,
            ]
        )
    table(
        [
            "config",
            "lookup lane running",
            "lookup lane queued",
            "share: lane full",
            "store lane running",
            "store lane queued",
        ],
        drows,
        title="Lane state seen just before each lookup (client.stats(), mean over rounds)",
    )
    srows = []
    for c in OURS:
        for lane, s in lane_stats[c].items():
            if not s["submitted"]:
                continue
            srows.append(
                [
                    c,
                    lane,
                    int(s["workers"]),
                    int(s["completed"]),
                    int(s["keys"]),
                    s["mean_us"] / 1e3,
                    s["p50_us"] / 1e3,
                    s["p99_us"] / 1e3,
                    s["max_us"] / 1e3,
                ]
            )
    table(
        ["config", "lane", "workers", "batches", "keys", "mean ms", "p50 ms", "p99 ms", "max ms"],
        srows,
        title="client.stats() at the end (per-lane batch latency, submit to completion, whole "
        "run incl. warm-up and removals; shim histogram: bucket upper edges)",
    )

    cpu_rows, cpu_profile = [], {}
    for c in CONFIGS:
        wall = busy_wall[c] or 1.0
        shares = sorted((u / wall for u in busy[c].values()), reverse=True)
        cpu_profile[c] = {
            "wall_s": busy_wall[c],
            "client_cpu_share": sum(shares),
            "busiest_threads_share": [round(x, 3) for x in shares[:8]],
            "storage_node_share": busy_storage[c] / wall,
        }
        cpu_rows.append(
            [
                c,
                sum(shares),
                sum(1 for x in shares if x >= 0.15),
                " ".join(f"{x:.2f}" for x in shares[:6]),
                busy_storage[c] / wall,
            ]
        )
    table(
        [
            "config",
            "client CPU (cores)",
            "threads >= 15% busy",
            "busiest client threads (CPU / wall)",
            "storage node (cores)",
        ],
        cpu_rows,
        title="CPU while the rounds run (/proc/<pid>/task/*/stat; this process holds all four "
        "configurations' clients, idle ones add ~0)",
    )
    write_json(
        "lanes",
        {
            "params": {
                "rounds": args.rounds,
                "warmup": args.warmup,
                "batches": nb,
                "batch_keys": nk,
                "value_size": vs,
                "lookup_keys": args.lookup_keys,
                "load_keys": args.load_keys,
                "segment": args.segment,
                "lanes_config": LANE_CFG,
                "pool_workers": 4,
                "floor_store_threads": 2,
                "registered": {"ours": False, "theirs": True},
                "run_seconds": run_s,
                "warm_seconds": warm_s,
            },
            "summary_ms": summ,
            "store_MiB_per_s": thr,
            "errors": errors,
            "targets": targets,
            "lane_depth_before_lookup": {c: depth[c] for c in depth},
            "lane_stats": lane_stats,
            "cpu_profile": cpu_profile,
            "samples_ms": {c: {op: ms_list(v) for op, v in lat[c].items()} for c in CONFIGS},
        },
        out=args.out,
        machine=info,
    )


if __name__ == "__main__":
    main()
