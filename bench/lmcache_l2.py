"""LMCache's ``lmcache bench l2`` through our plugins against our own Client, same run.

Each repetition runs, in turn (the order rotates each repetition):

* ``plugin``        - ``lmcache bench l2`` with ``"type": "plugin"`` (MooncakeL2Adapter);
* ``native_plugin`` - ``lmcache bench l2`` with ``"type": "native_plugin"`` (LMCache's
  NativeConnectorL2Adapter over MooncakeConnector);
* ``client``        - our ``Client.put_from`` / ``batch_exists`` / ``get_into`` on the
  same number of keys of the same size, with the same rounds, into ``torch.empty``
  buffers as lmcache bench l2 uses: the baseline.

``lmcache bench l2`` times each round from the first submit to the last completion it sees
(store, lookup with every key present, load), after ``--warmup-rounds``; the client rounds
are timed the same way around one blocking call.  Each run stores under fresh keys, and its
keys are force-removed afterwards (untimed), so stores always move data.  Throughput is
MiB/s of the median round (the machine is shared: medians resist the noise), averaged over
repetitions; the ratio to the client run of the same repetition (median over repetitions)
is the figure to watch (target >= 0.9).  Lookup
latency is the duration of one lookup round of ``--num-keys`` keys.

Run with the LMCache virtualenv's python (``scripts/install_lmcache.sh`` prints its path):

    $(scripts/install_lmcache.sh | tail -1)/bin/python bench/lmcache_l2.py
    .../bin/python bench/lmcache_l2.py --quick
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    Arena,
    MiB,
    banner,
    cluster,
    our_client,
    parser,
    pc,
    ratio,
    table,
    warm_segment,
    write_json,
)

LMCACHE = Path(sys.executable).with_name("lmcache")
ENV = dict(os.environ, LMCACHE_DISABLE_BANNER="1", PYTHONWARNINGS="ignore")
if "--omp-default" not in sys.argv:
    # lmcache bench l2 zeroes its load buffers with torch right before each timed round; idle
    # OpenMP threads may spin after that and take a core (of two) from the timed transfer.
    # Not shown to matter here (the load gap was the buffers' page size, see TorchArena), but
    # one thread keeps the possibility out of the figures.
    ENV["OMP_NUM_THREADS"] = "1"
KINDS = {"plugin": "MooncakeL2Adapter", "native_plugin": "MooncakeConnector"}


def lmcache_bench(local: Any, kind: str, prefix: str, args: Any) -> dict[str, Any]:
    """One ``lmcache bench l2`` run; its JSON result by operation name."""
    spec = {
        "type": kind,
        "module_path": "mooncake_cffi.lmcache",
        "class_name": KINDS[kind],
        "adapter_params": local.client_config(key_prefix=prefix),
    }
    cmd = [
        str(LMCACHE),
        "bench",
        "l2",
        "--l2-adapter",
        json.dumps(spec),
        "--num-keys",
        str(args.num_keys),
        "--data-size-kb",
        str(args.value_kb),
        "--rounds",
        str(args.rounds),
        "--warmup-rounds",
        "1",
        "--lookup-max-hit-rate",
        "1.0",
        "--format",
        "json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"lmcache bench l2 ({kind}) failed:\n{done.stdout}\n{done.stderr}")
    text = done.stdout[done.stdout.index('{\n  "title"') :]
    metrics = json.JSONDecoder().raw_decode(text)[0]["metrics"]
    ops = {v["operation"].lower(): v for k, v in metrics.items() if k.startswith("op_")}
    for op in ("store", "load"):
        expected = ops[op]["total_keys"]
        if ops[op]["total_success"] != expected:
            raise SystemExit(f"{kind}: {op} succeeded for {ops[op]['total_success']}/{expected}")
    mib = args.num_keys * args.value_kb / 1024
    return {
        "store_mibps": mib / (ops["store"]["duration_p50_ms"] / 1e3),
        "load_mibps": mib / (ops["load"]["duration_p50_ms"] / 1e3),
        "lookup_p50_ms": ops["lookup"]["duration_p50_ms"],
        "lookup_p99_ms": ops["lookup"]["duration_p99_ms"],
        "lookup_found": ops["lookup"]["total_success"] / ops["lookup"]["total_keys"],
    }


class TorchArena:
    """``n`` slots of ``size`` bytes in one ``torch.empty`` buffer, like lmcache bench l2's.

    numpy asks the kernel for transparent huge pages on large arrays (``madvise``) and
    torch does not; reads into huge pages ran 1.2-1.4x faster here, so the baseline must
    use the same kind of memory as LMCache's benchmark.
    """

    def __init__(self, n: int, size: int, fill: int | None = None) -> None:
        import torch

        self.size = size
        self._tensor = torch.empty(n * size, dtype=torch.uint8)
        self.buf = self._tensor.numpy()
        if fill is None:
            self.buf[:] = np.random.default_rng(1234).integers(0, 256, n * size, dtype=np.uint8)
        else:
            self.buf[:] = fill

    def views(self) -> list[np.ndarray]:
        n = len(self.buf) // self.size
        return [self.buf[i * self.size : (i + 1) * self.size] for i in range(n)]


def client_bench(local: Any, prefix: str, args: Any) -> dict[str, Any]:
    """The same rounds through our Client: put_from, batch_exists, get_into."""
    size = args.value_kb * 1024
    n = args.num_keys
    arena = TorchArena if args.client_buffers == "torch" else Arena
    src, dst = arena(n, size), arena(n, size, fill=0)
    rounds = args.rounds + 1  # one warm-up round, as lmcache bench l2 does
    names = [[f"{prefix}client@{r}@{i}" for i in range(n)] for r in range(rounds)]
    store, lookup, load = [], [], []
    with our_client(local) as client:
        for r in range(rounds):
            t = pc()
            status = client.put_from(names[r], src.views())
            store.append(pc() - t)
            assert all(s == 0 for s in status), status
        for r in range(rounds):
            t = pc()
            found = client.batch_exists(names[r])
            lookup.append(pc() - t)
            assert all(found)
        for r in range(rounds):
            dst.buf[:] = 0  # as lmcache bench l2 zeroes its load buffers (untimed)
            t = pc()
            got = client.get_into(names[r], dst.views())
            load.append(pc() - t)
            assert got == [size] * n, got[:4]
        assert bytes(dst.buf[:size]) == bytes(src.buf[:size])

    def mibps(samples: list[float]) -> float:
        return n * size / MiB / statistics.median(samples[1:])

    ms = sorted(s * 1e3 for s in lookup[1:])
    return {
        "store_mibps": mibps(store),
        "load_mibps": mibps(load),
        "lookup_p50_ms": ms[len(ms) // 2],
        "lookup_p99_ms": ms[-1],
        "lookup_found": 1.0,
    }


def remove_prefix(local: Any, prefix: str) -> None:
    with urllib.request.urlopen(local.metrics_url + "/get_all_keys", timeout=10) as r:
        keys = [k for k in r.read().decode().split() if k.startswith(prefix)]
    if keys:
        with our_client(local) as client:
            for i in range(0, len(keys), 256):
                client.batch_remove(keys[i : i + 256], force=True)


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7, help="repetitions of each variant")
    p.add_argument("--num-keys", type=int, default=64, help="keys per batch (one batch a round)")
    p.add_argument("--value-kb", type=int, default=1024, help="KiB per value")
    p.add_argument("--rounds", type=int, default=5, help="measured rounds per operation")
    p.add_argument(
        "--client-buffers",
        choices=["torch", "numpy"],
        default="torch",
        help="memory of the client's buffers: torch.empty like lmcache bench l2 (default), "
        "or numpy (transparent huge pages: faster reads, an unfair baseline)",
    )
    p.add_argument(
        "--omp-default",
        action="store_true",
        help="leave OMP_NUM_THREADS alone in lmcache bench l2 (default: 1, see above)",
    )
    args = p.parse_args()
    if args.quick:
        args.reps, args.rounds, args.num_keys, args.value_kb = 1, 2, 16, 256
    if not LMCACHE.exists():
        raise SystemExit(f"no lmcache next to {sys.executable}: run with the LMCache venv")
    info = banner("lmcache_l2", args)
    variants = ["plugin", "native_plugin", "client"]
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with cluster(args.segment, args.pin) as local:
        with our_client(local) as warm:
            warm_segment(warm, 2 * args.num_keys * args.value_kb * 1024 * (args.rounds + 1))
        for rep in range(args.reps):
            order = variants[rep % 3 :] + variants[: rep % 3]
            for v in order:
                prefix = f"bench-{uuid.uuid4().hex[:8]}/"
                result = (
                    client_bench(local, prefix, args)
                    if v == "client"
                    else lmcache_bench(local, v, prefix, args)
                )
                runs[v].append(result)
                remove_prefix(local, prefix)
                print(f"rep {rep} {v}: {result}", flush=True)

    def avg(v: str, field: str) -> float:
        return statistics.mean(r[field] for r in runs[v])

    def vs_client(v: str, field: str) -> float:
        """Median over repetitions of the ratio to the client run of the same repetition."""
        return statistics.median(
            ratio(r[field], c[field]) for r, c in zip(runs[v], runs["client"], strict=True)
        )

    rows = []
    for v in variants:
        rows.append(
            [
                v,
                avg(v, "store_mibps"),
                vs_client(v, "store_mibps"),
                avg(v, "load_mibps"),
                vs_client(v, "load_mibps"),
                avg(v, "lookup_p50_ms"),
                avg(v, "lookup_p99_ms"),
            ]
        )
    table(
        [
            "variant",
            "store MiB/s",
            "x client",
            "load MiB/s",
            "x client",
            "lookup p50 ms",
            "lookup p99 ms",
        ],
        rows,
        title=(
            f"{args.num_keys} keys x {args.value_kb} KiB a batch, {args.rounds} rounds, "
            f"{args.reps} reps; x client: median of the per-repetition ratios; lookup: one batch "
            f"of {args.num_keys} keys"
        ),
    )
    write_json("lmcache_l2", {"args": vars(args) | {"out": None}, "runs": runs}, args.out, info)


if __name__ == "__main__":
    main()
