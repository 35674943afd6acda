"""Many-key batches: our Client, the drop-in store and Mooncake's own client, on one cluster.

For each operation and batch shape (1, 16, 256, 1,024 keys of 4 KiB; 64 x 64 KiB; 64 x 1 MiB)
the three contenders run the same call on the same keys, in an order that rotates every
round.  Printed per cell: each median time, the ratios of medians to Mooncake's (< 1: faster)
and the spread of the per-round paired ratios (p10..p90).

    operation      ours (Client)          drop-in (mooncake_cffi.store)   Mooncake's
    batch_get      Client.batch_get       get_batch                      get_batch
    batch_exists   Client.batch_exists    batch_is_exist                 batch_is_exist
    batch_remove   Client.batch_remove    batch_remove (fresh keys, force)
    get_into       Client.get_into        batch_get_into                 batch_get_into
    batch_put      Client.batch_put       put_batch (fresh keys)         put_batch
    put_from       Client.put_from        batch_put_from (64 x 1 MiB)    batch_put_from

and at 1 key the single-key calls: ``get`` / ``is_exist`` / ``get_size`` / ``remove`` /
``put`` / ``get_into`` / ``put_from`` (Client: get, exists, size, remove, put, get_into and
put_from of one key).  Small cells get more rounds (20x at 1 key, 5x at 16 keys): one call
there is ~0.1 ms, so single rounds are noisy.  By default placement is left to the scheduler
(``--pin none``, as a user runs it); ``--pin split`` puts the cluster on the last CPU and this
process on the others (see bench/_common.py).  ``--control`` adds a second instance of
Mooncake's class as a fourth contender: its ratio to the first is how far the same code
through two clients of one process differs in the run, the yardstick for the others.

Each contender is ``--instances`` clients (default 2), created in a mirrored order and
taken in turn by the rounds (see ``mirrored_sets`` in bench/_common.py for why).

    .venv/bin/python bench/batches.py [--rounds N] [--quick] [--ops A,B] [--cells 1,16]
                                      [--control] [--instances K]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from _common import (
    Arena,
    KiB,
    MiB,
    add_instances,
    banner,
    check_installed,
    cluster,
    dropin_store,
    fmt,
    mirrored_sets,
    our_client,
    parser,
    pc,
    quantile,
    table,
    their_store,
    warm_segment,
    write_json,
)

CELLS = [
    ("1 key", 1, 4 * KiB),
    ("16 keys", 16, 4 * KiB),
    ("256 keys", 256, 4 * KiB),
    ("1024 keys", 1024, 4 * KiB),
    ("64 x 64 KiB", 64, 64 * KiB),
    ("64 x 1 MiB", 64, MiB),
]
BATCH_OPS = ["batch_get", "batch_exists", "batch_remove", "get_into", "batch_put", "put_from"]
SINGLE_OPS = ["get", "is_exist", "get_size", "remove", "put", "get_into1", "put_from1"]
OPS = BATCH_OPS + SINGLE_OPS
# Mooncake's get_batch and put_batch copy through its 16 MiB local buffer: 64 MiB does not
# fit there (its put_batch fails at once), so those cells compare nothing.
SKIP = {("batch_get", "64 x 1 MiB"), ("batch_put", "64 x 1 MiB")}
SKIP |= {("put_from", c) for c in ("1 key", "16 keys", "256 keys", "1024 keys", "64 x 64 KiB")}
SKIP |= {(op, c) for op in SINGLE_OPS for c, _, _ in CELLS if c != "1 key"}


def _short(name: str) -> str:
    """A cell's short name: 64 x 64 KiB gives 64x64KiB, 16 keys gives 16."""
    return name.replace(" keys", "").replace(" key", "").replace(" ", "")


