"""Prefix lookups: Client.lookup_prefix against Client.batch_exists over the same 1,024 keys.

For a first miss at key 1, 64, 512 and none, both calls run alternately on the same keys;
printed per case: the median time of each, their ratio, and how many keys Mooncake was asked
(from the shim's per-operation counters: each key asked renews its read lease).

    .venv/bin/python bench/prefix.py [--rounds N] [--quick]
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from _common import banner, check_installed, cluster, our_client, parser, pc, table, write_json

N_KEYS = 1024
MISSES = {"miss at 1": 1, "miss at 64": 64, "miss at 512": 512, "no miss": None}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200, help="timed rounds per case (default 200)")
    args = p.parse_args()
    rounds = 20 if args.quick else args.rounds
    check_installed()
    info = banner("prefix", args)
    results: dict[str, dict[str, Any]] = {}
    with cluster(args.segment, args.pin) as local:
        c = our_client(local)
        keys = [f"prefix-bench/chunk-{i:05d}" for i in range(N_KEYS)]
        c.batch_put(keys, [b"v" * 64] * N_KEYS)
        try:
            for name, miss in MISSES.items():
                probe = list(keys)
                if miss is not None:
                    probe[miss] = "prefix-bench/absent"
                times: dict[str, list[float]] = {"lookup_prefix": [], "batch_exists": []}
                asked: dict[str, int] = {}
                for r in range(rounds + 2):
                    order = ("lookup_prefix", "batch_exists")
                    for what in order if r % 2 == 0 else order[::-1]:
                        before = c.op_stats()["exists"]["keys"]
                        t0 = pc()
                        if what == "lookup_prefix":
                            got = c.lookup_prefix(probe)
                        else:
                            found = c.batch_exists(probe)
                            got = found.index(False) if False in found else len(found)
                        dt = pc() - t0
                        asked[what] = c.op_stats()["exists"]["keys"] - before
                        assert got == (N_KEYS if miss is None else miss), (what, got)
                        if r >= 2:
                            times[what].append(dt)
                lp = statistics.median(times["lookup_prefix"])
                be = statistics.median(times["batch_exists"])
                results[name] = {
                    "lookup_prefix_ms": lp * 1e3,
                    "batch_exists_ms": be * 1e3,
                    "ratio": lp / be,
                    "keys_asked_lookup_prefix": asked["lookup_prefix"],
                    "keys_asked_batch_exists": asked["batch_exists"],
                }
        finally:
            c.batch_remove(keys, force=True)
            c.close()
    rows = [
        [
            name,
            r["lookup_prefix_ms"],
            r["batch_exists_ms"],
            f"{r['ratio']:.2f}",
            r["keys_asked_lookup_prefix"],
            r["keys_asked_batch_exists"],
        ]
        for name, r in results.items()
    ]
    table(
        ["1,024 keys", "lookup_prefix ms", "batch_exists ms", "ratio", "asked", "asked (exists)"],
        rows,
        title="lookup_prefix vs batch_exists (median of alternating rounds)",
    )
    write_json("prefix", {"rounds": rounds, "results": results}, args.out, info)


if __name__ == "__main__":
    sys.exit(main())
