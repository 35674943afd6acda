"""Plot the latency distributions (and the scaling curves) from bench/out/*.json.

Writes ``bench/latency.png``: empirical CDFs of the lane experiment's lookup and load
latencies, of the small operations and of the asyncio / thread-pool gets, plus the
scaling sweeps.  Panels whose JSON file is missing are left out.

    .venv/bin/python bench/plot.py [--out bench/latency.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"


def load(name: str) -> dict[str, Any] | None:
    path = OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def cdf(ax: Any, samples: list[float], label: str, **kw: Any) -> None:
    a = np.sort(np.asarray(samples, dtype=float))
    if not a.size:
        return
    y = np.arange(1, a.size + 1) / a.size
    ax.step(a, y, where="post", label=label, **kw)


def finish(ax: Any, title: str, xlabel: str) -> None:
    ax.set_xscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of calls")
    ax.axhline(0.99, color="grey", lw=0.6, ls=":")
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=BENCH / "latency.png")
    args = p.parse_args()

    lanes, small, agets, scaling = (
        load("lanes"),
        load("small_ops"),
        load("async_gets"),
        load("scaling"),
    )
    panels = []
    if lanes:
        panels += [("lanes", "lookup"), ("lanes", "load")]
    if small:
        panels += [("small", None)]
    if agets:
        panels += [("async", None)]
    if scaling:
        panels += [("scale-size", None), ("scale-batch", None)]
    if not panels:
        raise SystemExit("no results in bench/out/: run the benchmarks first")
    cols = 2
    rows = (len(panels) + 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(12, 4.2 * rows))
    axes = np.atleast_1d(axes).ravel()
    colors = {
        "pool": "tab:red",
        "lanes": "tab:blue",
        "lanes+tiles": "tab:cyan",
        "floor": "black",
    }

    for ax, (kind, op) in zip(axes, panels, strict=False):
        if kind == "lanes" and lanes:
            for cfg, ops in lanes["samples_ms"].items():
                cdf(ax, ops[op], cfg, color=colors.get(cfg))
            prm = lanes["params"]
            finish(
                ax,
                f"Lane experiment: {op} while {prm['batches']} x {prm['batch_keys']} x "
                f"{prm['value_size'] >> 20} MiB stores run\n"
                f"({prm['rounds']} rounds per config; floor = Mooncake's client + 2 threads)",
                "latency (ms)",
            )
        elif kind == "small" and small:
            style = {"ours": "-", "theirs": "--", "raw": ":"}
            for opn, d in small["samples_ms"].items():
                for who, s in d.items():
                    if who not in style:
                        continue
                    cdf(
                        ax,
                        [x * 1e3 for x in s],
                        f"{opn} {who}",
                        ls=style[who],
                        color="tab:blue" if opn == "exists" else "tab:orange",
                    )
            finish(
                ax,
                "Single-key exists and 4 KiB get_into: ours vs Mooncake's client\n"
                "(raw = the shim call alone, no Python layer)",
                "latency (us)",
            )
        elif kind == "async" and agets:
            for mode, s in agets["samples_ms"].items():
                cdf(ax, s, mode)
            prm = agets["params"]
            finish(
                ax,
                f"{prm['concurrency']} concurrent {prm['value_size'] >> 10} KiB gets: "
                "completion time after the burst starts",
                "latency (ms)",
            )
        elif kind.startswith("scale") and scaling:
            sweep = "size" if kind == "scale-size" else "batch"
            pts = [r for r in scaling["results"] if r["sweep"] == sweep]
            x = [r["value_size"] / 1024 if sweep == "size" else r["keys"] for r in pts]
            for who, ls in (("ours", "-"), ("theirs", "--")):
                for opn, c in (("put", "tab:green"), ("get", "tab:purple")):
                    ax.plot(
                        x,
                        [r[f"{who}_{opn}_GiBps"] for r in pts],
                        ls=ls,
                        marker="o",
                        color=c,
                        label=f"{who} {opn}",
                    )
            ax.set_xscale("log", base=2)
            ax.set_ylabel("GiB/s (median)")
            ax.grid(True, which="both", alpha=0.25)
            ax.legend(fontsize=8)
            if sweep == "size":
                ax.set_xlabel("value size (KiB)")
                ax.set_title(
                    f"Throughput vs value size ({scaling['params']['size_batch']} keys/batch)",
                    fontsize=10,
                )
            else:
                ax.set_xlabel("keys per batch")
                ax.set_title(
                    "Throughput vs batch size "
                    f"({scaling['params']['batch_value'] >> 10} KiB values)",
                    fontsize=10,
                )
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    machine = (lanes or small or agets or scaling or {}).get("machine", {})
    fig.suptitle(
        f"mooncake-cffi benchmarks, {machine.get('date', '')[:10]}, {machine.get('nproc')} cores "
        f"{machine.get('cpu', '')}, TCP loopback",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
