"""Many-key batches: our Client against Mooncake's own client, same cluster, same run.

For each operation and batch shape (1, 16, 256, 1,024 keys of 4 KiB; 64 x 64 KiB; 64 x 1 MiB)
both clients run the same call on the same keys, alternating which goes first every round.
Printed per cell: our median time, theirs, the ratio of medians (< 1: we are faster) and the
spread of the per-round paired ratios (p10..p90).

    operation          ours                      Mooncake's MooncakeDistributedStore
    batch_get          Client.batch_get          get_batch
    batch_exists       Client.batch_exists       batch_is_exist
    batch_remove       Client.batch_remove       batch_remove            (fresh keys, force)
    get_into           Client.get_into           batch_get_into          (same buffers)
    batch_put          Client.batch_put          put_batch               (fresh keys)
    put_from           Client.put_from           batch_put_from          (64 x 1 MiB only)

Small cells get more rounds (10x at 1 key, 3x at 16 keys): one call there is ~0.1 ms, so
single rounds are noisy.  By default the cluster runs on the last CPU and this process on the
others (``--pin split``, see bench/_common.py); ``--pin none`` leaves placement to the
scheduler.

    .venv/bin/python bench/batches.py [--rounds N] [--quick] [--ops A,B] [--cells 1,16]
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
    banner,
    check_installed,
    cluster,
    fmt,
    our_client,
    parser,
    pc,
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
OPS = ["batch_get", "batch_exists", "batch_remove", "get_into", "batch_put", "put_from"]
# Mooncake's get_batch and put_batch copy through its 16 MiB local buffer: 64 MiB does not
# fit there (its put_batch fails at once), so those cells compare nothing.
SKIP = {("batch_get", "64 x 1 MiB"), ("batch_put", "64 x 1 MiB")}
SKIP |= {("put_from", "1 key"), ("put_from", "16 keys")}
SKIP |= {("put_from", c) for c in ("256 keys", "1024 keys", "64 x 64 KiB")}


def _short(name: str) -> str:
    """A cell's short name: 64 x 64 KiB gives 64x64KiB, 16 keys gives 16."""
    return name.replace(" keys", "").replace(" key", "").replace(" ", "")


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


class Cell:
    """The keys, values and buffers of one batch shape, and its two contenders per op."""

    def __init__(self, ours: Any, theirs: Any, name: str, n: int, size: int) -> None:
        self.ours, self.theirs, self.name, self.n, self.size = ours, theirs, name, n, size
        tag = name.replace(" ", "")
        self.keys = [f"bench-{tag}-{i:05d}" for i in range(n)]
        self.src = Arena(n, size)
        self.values = [bytes(v) for v in self.src.views()]
        self.dst = Arena(n, size, fill=0)
        self.views, self.ptrs = self.dst.views(), self.dst.ptrs()
        self.sizes = [size] * n
        self.fresh = 0
        res = ours.batch_put(self.keys, self.values)
        if any(r < 0 for r in res):
            raise SystemExit(f"setup put failed for {name}: {res[:4]}")
        got = ours.batch_get(self.keys)
        if got != self.values:
            raise SystemExit(f"batch_get returned wrong bytes for {name}")
        if theirs.get_batch(self.keys[:1]) != self.values[:1]:
            raise SystemExit("Mooncake's get_batch does not see our values")

    def fresh_keys(self, side: str) -> list[str]:
        self.fresh += 1
        return [f"{k}-{side}{self.fresh}" for k in self.keys]

    def prepare(self, op: str, side: str) -> tuple[Callable[[], Any], Callable[[], None]]:
        """(the timed call, untimed cleanup) for one side of one round."""
        o, t = self.ours, self.theirs
        nothing = lambda: None  # noqa: E731
        if op == "batch_get":
            f = (
                (lambda: o.batch_get(self.keys))
                if side == "ours"
                else (lambda: t.get_batch(self.keys))
            )
            return f, nothing
        if op == "batch_exists":
            f = (
                (lambda: o.batch_exists(self.keys))
                if side == "ours"
                else (lambda: t.batch_is_exist(self.keys))
            )
            return f, nothing
        if op == "get_into":
            f = (
                (lambda: o.get_into(self.keys, self.views))
                if side == "ours"
                else (lambda: t.batch_get_into(self.keys, self.ptrs, self.sizes))
            )
            return f, nothing
        keys = self.fresh_keys(side)
        cleanup = lambda: o.batch_remove(keys, force=True) and None  # noqa: E731
        if op == "batch_put":
            f = (
                (lambda: o.batch_put(keys, self.values))
                if side == "ours"
                else (lambda: t.put_batch(keys, self.values))
            )
            return f, cleanup
        if op == "put_from":
            views = self.src.views()
            ptrs = self.src.ptrs()
            f = (
                (lambda: o.put_from(keys, views))
                if side == "ours"
                else (lambda: t.batch_put_from(keys, ptrs, self.sizes))
            )
            return f, cleanup
        if op == "batch_remove":
            o.put_from(keys, self.src.views())
            f = (
                (lambda: o.batch_remove(keys, force=True))
                if side == "ours"
                else (lambda: t.batch_remove(keys, True))
            )
            return f, nothing
        raise ValueError(op)

    def close(self) -> None:
        self.ours.batch_remove(self.keys, force=True)


