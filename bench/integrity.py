"""What verified values cost: 64 x 1 MiB batch puts and gets with and without ``integrity``.

Two clients of one cluster, one with ``"integrity": "crc32c"`` and one without, alternate
round by round (the order flips each round).  Each round stores ``--keys`` fresh values of
``--value-size`` bytes with one batch call and reads them back with one batch call, through
the zero-copy calls (``put_from`` / ``get_into``) and through the bytes API (``batch_put`` /
``batch_get``), then force-removes them (untimed).  Printed: GiB/s (median of rounds) and
the ratio verified / unverified of each round's throughput, median with p10-p90.  Then the
latency of one ``put`` and one ``put_if_absent`` of 1 MiB (fresh keys, so uncontended: the
first-writer check's read-back is all it adds), each with and without integrity.

    .venv/bin/python bench/integrity.py           # full run (~1 min)
    .venv/bin/python bench/integrity.py --quick
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from _common import (
    Arena,
    MiB,
    banner,
    cluster,
    ms_list,
    our_client,
    parser,
    pc,
    table,
    warm_segment,
    write_json,
)

from mooncake_cffi import Client

MODES = ("none", "crc32c")


def _keys(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"integ-{tag}-{i}" for i in range(n)]


def _zero_copy(c: Client, src: Arena, dst: Arena, size: int) -> tuple[float, float]:
    keys = _keys(src.n)
    t0 = pc()
    res = c.put_from(keys, src.views())
    t1 = pc()
    got = c.get_into(keys, dst.views())
    t2 = pc()
    assert res == [0] * src.n and got == [size] * src.n, (res[:3], got[:3])
    c.batch_remove(keys, force=True)
    return t1 - t0, t2 - t1


def _bytes_api(c: Client, values: list[bytes]) -> tuple[float, float]:
    keys = _keys(len(values))
    t0 = pc()
    c.batch_put(keys, values)
    t1 = pc()
    got = c.batch_get(keys)
    t2 = pc()
    assert [len(g or b"") for g in got] == [len(v) for v in values]
    c.batch_remove(keys, force=True)
    return t1 - t0, t2 - t1


def _spread(xs: list[float]) -> tuple[float, float, float]:
    a = np.asarray(xs)
    return float(np.percentile(a, 10)), float(np.median(a)), float(np.percentile(a, 90))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--keys", type=int, default=64)
    p.add_argument("--value-size", type=int, default=MiB)
    p.add_argument("--single", type=int, default=60, help="put / put_if_absent calls each")
    args = p.parse_args()
    rounds = 4 if args.quick else args.rounds
    single = 10 if args.quick else args.single
    info = banner("integrity", args)
    n, size = args.keys, args.value_size
    src, dst = Arena(n, size), Arena(n, size, fill=0)
    values = [bytes(v) for v in src.views()]
    samples: dict[str, dict[str, list[float]]] = {
        m: {"put_from": [], "get_into": [], "batch_put": [], "batch_get": []} for m in MODES
    }
    singles: dict[str, list[float]] = {}
    with cluster(args.segment, args.pin) as local:
        clients: dict[str, Any] = {
            "none": our_client(local),
            "crc32c": Client(local.client_config(integrity="crc32c")),
        }
        try:
            warm_segment(clients["none"], 4 * n * size)
            for m in MODES:  # warm both paths once, untimed
                _zero_copy(clients[m], src, dst, size)
                _bytes_api(clients[m], values)
            for r in range(rounds):
                for m in MODES if r % 2 == 0 else MODES[::-1]:
                    put, get = _zero_copy(clients[m], src, dst, size)
                    samples[m]["put_from"].append(put)
                    samples[m]["get_into"].append(get)
                    put, get = _bytes_api(clients[m], values)
                    samples[m]["batch_put"].append(put)
                    samples[m]["batch_get"].append(get)
            one = values[0]
            for r in range(single):
                for m in MODES if r % 2 == 0 else MODES[::-1]:
                    c = clients[m]
                    for call in ("put", "put_if_absent"):
                        k = _keys(1)[0]
                        t0 = pc()
                        getattr(c, call)(k, one)
                        singles.setdefault(f"{call} {m}", []).append(pc() - t0)
                        c.remove(k, force=True)
        finally:
            for c in clients.values():
                c.close()
    gib = n * size / (1 << 30)
    rows = []
    for call in ("put_from", "get_into", "batch_put", "batch_get"):
        plain = [gib / s for s in samples["none"][call]]
        verified = [gib / s for s in samples["crc32c"][call]]
        ratios = [v / u for v, u in zip(verified, plain)]
        lo, mid, hi = _spread(ratios)
        rows.append(
            [
                call,
                f"{np.median(plain):.2f}",
                f"{np.median(verified):.2f}",
                f"{mid:.3f}",
                f"{lo:.3f}-{hi:.3f}",
            ]
        )
    table(
        ["call", "GiB/s none", "GiB/s crc32c", "ratio", "p10-p90"],
        rows,
        f"{n} x {size // MiB} MiB, {rounds} alternating rounds",
    )
    srows = []
    for name, xs in singles.items():
        lo, mid, hi = _spread(xs)
        srows.append([name, f"{mid * 1e3:.3f}", f"{lo * 1e3:.3f}-{hi * 1e3:.3f}"])
    table(["1 MiB call", "ms median", "p10-p90"], srows, "uncontended single writes")
    write_json(
        "integrity",
        {
            "rounds": rounds,
            "keys": n,
            "value_size": size,
            "samples_ms": {m: {c: ms_list(v) for c, v in d.items()} for m, d in samples.items()},
            "singles_ms": {k: ms_list(v) for k, v in singles.items()},
        },
        args.out,
        info,
    )


if __name__ == "__main__":
    main()
