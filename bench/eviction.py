"""Eviction under pressure: several writer processes fill a cluster's segment past its size.

For each class (the drop-in as a stack gets it, and Mooncake's own), on a cluster of its
own with Mooncake's eviction on (the master's default), ``--writers`` processes (spawned)
store ``--fill`` times the segment's capacity between them, in values of 64 KiB - 1 MiB.
After each put a writer reads one of its recent keys and one older key back, by turns with
``get`` and with ``get_into`` into a registered buffer. Every value describes itself (its
key's hash, its length and a pattern drawn from both), so a read is judged byte by byte:

- a put is stored (0) or answered with an error code (counted by Mooncake's name: the
  segment full, ``NO_AVAILABLE_HANDLE``, is the expected one);
- a read returns its key's value exactly, or a miss (evicted); anything else is **wrong**;
- a call that takes over ``--stall`` seconds is a **stall**;
- the hit ratio of recent keys (written within the last quarter of the segment's size, all
  writers together) and of older ones says what eviction keeps.

    .venv/bin/python bench/eviction.py [--writers 3] [--fill 3] [--segment "256 MB"]
                                       [--impls ours,theirs] [--quick] [--json]

``--json`` prints the summary as one JSON line (what tests/test_eviction.py reads).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import multiprocessing as mp
import random
import sys
import time
from typing import Any

from _common import banner, cluster, parser, spawned_store, table, write_json

from mooncake_cffi.sizes import parse_size
from mooncake_cffi.status import name as status_name

SIZES = [64 << 10, 256 << 10, 1 << 20]
HEADER = 24


def value_of(key: str, size: int) -> bytes:
    """The value stored under ``key``: its digest and length, then a pattern of both."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    head = digest + size.to_bytes(8, "little")
    body = (digest * (size // 16 + 1))[: size - HEADER]
    return head + body


def writer(impl: str, index: int, metadata: str, master: str, nbytes: int, recent_window: int,
           stall: float, seed: int, out: Any) -> None:  # fmt: skip
    """One writer process: puts ``nbytes`` of self-describing values, reading back as it
    goes (a key is recent while this writer has written less than ``recent_window`` bytes
    since); puts its tallies on ``out``."""
    rng = random.Random(seed * 1000 + index)
    store = spawned_store(impl, metadata, master)
    buf = (ctypes.c_char * max(SIZES))()
    ptr = ctypes.addressof(buf)
    store.register_buffer(ptr, len(buf))
    written: list[tuple[str, int, int]] = []  # (key, size, bytes written before it)
    tally: dict[str, Any] = {
        "puts": 0, "put_codes": {}, "reads": 0, "wrong": [], "stalls": [], "slowest_s": 0.0,
        "recent": [0, 0], "older": [0, 0], "bytes_stored": 0,
    }  # fmt: skip
    sent = 0

    def timed(what: str, call: Any) -> Any:
        start = time.monotonic()
        result = call()
        took = time.monotonic() - start
        tally["slowest_s"] = max(tally["slowest_s"], took)
        if took > stall:
            tally["stalls"].append(f"{what} {took:.2f} s")
        return result

    def read(key: str, size: int, mode: str) -> bool:
        if mode == "get":
            got = timed("get", lambda: store.get(key))
        else:
            n = timed("get_into", lambda: store.get_into(key, ptr, len(buf)))
            got = ctypes.string_at(ptr, n) if n > 0 else b""
        tally["reads"] += 1
        if not got:
            return False
        if got != value_of(key, size):
            tally["wrong"].append(f"{mode} {key}: {len(got)} bytes, not its {size}")
        return True

    i = 0
    while sent < nbytes:
        size = rng.choice(SIZES)
        key = f"ev-{impl}-{seed}-{index}-{i}"
        value = value_of(key, size)
        rc = timed("put", lambda: store.put(key, value))  # noqa: B023 - called at once
        tally["puts"] += 1
        code = "stored" if rc == 0 else status_name(rc)
        tally["put_codes"][code] = tally["put_codes"].get(code, 0) + 1
        if rc == 0:
            written.append((key, size, sent))
            tally["bytes_stored"] += size
        sent += size
        i += 1
        if not written:
            continue
        mode = "get" if i % 2 else "get_into"
        recent = [w for w in written[-32:] if sent - w[2] <= recent_window]
        if recent:
            k, s, _ = rng.choice(recent)
            tally["recent"][0 if read(k, s, mode) else 1] += 1
        older = [w for w in written[: max(0, len(written) - 32)] if sent - w[2] > recent_window]
        if older:
            k, s, _ = rng.choice(older)
            tally["older"][0 if read(k, s, mode) else 1] += 1
    store.unregister_buffer(ptr)
    store.close()
    out.put((index, tally))


def run(
    impl: str, segment: str, writers: int, fill: float, stall: float, seed: int
) -> dict[str, Any]:
    capacity = parse_size(segment)
    each = int(capacity * fill / writers)
    recent = capacity // (4 * writers)  # all writers together: the last quarter of the segment
    with cluster(segment) as local:
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=writer,
                args=(
                    impl,
                    w,
                    local.metadata_server,
                    local.master_addr,
                    each,
                    recent,
                    stall,
                    seed,
                    out,
                ),
            )
            for w in range(writers)
        ]
        start = time.monotonic()
        for p in procs:
            p.start()
        tallies = {}
        for _ in procs:
            index, tally = out.get(timeout=900)
            tallies[index] = tally
        for p in procs:
            p.join(timeout=60)
        seconds = time.monotonic() - start
    codes: dict[str, int] = {}
    for t in tallies.values():
        for c, n in t["put_codes"].items():
            codes[c] = codes.get(c, 0) + n

    def ratio(which: str) -> float | None:
        hit = sum(t[which][0] for t in tallies.values())
        total = hit + sum(t[which][1] for t in tallies.values())
        return round(hit / total, 3) if total else None

    return {
        "impl": impl,
        "segment_bytes": capacity,
        "writers": writers,
        "fill": fill,
        "bytes_offered": each * writers,
        "seconds": round(seconds, 2),
        "puts": sum(t["puts"] for t in tallies.values()),
        "bytes_stored": sum(t["bytes_stored"] for t in tallies.values()),
        "put_codes": codes,
        "reads": sum(t["reads"] for t in tallies.values()),
        "wrong": [w for t in tallies.values() for w in t["wrong"]],
        "stalls": [s for t in tallies.values() for s in t["stalls"]],
        "slowest_s": round(max(t["slowest_s"] for t in tallies.values()), 3),
        "recent_hit_ratio": ratio("recent"),
        "older_hit_ratio": ratio("older"),
        "exits": [p.exitcode for p in procs],
    }


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--fill", type=float, default=3.0, help="bytes offered / segment size")
    p.set_defaults(segment="256 MB")
    p.add_argument("--impls", default="ours,theirs")
    p.add_argument("--stall", type=float, default=1.0, help="seconds a call counts as stalled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = p.parse_args()
    if args.quick:
        args.segment = "64 MB"
    impls = [i for i in args.impls.split(",") if i]
    if not args.json:
        banner("eviction", args)
    results = [run(i, args.segment, args.writers, args.fill, args.stall, args.seed) for i in impls]
    if args.json:
        print(json.dumps({"results": results}))
        return
    rows = [
        [
            r["impl"], r["puts"], ", ".join(f"{c} {n}" for c, n in sorted(r["put_codes"].items())),
            round(r["bytes_stored"] / r["segment_bytes"], 2), r["reads"], len(r["wrong"]),
            len(r["stalls"]), r["slowest_s"],
            r["recent_hit_ratio"], r["older_hit_ratio"], r["seconds"],
        ]
        for r in results
    ]  # fmt: skip
    table(
        ["class", "puts", "put answers", "stored / segment", "reads", "wrong", "stalls",
         "slowest s", "recent hits", "older hits", "s"],
        rows,
        f"{args.writers} writers, {args.fill}x a {args.segment} segment",
    )  # fmt: skip
    for r in results:
        for line in (r["wrong"] + r["stalls"])[:10]:
            print(f"  {r['impl']}: {line}")
    write_json("eviction", {"results": results}, args.out)
    sys.exit(1 if any(r["wrong"] for r in results) else 0)


if __name__ == "__main__":
    main()