def measure(cell: Cell, op: str, rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for r in range(rounds + 2):  # two warm-up rounds, discarded
        order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
        for side in order:
            call, cleanup = cell.prepare(op, side)
            t0 = pc()
            call()
            dt = pc() - t0
            cleanup()
            if r >= 2:
                times[side].append(dt)
    ours, theirs = statistics.median(times["ours"]), statistics.median(times["theirs"])
    paired = [a / b for a, b in zip(times["ours"], times["theirs"])]
    return {
        "ours_ms": ours * 1e3,
        "theirs_ms": theirs * 1e3,
        "ratio": ours / theirs,
        "p10": _quantile(paired, 0.1),
        "p90": _quantile(paired, 0.9),
        "samples_ours_ms": [x * 1e3 for x in times["ours"]],
        "samples_theirs_ms": [x * 1e3 for x in times["theirs"]],
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0], pin="split")
    p.add_argument("--rounds", type=int, default=40, help="timed rounds per cell (default 40)")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of operations")
    p.add_argument(
        "--cells",
        default="",
        help="comma-separated subset of cells by key count and value size, e.g. 1,16,64x64KiB",
    )
    args = p.parse_args()
    wanted = {c.strip().replace(" ", "") for c in args.cells.split(",") if c.strip()}
    rounds = 5 if args.quick else args.rounds
    ops = [o for o in args.ops.split(",") if o]
    check_installed()
    info = banner("batches", args)
    results: dict[str, dict[str, Any]] = {}
    with cluster(args.segment, args.pin) as local:
        ours = our_client(local)
        theirs = their_store(local)
        warm_segment(ours, 512 * MiB)
        try:
            for name, n, size in CELLS:
                if wanted and _short(name) not in wanted:
                    continue
                cell = Cell(ours, theirs, name, n, size)
                cell_rounds = rounds * (10 if n == 1 else 3 if n <= 16 else 1)
                for op in ops:
                    if (op, name) in SKIP:
                        continue
                    res = measure(cell, op, cell_rounds)
                    results.setdefault(op, {})[name] = res
                    print(
                        f"{op:>13} {name:>12}: ours {fmt(res['ours_ms'])} ms, theirs "
                        f"{fmt(res['theirs_ms'])} ms, ratio {res['ratio']:.2f} "
                        f"(p10 {res['p10']:.2f}, p90 {res['p90']:.2f})",
                        flush=True,
                    )
                cell.close()
        finally:
            ours.close()
            theirs.close()
    names = [c[0] for c in CELLS]
    rows = []
    for op in ops:
        row: list[Any] = [op]
        for name in names:
            r = results.get(op, {}).get(name)
            row.append("n/a" if r is None else f"{r['ratio']:.2f} ({r['p10']:.2f}-{r['p90']:.2f})")
        rows.append(row)
    print()
    table(["op"] + names, rows, title="time ours / Mooncake's (median; p10-p90 of rounds)")
    worst = max(
        (r["ratio"], op, name) for op, cells in results.items() for name, r in cells.items()
    )
    print(f"\nworst cell: {worst[1]} {worst[2]} at {worst[0]:.2f}")
    write_json("batches", {"rounds": rounds, "pin": args.pin, "results": results}, args.out, info)


if __name__ == "__main__":
    sys.exit(main())
