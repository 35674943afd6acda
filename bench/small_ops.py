"""Small-operation overhead: single-key exists and 4 KiB get, ours vs Mooncake's client.

Calls run one at a time from the main thread, in alternating blocks of ``--block`` calls
(the order rotates each block), against one key holding ``--value-size`` bytes:

* ``exists``: ``Client.exists(key)`` vs ``MooncakeDistributedStore.is_exist(key)``;
* ``get``: ``Client.get_into([key], [buf])`` (zero-copy into a preallocated buffer) vs
  ``get_into(key, ptr, size)`` into a registered buffer.

Two more rows explain the gap: ``raw`` calls the shim's ``mcs_client_run`` through cffi with the key
and result arrays built once (what is left when the Python layer costs nothing), and
``get()`` is the allocating ``Client.get(key)`` (one round trip through a per-thread scratch
buffer for values up to 256 KiB), against Mooncake's allocating ``get(key)``.  A cProfile
of our ``exists`` path is stored in the JSON.

    .venv/bin/python bench/small_ops.py          # full run (~30 s)
    .venv/bin/python bench/small_ops.py --quick
"""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable

import numpy as np
from _common import (
    KiB,
    banner,
    cluster,
    ms_list,
    our_client,
    parser,
    pc,
    ratio,
    summarize,
    table,
    their_store,
    write_json,
)

from mooncake_cffi.capi import prepared_call


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=6000, help="calls per operation and client")
    p.add_argument("--block", type=int, default=25, help="calls per alternating block")
    p.add_argument("--value-size", type=int, default=4 * KiB)
    args = p.parse_args()
    if args.quick:
        args.calls, args.block = 600, 25
    info = banner("small_ops", args)
    vs = args.value_size

    with cluster(args.segment, args.pin) as local:
        c = our_client(local)
        theirs = their_store(local)
        key = "small-ops/key"
        value = np.random.default_rng(1).integers(0, 256, vs, dtype=np.uint8)
        c.put_from([key], [value])
        ours_buf = np.zeros(vs, dtype=np.uint8)
        their_buf = np.zeros(vs, dtype=np.uint8)
        if theirs.register_buffer(their_buf.ctypes.data, vs):
            raise RuntimeError("register_buffer failed")
        tptr = their_buf.ctypes.data

        # The shim call alone: batches built once, no Python-layer work per call.
        raw_exists = prepared_call(c, "exists", [key])
        raw_get = prepared_call(c, "get", [key], [ours_buf])

        ops: dict[str, dict[str, Callable[[], object]]] = {
            "exists": {
                "ours": lambda: c.exists(key),
                "theirs": lambda: theirs.is_exist(key),
                "raw": raw_exists,
            },
            "get": {
                "ours": lambda: c.get_into([key], [ours_buf]),
                "theirs": lambda: theirs.get_into(key, tptr, vs),
                "raw": raw_get,
                "get()": lambda: c.get(key),
                "theirs get()": lambda: theirs.get(key),
            },
        }
        # sanity: every variant works
        assert c.exists(key) and theirs.is_exist(key) == 1
        assert c.get_into([key], [ours_buf]) == [vs] and theirs.get_into(key, tptr, vs) == vs
        assert c.get(key) == value.tobytes() and bytes(ours_buf) == value.tobytes()
        assert bytes(theirs.get(key)) == value.tobytes()
        assert raw_exists() == 0 and raw_get() == 0

        lat: dict[str, dict[str, list[float]]] = {
            op: {nm: [] for nm in fns} for op, fns in ops.items()
        }
        for fns in ops.values():  # warm-up
            for fn in fns.values():
                for _ in range(50):
                    fn()
        blocks = max(1, args.calls // args.block)
        t_run = pc()
        for b in range(blocks):
            for op, fns in ops.items():
                names = list(fns)
                k = b % len(names)
                for nm in names[k:] + names[:k]:
                    fn, out = fns[nm], lat[op][nm]
                    for _ in range(args.block):
                        t0 = pc()
                        fn()
                        out.append(pc() - t0)
        run_s = pc() - t_run

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            c.exists(key)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        profile_text = s.getvalue()
        lane_stats = c.stats()
        c.close()
        theirs.close()

    summ = {op: {nm: summarize(v) for nm, v in d.items()} for op, d in lat.items()}
    rows = []
    for op, d in summ.items():
        for nm, s_ in d.items():
            rows.append(
                [
                    op,
                    nm,
                    s_["p50"] * 1e3,
                    s_["p90"] * 1e3,
                    s_["p99"] * 1e3,
                    s_["avg"] * 1e3,
                    ratio(s_["p50"], d["theirs"]["p50"]),
                    ratio(s_["p99"], d["theirs"]["p99"]),
                ]
            )
    table(
        ["op", "client", "p50 us", "p90 us", "p99 us", "avg us", "p50 / theirs", "p99 / theirs"],
        rows,
        title=f"{args.calls} calls each, alternating blocks of {args.block}; value {vs} bytes",
    )
    targets: dict[str, dict[str, object]] = {
        f"{op}_p50_ours_over_theirs": {
            "value": ratio(summ[op]["ours"]["p50"], summ[op]["theirs"]["p50"]),
            "target": "<= 1.15",
            "met": ratio(summ[op]["ours"]["p50"], summ[op]["theirs"]["p50"]) <= 1.15,
        }
        for op in ops
    }
    g = summ["get"]
    targets["get()_p50_ours_over_theirs_get()"] = {
        "value": ratio(g["get()"]["p50"], g["theirs get()"]["p50"]),
        "target": "<= 1.15",
        "met": ratio(g["get()"]["p50"], g["theirs get()"]["p50"]) <= 1.15,
    }
    for op in ops:
        targets[f"{op}_python_layer_us_p50"] = {
            "value": (summ[op]["ours"]["p50"] - summ[op]["raw"]["p50"]) * 1e3,
            "target": "report",
            "met": None,
        }
    table(
        ["target", "value", "wanted", "met"],
        [[k, v["value"], v["target"], v["met"]] for k, v in targets.items()],
        title="Targets",
    )
    print("\ncProfile of 2000 Client.exists calls (tottime):")
    print("\n".join(profile_text.splitlines()[:30]))
    write_json(
        "small_ops",
        {
            "params": {
                "calls": args.calls,
                "block": args.block,
                "value_size": vs,
                "registered": {"ours": False, "theirs": True},
                "run_seconds": run_s,
            },
            "summary_ms": summ,
            "targets": targets,
            "lane_stats": lane_stats,
            "profile_exists": profile_text,
            "samples_ms": {op: {nm: ms_list(v) for nm, v in d.items()} for op, d in lat.items()},
        },
        out=args.out,
        machine=info,
    )


if __name__ == "__main__":
    main()
