"""`mcl2 bench` against the library calls it makes, timed by this script, on one cluster.

For each shape (16 x 4 KiB, 256 x 4 KiB, 64 x 64 KiB) and round, alternating which goes
first: `mcl2 bench --json` in a subprocess (puts of 40 batches of fresh keys; gets and
exists of one batch read 40 times), and the same calls timed here in-process (`put_from`
of fresh keys, `get_into`, `batch_exists`: what `mcl2 bench` calls, also what
bench/batches.py times).  Printed per shape and operation: both p50 call latencies, and
mcl2 bench's keys/s over ours at p50 and over the whole pass (the pass includes the tail).

    .venv/bin/python bench/cli_bench.py [--rounds N] [--quick] [--pin split|none]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import (
    KiB,
    banner,
    check_installed,
    cluster,
    our_client,
    parser,
    pc,
    table,
    warm_segment,
    write_json,
)

SHAPES = [("16 x 4 KiB", 16, 4 * KiB), ("256 x 4 KiB", 256, 4 * KiB), ("64 x 64 KiB", 64, 64 * KiB)]
OPS = ("put", "get", "exists")
CALLS = 40


def mcl2_bench(state_dir: str, n: int, size: int, tag: str) -> dict[str, dict[str, float]]:
    """{op: {"p50_us", "keys_per_s"}} of two `mcl2 bench` runs (put; get and exists)."""
    exe = shutil.which("mcl2", path=str(Path(sys.executable).parent)) or "mcl2"
    env = {**os.environ, "MCL2_STATE_DIR": state_dir}
    out: dict[str, dict[str, float]] = {}
    runs = [
        ["--ops", "put", "-n", str(n * CALLS)],
        ["--ops", "get,exists", "-n", str(n), "-r", str(CALLS)],
    ]
    for i, extra in enumerate(runs):
        argv = [exe, "bench", "-b", str(n), "--size", str(size), "--json", *extra]
        argv += ["--prefix", f"cli-bench/{tag}-{i}/"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"mcl2 bench failed ({done.returncode}): {done.stderr.strip()}")
        for r in json.loads(done.stdout)["results"]:
            out[r["op"]] = {"p50_us": r["latency_us"]["p50"], "keys_per_s": r["ops_per_s"]}
    return out


def in_process(client: Any, n: int, size: int, tag: str) -> dict[str, dict[str, float]]:
    """The same calls as mcl2 bench's, timed here."""
    value = os.urandom(size)
    buf = bytearray(n * size)
    view = memoryview(buf)
    scratch = [view[i * size : (i + 1) * size] for i in range(n)]
    out: dict[str, dict[str, float]] = {}
    keys = [f"cli-bench/{tag}-lib/{i:08d}".encode() for i in range(n * CALLS)]
    lat: list[float] = []
    for c in range(CALLS):
        batch = keys[c * n : (c + 1) * n]
        t0 = pc()
        client.put_from(batch, [value] * n, timeout=None)
        lat.append(pc() - t0)
    out["put"] = _figures(lat, n)
    first = keys[:n]
    for op, call in (
        ("get", lambda: client.get_into(first, scratch, timeout=None)),
        ("exists", lambda: client.batch_exists(first, timeout=None)),
    ):
        call()
        call()  # mcl2 bench's two untimed calls
        lat = []
        for _ in range(CALLS):
            t0 = pc()
            call()
            lat.append(pc() - t0)
        out[op] = _figures(lat, n)
    for i in range(0, len(keys), 1024):
        client.batch_remove(keys[i : i + 1024], force=True)
    return out


def _figures(lat: list[float], n: int) -> dict[str, float]:
    return {"p50_us": statistics.median(lat) * 1e6, "keys_per_s": n * len(lat) / sum(lat)}


def main() -> None:
    p = parser(__doc__.splitlines()[0], pin="split")
    p.add_argument("--rounds", type=int, default=5, help="rounds per shape (default 5)")
    args = p.parse_args()
    rounds = 2 if args.quick else args.rounds
    check_installed()
    info = banner("cli_bench", args)
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    with cluster(args.segment, args.pin) as local:
        client = our_client(local)
        warm_segment(client, 512 << 20)
        try:
            for r in range(rounds):
                for name, n, size in SHAPES:
                    tag = f"{n}x{size}-{r}"
                    sides = [
                        ("mcl2", mcl2_bench, str(local.state_dir)),
                        ("lib", in_process, client),
                    ]
                    for side, run, target in sides if r % 2 == 0 else sides[::-1]:
                        for op, fig in run(target, n, size, tag).items():
                            cell = samples.setdefault(name, {}).setdefault(op, {})
                            for k, v in fig.items():
                                cell.setdefault(f"{side}_{k}", []).append(v)
                print(f"round {r + 1}/{rounds} done", flush=True)
        finally:
            client.close()
    rows, results = [], {}
    for name, _n, _size in SHAPES:
        for op in OPS:
            s = samples[name][op]
            med = {k: statistics.median(v) for k, v in s.items()}
            at_p50 = med["lib_p50_us"] / med["mcl2_p50_us"]
            over_pass = med["mcl2_keys_per_s"] / med["lib_keys_per_s"]
            results.setdefault(name, {})[op] = {**med, "at_p50": at_p50, "over_pass": over_pass}
            rows.append(
                [
                    name,
                    op,
                    f"{med['mcl2_p50_us']:.0f}",
                    f"{med['lib_p50_us']:.0f}",
                    f"{at_p50:.2f}",
                    f"{over_pass:.2f}",
                ]
            )
    print()
    table(
        ["shape", "op", "mcl2 p50 us", "lib p50 us", "keys/s ratio at p50", "over the pass"],
        rows,
        title=f"mcl2 bench / in-process (medians of {rounds} rounds; ratio > 1: mcl2 faster)",
    )
    write_json("cli_bench", {"rounds": rounds, "results": results}, args.out, info)


if __name__ == "__main__":
    sys.exit(main())
