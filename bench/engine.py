"""Time to first token of a real vLLM, cold vs served from Mooncake, over prompt lengths.

A model of a few hundred MB is made on the spot (a Llama of random weights: 12 layers,
hidden 1024, 16 heads of 64, ~400 MB in bf16) so that prefill, not the engine's overhead,
dominates the longer prompts.  vLLM's own prefix cache is off: a cached token comes from
the store only.  For each prompt length, each repetition takes a new prompt and asks it
twice in the same engine: the first request is cold (a miss: prefill, then the KV stored),
the second is served from Mooncake (route a: vLLM's ``MooncakeStoreConnector``; route b:
LMCache's server with its ``mooncake_store`` L2 tier, its L1 emptied between the two so
the chunks come from Mooncake).  Reported per route and length: the median first-token
latency (vLLM's own per-request metric) of each, the ratio cold / served (median, p10-p90
over the repetitions: paired, so the machine's load drifts out), and the KV bytes one
request stored (the sizes of the keys it added, from ``mcl2 ls -l``).  ``same tokens``
counts the served requests whose output equals the cold one's.  On this model a served
2048-token prompt was seen to differ from its cold run after the first two tokens, on both
classes; route ``v`` (``--routes v``: no store, vLLM's own prefix cache on, the second
request a hit in the engine's own memory) tells whether a hit that moves no bytes through
a store differs the same way (then it is the numerics of attention over cached KV, bf16 on
a random model's nearly flat logits, not the bytes); the tests compare exact tokens on
their small model, equal.

Route a runs Mooncake's class (``theirs``) and the drop-in (``ours``,
``MOONCAKE_CFFI_DROP_IN=1``) alternately, one engine process per turn, in the same run and
on the same cluster; route b after.  One vLLM process at a time.

Run with the engine venv's python (``scripts/install_engine.sh`` prints its path):

    $(scripts/install_engine.sh | tail -1)/bin/python bench/engine.py
    .../bin/python bench/engine.py --quick
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import banner, cluster, parser, quantile, table, write_json  # noqa: E402
from engine_helpers import (  # noqa: E402
    Engine,
    LMCacheServer,
    cluster_sizes,
    make_model,
    mooncake_config,
    prompt,
    wait_for,
)
from lmcache_helpers import spec  # noqa: E402

#: The benchmark's model: ~200 M parameters (~400 MB in bf16), KV 48 KiB per token.
MODEL = {
    "layers": 12,
    "hidden": 1024,
    "heads": 16,
    "head_dim": 64,
    "intermediate": 4096,
    "vocab": 2048,
    "max_positions": 4096,
}
#: The stores' units: vLLM's connector stores 32-token blocks, LMCache 64-token chunks.
UNIT = {"a": 32, "b": 64, "v": 32}
#: How long the stored KV of a request may take to be listed (both store after the request).
STORED_S = 60.0


def _measure(
    engine: Engine,
    local: Any,
    route: str,
    lengths: list[int],
    reps: int,
    seeds: Any,
    server: LMCacheServer | None = None,
    unstored: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Cold, then served, for ``reps`` new prompts of each length; a prompt whose KV was
    not stored within STORED_S is left out, its length added to ``unstored``."""
    if unstored is None:
        unstored = []
    rows = []
    for _ in range(reps):
        for length in lengths:
            ids = prompt(next(seeds), length, MODEL["vocab"])
            before = cluster_sizes(local)
            cold = engine.generate(ids, max_tokens=4, timeout=600)
            units = length // UNIT[route]
            kv_bytes = 0
            if route != "v":  # route v stores nothing: its hit is in the engine's memory
                try:
                    after = wait_for(
                        lambda b=before, u=units: (
                            (s := cluster_sizes(local)) and len(s) - len(b) >= u and s
                        ),
                        STORED_S,
                        f"{units} keys of a {length}-token prompt stored",
                        interval=0.3,
                    )
                except AssertionError as exc:  # a save that failed (its deadline, say)
                    print(f"# {route}: {exc}; prompt left out", flush=True)
                    unstored.append(length)
                    continue
                kv_bytes = sum(size for key, size in after.items() if key not in before)
            if server is not None:
                server.clear()
            hit = engine.generate(ids, max_tokens=4, timeout=600)
            same = hit["tokens"] == cold["tokens"]
            rows.append(
                {"length": length, "cold": cold, "hit": hit, "kv_bytes": kv_bytes, "same": same}
            )
    return rows


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--lengths", default="256,512,1024,2048")
    p.add_argument("--reps", type=int, default=5, help="prompts per length per engine turn")
    p.add_argument("--turns", type=int, default=2, help="route a: engine turns per class")
    p.add_argument("--routes", default="a,b", help="a, b, v (vLLM's own prefix cache, no store)")
    p.add_argument("--model-dir", type=Path, default=None, help="reuse a model made before")
    p.add_argument("--workdir", type=Path, default=None, help="keep the logs there")
    # every route's prompts stay stored (4 engine turns of 3 x 3,840 tokens at 48 KiB a
    # token is over 2 GB): a segment that evicts would make stored prompts go missing
    p.set_defaults(segment="8 GB")
    args = p.parse_args()
    if args.quick:
        args.lengths, args.reps, args.turns = "256,1024,2048", 2, 1
    lengths = [int(x) for x in args.lengths.split(",")]
    routes = args.routes.split(",")
    info = banner("engine", args)
    results: dict[str, list[dict[str, Any]]] = {}
    starts: dict[str, list[float]] = {}
    left_out: dict[str, list[int]] = {}  # per route/store, lengths of prompts not stored
    seeds = iter(range(100_000, 10_000_000))
    max_len = max(lengths) + 64
    with tempfile.TemporaryDirectory(prefix="mcs-bench-engine-") as tmp:
        base = args.workdir or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        model = args.model_dir or base / "model"
        t = time.monotonic()
        make_model(model, **MODEL)
        print(
            f"# model: {sum(f.stat().st_size for f in model.iterdir()) / 1e6:.0f} MB, made "
            f"in {time.monotonic() - t:.0f} s",
            flush=True,
        )
        with cluster(args.segment) as local:
            if "a" in routes:
                config = mooncake_config(base / "mooncake.json", local)
                order = ["theirs", "ours"]
                for turn in range(args.turns):
                    for impl in order if turn % 2 == 0 else order[::-1]:
                        env = {
                            "MOONCAKE_CONFIG_PATH": str(config),
                            "MOONCAKE_CFFI_DROP_IN": "1" if impl == "ours" else "0",
                        }
                        log = base / f"vllm-a-{impl}-{turn}.log"
                        with Engine(model, log, "mooncake", env=env, max_model_len=max_len) as e:
                            starts.setdefault(f"a/{impl}", []).append(e.ready_s or 0.0)
                            print(
                                f"# route a, {impl}, turn {turn}: engine up in {e.ready_s:.0f} s",
                                flush=True,
                            )
                            rows = _measure(
                                e,
                                local,
                                "a",
                                lengths,
                                args.reps,
                                seeds,
                                unstored=left_out.setdefault(f"a/{impl}", []),
                            )
                            results.setdefault(f"a/{impl}", []).extend(rows)
            if "v" in routes:
                log = base / "vllm-v.log"
                with Engine(model, log, "none", max_model_len=max_len, prefix_cache=True) as e:
                    starts["v/own-prefix-cache"] = [e.ready_s or 0.0]
                    print(f"# route v: engine up in {e.ready_s:.0f} s", flush=True)
                    rows = _measure(e, local, "v", lengths, args.reps, seeds)
                    results["v/own-prefix-cache"] = rows
            if "b" in routes:
                adapter = spec("mooncake_store", local.client_config())
                server = LMCacheServer(adapter, base / "lmcache.log")
                try:
                    log = base / "vllm-b.log"
                    with Engine(
                        model, log, "lmcache", lmcache_port=server.port, max_model_len=max_len
                    ) as e:
                        starts["b/lmcache"] = [e.ready_s or 0.0]
                        print(f"# route b: engine up in {e.ready_s:.0f} s", flush=True)
                        rows = _measure(
                            e,
                            local,
                            "b",
                            lengths,
                            args.reps,
                            seeds,
                            server,
                            left_out.setdefault("b/lmcache", []),
                        )
                        results["b/lmcache"] = rows
                finally:
                    server.stop()
    table_rows = []
    for name, rows in results.items():
        for length in lengths:
            mine = [r for r in rows if r["length"] == length]
            if not mine:  # every prompt of this length left out
                continue
            cold = sorted(r["cold"]["ttft"] for r in mine)
            hit = sorted(r["hit"]["ttft"] for r in mine)
            ratios = [r["cold"]["ttft"] / r["hit"]["ttft"] for r in mine if r["hit"]["ttft"]]
            cached = sorted(r["hit"]["cached"] for r in mine)
            same = sum(r["same"] for r in mine)
            table_rows.append(
                [
                    name,
                    length,
                    len(mine),
                    quantile(cold, 0.5) * 1e3,
                    quantile(hit, 0.5) * 1e3,
                    quantile(ratios, 0.5),
                    f"{quantile(ratios, 0.1):.2f}-{quantile(ratios, 0.9):.2f}",
                    quantile(cached, 0.5),
                    quantile([r["kv_bytes"] for r in mine], 0.5) / 2**20,
                    f"{same}/{len(mine)}",
                ]
            )
    text = table(
        [
            "route/store",
            "tokens",
            "n",
            "cold ttft ms",
            "served ttft ms",
            "cold/served",
            "p10-p90",
            "cached",
            "KV MiB",
            "same tokens",
        ],
        table_rows,
        "Time to first token: cold (prefill) vs served from Mooncake (median over prompts)",
    )
    for name, lengths_out in left_out.items():
        if lengths_out:
            print(f"# {name}: {len(lengths_out)} prompts not stored, left out: {lengths_out}")
    write_json(
        "engine",
        {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "model": MODEL,
            "engine_start_s": starts,
            "left_out": left_out,
            "results": results,
            "table": text,
        },
        args.out,
        info,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
