"""Node health: what a lookup costs with every node up, and how long a failed node's keys
are still promised, for Mooncake's class and the drop-in with its defaults (no options, as
a stack gets it).

Part 1, lookups after an idle gap: ``batch_is_exist`` of ``--batch`` stored keys after a
``--gap-ms`` sleep, the two classes alternating round by round, with ``--fill`` more keys in
the store. Printed: each median, the drop-in's ratio to Mooncake's and the p10..p90 of the
per-round paired ratios, and the health monitor's traffic over the part (probe reads per
storage node per second, replica queries per second).

Part 2, the stale-hit window: on a fresh cluster per trial, both classes look up 16 stored
keys every ``--poll-ms``; the storage node is killed (SIGKILL) or frozen (SIGSTOP); printed
per class, the seconds from the fault to the first lookup that promises none of the keys
(Mooncake's class: until the master drops the node at its client TTL, 10 s by default), and
the slowest lookup meanwhile. ``--trials`` of each fault.

    .venv/bin/python bench/health.py [--rounds N] [--fill N] [--trials N] [--quick]
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
from typing import Any

from _common import (
    banner,
    check_installed,
    cluster,
    dropin_store,
    parser,
    quantile,
    table,
    their_store,
    write_json,
)

SIDES = ("Mooncake's", "drop-in")


def lookups(args: Any, info: dict[str, Any]) -> dict[str, Any]:
    with cluster(args.segment, args.pin) as local:
        stores = {"Mooncake's": their_store(local), "drop-in": dropin_store(local)}
        try:
            writer = stores["drop-in"]
            keys = [f"health/k{i}" for i in range(args.batch)]
            for k in keys:
                writer.put(k, b"v" * 4096)
            filler = [f"health/fill{i}" for i in range(args.fill)]
            for i in range(0, len(filler), 512):
                chunk = filler[i : i + 512]
                writer.put_batch(chunk, [b"f" * 64] * len(chunk))
            times: dict[str, list[float]] = {s: [] for s in SIDES}
            live = writer._x.live
            probes0, checks0, t0 = live.health.probes, live.checks, time.monotonic()
            for r in range(args.rounds + 1):  # round 0 warms up
                order = SIDES if r % 2 == 0 else SIDES[::-1]
                for side in order:
                    store = stores[side]
                    samples = []
                    for _ in range(args.calls):
                        time.sleep(args.gap_ms / 1000)
                        start = time.perf_counter()
                        answer = store.batch_is_exist(keys)
                        samples.append(time.perf_counter() - start)
                        if answer != [1] * len(keys):
                            raise RuntimeError(f"{side}: lookup answered {answer}")
                    if r:
                        times[side].append(statistics.median(samples))
            elapsed = time.monotonic() - t0
            nodes = max(1, len(live.health.states()))
            traffic = {
                "probes_per_node_s": (live.health.probes - probes0) / elapsed / nodes,
                "checks_per_s": (live.checks - checks0) / elapsed,
            }
        finally:
            for store in stores.values():
                store.close()
    theirs, ours = times["Mooncake's"], times["drop-in"]
    paired = [a / b for a, b in zip(ours, theirs, strict=True)]
    cell = {
        "theirs_ms": statistics.median(theirs) * 1e3,
        "ours_ms": statistics.median(ours) * 1e3,
        "ratio": statistics.median(ours) / statistics.median(theirs),
        "p10": quantile(paired, 0.1),
        "p90": quantile(paired, 0.9),
        **traffic,
    }
    table(
        [
            "keys in store",
            "Mooncake's ms",
            "drop-in ms",
            "ratio (p10..p90)",
            "probes/node/s",
            "checks/s",
        ],  # fmt: skip
        [
            [
                args.fill + args.batch,
                f"{cell['theirs_ms']:.3f}",
                f"{cell['ours_ms']:.3f}",
                f"{cell['ratio']:.2f} ({cell['p10']:.2f}..{cell['p90']:.2f})",
                f"{cell['probes_per_node_s']:.1f}",
                f"{cell['checks_per_s']:.2f}",
            ]
        ],  # fmt: skip
        title=f"\nbatch_is_exist of {args.batch} keys after a {args.gap_ms:g} ms gap, "
        f"{args.rounds} rounds of {args.calls}",
    )
    return cell


def window(args: Any, fault: str) -> dict[str, Any]:
    """One trial: seconds until each class stops promising the failed node's keys."""
    with cluster("256 MB", args.pin) as local:
        stores = {"Mooncake's": their_store(local), "drop-in": dropin_store(local)}
        pid = local.pids["storage"]
        try:
            keys = [f"window/k{i}" for i in range(16)]
            for k in keys:
                stores["drop-in"].put(k, b"w" * 32768)
            deadline = time.monotonic() + 10
            while not stores["drop-in"]._x.live.trusted():  # the monitor knows the node
                stores["drop-in"].batch_is_exist(keys)
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            out: dict[str, Any] = {s: {"window_s": None, "slowest_s": 0.0} for s in SIDES}
            faulted = time.monotonic()
            os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            while time.monotonic() - faulted < args.limit:
                pending = [s for s in SIDES if out[s]["window_s"] is None]
                if not pending:
                    break
                for side in pending:
                    start = time.monotonic()
                    answer = stores[side].batch_is_exist(keys)
                    end = time.monotonic()
                    out[side]["slowest_s"] = max(out[side]["slowest_s"], end - start)
                    if 1 not in answer:
                        out[side]["window_s"] = end - faulted
                time.sleep(args.poll_ms / 1000)
        finally:
            if fault == "freeze":
                os.kill(pid, signal.SIGCONT)
            for store in stores.values():
                store.close()
    return out


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="rounds of part 1 (%(default)s)")
    p.add_argument("--calls", type=int, default=50, help="lookups per class and round")
    p.add_argument("--batch", type=int, default=16, help="keys per lookup (%(default)s)")
    p.add_argument("--fill", type=int, default=1000, help="more keys in the store")
    p.add_argument("--gap-ms", type=float, default=10.0, help="idle gap before a lookup")
    p.add_argument("--trials", type=int, default=3, help="trials of each fault (part 2)")
    p.add_argument("--poll-ms", type=float, default=5.0, help="lookups' period in part 2")
    p.add_argument("--limit", type=float, default=20.0, help="seconds a trial watches")
    p.add_argument("--faults", default="kill,freeze", help="part 2's faults (%(default)s)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.calls, args.trials = 4, 20, 1
    check_installed()
    info = banner("health", args)
    cell = lookups(args, info)
    rows, trials = [], []
    for fault in [f for f in args.faults.split(",") if f]:
        for t in range(args.trials):
            out = window(args, fault)
            trials.append({"fault": fault, "trial": t, **out})
            rows.append(
                [fault, t]
                + [
                    f"{out[s]['window_s']:.2f}"
                    if out[s]["window_s"] is not None
                    else f"> {args.limit:g}"
                    for s in SIDES
                ]  # fmt: skip
                + [f"{out[s]['slowest_s']:.3f}" for s in SIDES]
            )
    table(
        [
            "fault",
            "trial",
            "Mooncake's window s",
            "drop-in window s",
            "Mooncake's slowest s",
            "drop-in slowest s",
        ],  # fmt: skip
        rows,
        title="\nstale-hit window: from the fault to the first lookup promising none of its keys",
    )
    write_json("health", {"args": vars(args) | {"out": None}, "lookups": cell,
                          "trials": trials}, args.out, info)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