class Cell:
    """The keys, values and buffers of one batch shape, and its contenders per op."""

    def __init__(
        self, stores: dict[str, Any], name: str, n: int, size: int, instance: int = 0
    ) -> None:
        self.stores = stores
        ours = stores["ours"]
        self.name, self.n, self.size = name, n, size
        tag = name.replace(" ", "")
        self.keys = [f"bench-{tag}-i{instance}-{i:05d}" for i in range(n)]
        self.src = Arena(n, size)
        self.values = [bytes(v) for v in self.src.views()]
        self.dst = Arena(n, size, fill=0)
        self.views, self.ptrs = self.dst.views(), self.dst.ptrs()
        self.sizes = [size] * n
        self.fresh = 0
        res = ours.batch_put(self.keys, self.values)
        if any(r < 0 for r in res):
            raise SystemExit(f"setup put failed for {name}: {res[:4]}")
        if ours.batch_get(self.keys) != self.values:
            raise SystemExit(f"batch_get returned wrong bytes for {name}")
        for side in self.stores.keys() - {"ours"}:
            if self.stores[side].get_batch(self.keys[:1]) != self.values[:1]:
                raise SystemExit(f"{side}'s get_batch does not see our values")

    def fresh_keys(self, side: str) -> list[str]:
        self.fresh += 1
        return [f"{k}-{side}{self.fresh}" for k in self.keys]

    def prepare(self, op: str, side: str) -> tuple[Callable[[], Any], Callable[[], None]]:
        """(the timed call, untimed cleanup) for one side of one round."""
        s, o = self.stores[side], self.stores["ours"]
        ours = side == "ours"
        k, k0 = self.keys, self.keys[0]
        nothing = lambda: None  # noqa: E731
        reads: dict[str, Callable[[], Any]] = {
            "batch_get": (lambda: s.batch_get(k)) if ours else (lambda: s.get_batch(k)),
            "batch_exists": (lambda: s.batch_exists(k)) if ours else (lambda: s.batch_is_exist(k)),
            "get_into": (
                (lambda: s.get_into(k, self.views))
                if ours
                else (lambda: s.batch_get_into(k, self.ptrs, self.sizes))
            ),
            "get": lambda: s.get(k0),
            "is_exist": (lambda: s.exists(k0)) if ours else (lambda: s.is_exist(k0)),
            "get_size": (lambda: s.size(k0)) if ours else (lambda: s.get_size(k0)),
            "get_into1": (
                (lambda: s.get_into([k0], self.views[:1]))
                if ours
                else (lambda: s.get_into(k0, self.ptrs[0], self.size))
            ),
        }
        if op in reads:
            return reads[op], nothing
        keys = self.fresh_keys(side)
        cleanup = lambda: o.batch_remove(keys, force=True) and None  # noqa: E731
        f1 = keys[0]
        if op == "batch_put":
            f = (
                (lambda: s.batch_put(keys, self.values))
                if ours
                else (lambda: s.put_batch(keys, self.values))
            )
        elif op == "put":
            f = lambda: s.put(f1, self.values[0])  # noqa: E731
        elif op in ("put_from", "put_from1"):
            views, ptrs = self.src.views(), self.src.ptrs()
            if op == "put_from1":
                f = (
                    (lambda: s.put_from([f1], views[:1]))
                    if ours
                    else (lambda: s.put_from(f1, ptrs[0], self.size))
                )
            else:
                f = (
                    (lambda: s.put_from(keys, views))
                    if ours
                    else (lambda: s.batch_put_from(keys, ptrs, self.sizes))
                )
        elif op in ("batch_remove", "remove"):
            o.put_from(keys, self.src.views())
            if op == "remove":
                f = (lambda: s.remove(f1, force=True)) if ours else (lambda: s.remove(f1, True))
            else:
                f = (
                    (lambda: s.batch_remove(keys, force=True))
                    if ours
                    else (lambda: s.batch_remove(keys, True))
                )
            return f, cleanup
        else:
            raise ValueError(op)
        return f, cleanup

    def close(self) -> None:
        self.stores["ours"].batch_remove(self.keys, force=True)


