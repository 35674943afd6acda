"""One-key calls with a pause between them: ours against Mooncake's client by the gap.

A one-key call of either client is a round trip through Mooncake's RPC, whose I/O thread,
having woken the caller, keeps its CPU for a moment before it sleeps.  A next call posted
within that moment (a microsecond or two on this project's VM) finds it awake and takes
about 60 us; any later one has to wake it and takes 100-200 us.  Back-to-back calls with
nothing between them, as ``bench/batches.py`` times them, therefore measure how few
instructions lie between one call's return and the next call's start as much as the call
itself.  A stack always has work of its own between two lookups; this benchmark puts a
busy pause of ``--gaps`` microseconds before every call and shows both regimes.

Each round times ``--calls`` one-key ``exists`` calls per contender and gap, contenders in
an order that alternates round by round; each contender is ``--instances`` clients taken
in turn (see ``mirrored_sets`` in bench/_common.py).  Printed per gap: each median time
and its ratio to Mooncake's, with the p10..p90 of the per-round ratios.

    .venv/bin/python bench/gaps.py [--rounds N] [--gaps 0,2,10,50] [--quick]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from _common import (
    add_instances,
    banner,
    check_installed,
    cluster,
    dropin_store,
    mirrored_sets,
    our_client,
    parser,
    pc,
    quantile,
    table,
    their_store,
    write_json,
)

KEY = "gaps/key"


def _calls(side: str, store: Any) -> Callable[[], Any]:
    if side == "Client":
        return lambda: store.exists(KEY)
    return lambda: store.is_exist(KEY)


def timed(call: Callable[[], Any], calls: int, gap_s: float) -> float:
    """The median of ``calls`` calls, each after a busy pause of ``gap_s`` seconds."""
    out = []
    for _ in range(calls):
        until = pc() + gap_s
        while pc() < until:
            pass
        t0 = pc()
        call()
        out.append(pc() - t0)
    return statistics.median(out)


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="rounds (default %(default)s)")
    p.add_argument("--calls", type=int, default=200, help="calls per contender, gap and round")
    p.add_argument("--gaps", default="0,2,5,10,20,50", help="pauses in us (default %(default)s)")
    add_instances(p)
    args = p.parse_args()
    if args.quick:
        args.rounds, args.calls = 4, 50
    gaps = [float(g) for g in args.gaps.split(",") if g.strip()]
    check_installed()
    info = banner("gaps", args)
    makers = {"Mooncake's": their_store, "Client": our_client, "drop-in": dropin_store}
    sides = list(makers)
    times: dict[float, dict[str, list[float]]] = {g: {s: [] for s in sides} for g in gaps}
    with cluster(args.segment, args.pin) as local:
        sets = mirrored_sets(sides, lambda side: makers[side](local), args.instances)
        sets[0]["drop-in"].put(KEY, b"v" * 4096)
        calls = [{side: _calls(side, stores[side]) for side in sides} for stores in sets]
        try:
            for r in range(args.rounds + 1):  # round 0 warms up
                one = calls[r % len(calls)]
                order = sides if r % 2 == 0 else sides[::-1]
                for gap in gaps:
                    for side in order:
                        t = timed(one[side], args.calls, gap * 1e-6)
                        if r:
                            times[gap][side].append(t)
        finally:
            for stores in sets:
                for store in stores.values():
                    store.close()
    rows, cells = [], []
    for gap in gaps:
        theirs = times[gap]["Mooncake's"]
        base = statistics.median(theirs)
        row: list[Any] = [f"{gap:g}", f"{base * 1e6:.1f}"]
        for side in sides[1:]:
            mine = times[gap][side]
            paired = [a / b for a, b in zip(mine, theirs, strict=True)]
            ratio = statistics.median(mine) / base
            row.append(
                f"{statistics.median(mine) * 1e6:.1f} ({ratio:.2f}; "
                f"{quantile(paired, 0.1):.2f}..{quantile(paired, 0.9):.2f})"
            )
            cells.append(
                {
                    "gap_us": gap,
                    "side": side,
                    "us": statistics.median(mine) * 1e6,
                    "theirs_us": base * 1e6,
                    "ratio": ratio,
                    "p10": quantile(paired, 0.1),
                    "p90": quantile(paired, 0.9),
                }
            )
        rows.append(row)
    headers = ["gap us", "Mooncake's us", "Client us (ratio; p10..p90)", "drop-in us (ratio; ...)"]
    table(headers, rows, title=f"\none-key exists, {args.rounds} rounds of {args.calls} calls")
    write_json("gaps", {"args": vars(args) | {"out": None}, "cells": cells}, args.out, info)


if __name__ == "__main__":
    sys.exit(main())