def measure(cells: list[Cell], op: str, rounds: int) -> dict[str, Any]:
    """Time ``op`` on every contender, ``rounds`` rounds after two warm-up rounds per
    instance; round ``r`` runs on instance ``r % len(cells)``, in an order that rotates."""
    sides = tuple(cells[0].stores)
    times: dict[str, list[float]] = {side: [] for side in sides}
    warm = 2 * len(cells)
    for r in range(rounds + warm):
        cell = cells[r % len(cells)]
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        if (r // len(cells)) % 2:
            order = order[::-1]
        for side in order:
            call, cleanup = cell.prepare(op, side)
            t0 = pc()
            call()
            dt = pc() - t0
            cleanup()
            if r >= warm:
                times[side].append(dt)
    med = {side: statistics.median(times[side]) for side in sides}
    out: dict[str, Any] = {f"{side}_ms": med[side] * 1e3 for side in sides}
    for side in (s for s in sides if s != "theirs"):
        paired = [a / b for a, b in zip(times[side], times["theirs"])]
        out[f"{side}_ratio"] = med[side] / med["theirs"]
        out[f"{side}_p10"] = quantile(paired, 0.1)
        out[f"{side}_p90"] = quantile(paired, 0.9)
    for side in sides:
        out[f"samples_{side}_ms"] = [x * 1e3 for x in times[side]]
    return out


def _ratio_table(results: dict[str, dict[str, Any]], ops: list[str], side: str, title: str) -> None:
    names = [c[0] for c in CELLS]
    rows = []
    for op in ops:
        row: list[Any] = [op]
        for name in names:
            r = results.get(op, {}).get(name)
            row.append(
                "n/a"
                if r is None
                else f"{r[side + '_ratio']:.2f} ({r[side + '_p10']:.2f}-{r[side + '_p90']:.2f})"
            )
        rows.append(row)
    table(["op"] + names, rows, title=title)


def main() -> None:
    p = parser(__doc__.splitlines()[0], pin="none")
    p.add_argument("--rounds", type=int, default=61, help="timed rounds per cell (default 61)")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of operations")
    p.add_argument(
        "--cells",
        default="",
        help="comma-separated subset of cells by key count and value size, e.g. 1,16,64x64KiB",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="a fourth contender: a second instance of Mooncake's class, whose ratio to the "
        "first shows how far two instances of the same code differ in this run",
    )
    add_instances(p)
    args = p.parse_args()
    wanted = {c.strip().replace(" ", "") for c in args.cells.split(",") if c.strip()}
    rounds = 5 if args.quick else args.rounds
    ops = [o for o in args.ops.split(",") if o]
    check_installed()
    info = banner("batches", args)
    results: dict[str, dict[str, Any]] = {}
    makers: dict[str, Callable[[Any], Any]] = {
        "ours": our_client,
        "dropin": dropin_store,
        "theirs": their_store,
    }
    if args.control:
        makers["control"] = their_store
    with cluster(args.segment, args.pin) as local:
        sets = mirrored_sets(list(makers), lambda side: makers[side](local), args.instances)
        warm_segment(sets[0]["ours"], 512 * MiB)
        try:
            for name, n, size in CELLS:
                if wanted and _short(name) not in wanted:
                    continue
                cells = [Cell(stores, name, n, size, k) for k, stores in enumerate(sets)]
                cell_rounds = rounds * (20 if n == 1 else 5 if n <= 16 else 1)
                for op in ops:
                    if (op, name) in SKIP:
                        continue
                    res = measure(cells, op, cell_rounds)
                    results.setdefault(op, {})[name] = res
                    print(
                        f"{op:>13} {name:>12}: ours {fmt(res['ours_ms'])} ms, drop-in "
                        f"{fmt(res['dropin_ms'])} ms, theirs {fmt(res['theirs_ms'])} ms; "
                        f"ours/theirs {res['ours_ratio']:.2f}, drop-in/theirs "
                        f"{res['dropin_ratio']:.2f} (p10 {res['dropin_p10']:.2f}, "
                        f"p90 {res['dropin_p90']:.2f})"
                        + (f"; control/theirs {res['control_ratio']:.2f}" if args.control else ""),
                        flush=True,
                    )
                for cell in cells:
                    cell.close()
        finally:
            for stores in sets:
                for store in stores.values():
                    store.close()
    print()
    _ratio_table(results, ops, "dropin", "time drop-in / Mooncake's (median; p10-p90 of rounds)")
    print()
    _ratio_table(results, ops, "ours", "time Client / Mooncake's (median; p10-p90 of rounds)")
    if args.control:
        print()
        title = "time Mooncake's second instance / its first (median; p10-p90 of rounds)"
        _ratio_table(results, ops, "control", title)
    for side in ("dropin", "ours"):
        worst = max(
            (r[f"{side}_ratio"], op, name)
            for op, cells in results.items()
            for name, r in cells.items()
        )
        print(f"\nworst {side} cell: {worst[1]} {worst[2]} at {worst[0]:.2f}")
    write_json(
        "batches",
        {"rounds": rounds, "pin": args.pin, "instances": args.instances, "results": results},
        args.out,
        info,
    )


if __name__ == "__main__":
    sys.exit(main())
