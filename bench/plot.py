"""Plot the benchmarks' results from bench/out/*.json into the docs' images.

Writes ``docs/images/latency.png``: empirical CDFs of the lane experiment's lookup and load
latencies, of the small operations and of the asyncio / thread-pool gets, plus the
scaling sweeps.  Panels whose JSON file is missing are left out.  With
``bench/out/fleet.json`` (``bench/fleet.py``) it also writes ``docs/images/fleet.png``:
aggregate throughput against the number of processes, and lookups and RSS as the store
grows, both classes.

    .venv/bin/python bench/plot.py [--out docs/images/latency.png]
                                   [--fleet-out docs/images/fleet.png]
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
IMAGES = BENCH.parent / "docs" / "images"
CLASSES = {"ours": ("drop-in", "tab:blue"), "theirs": ("Mooncake's class", "tab:orange")}


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
    p.add_argument("--out", type=Path, default=IMAGES / "latency.png")
    p.add_argument("--fleet-out", type=Path, default=IMAGES / "fleet.png")
    args = p.parse_args()
    fleet = load("fleet")
    if fleet:
        fleet_figure(fleet, args.fleet_out)

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
        if fleet:
            return
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def fleet_figure(fleet: dict[str, Any], out: Path) -> None:
    """bench/fleet.py's results: throughput vs processes, lookups and RSS vs keys."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
    tp, growth = fleet.get("throughput"), fleet.get("growth")
    if tp:
        value = max(
            {c["value"] for c in tp["cells"]} & {1 << 20} or {c["value"] for c in tp["cells"]}
        )
        ceiling = max(tp["ceiling_mib_s"].values())
        for ax, phase in zip(axes[0], ("put", "get"), strict=True):
            for impl, (label, color) in CLASSES.items():
                for nodes, threads in sorted({(c["nodes"], c["threads"]) for c in tp["cells"]}):
                    cells = [
                        c
                        for c in tp["cells"]
                        if c["impl"] == impl
                        and c["value"] == value
                        and c["nodes"] == nodes
                        and c["threads"] == threads
                    ]
                    procs = sorted({c["procs"] for c in cells})
                    ys = [
                        _median([c[f"{phase}_mib_s"] for c in cells if c["procs"] == n])
                        for n in procs
                    ]
                    ax.plot(
                        procs,
                        ys,
                        marker="o" if nodes == 1 else "s",
                        color=color,
                        ls="-" if threads == 1 else "--",
                        label=f"{label}, {nodes} node(s), {threads} thread(s)",
                    )
            ax.axhline(ceiling, color="grey", lw=0.8, ls=":", label="loopback ceiling")
            ax.set_xscale("log", base=2)
            every = sorted({c["procs"] for c in tp["cells"]})
            ax.set_xticks(every, [str(n) for n in every])
            ax.set_xlabel("processes")
            ax.set_ylabel("aggregate MiB/s (median of rounds)")
            ax.set_title(
                f"batch_{phase}_{'from' if phase == 'put' else 'into'}: "
                f"{value >> 10} KiB values, 16 MiB a call",
                fontsize=10,
            )
            ax.grid(True, which="both", alpha=0.25)
            ax.legend(fontsize=7)
    if growth:
        levels = growth["levels"]
        keys = [lv["keys"] for lv in levels]
        ax = axes[1][0]
        for impl, (label, color) in CLASSES.items():
            qs = [np.percentile(lv["lookup_ms"][impl], [10, 50, 90]) for lv in levels]
            ax.plot(keys, [q[1] for q in qs], marker="o", color=color, label=f"{label} median")
            ax.fill_between(keys, [q[0] for q in qs], [q[2] for q in qs], color=color, alpha=0.15)
        ax.set_xscale("log")
        ax.set_xlabel("keys in the store")
        ax.set_ylabel("ms (band: p10-p90)")
        ax.set_title(
            f"batch_is_exist of 16 keys after a {growth['gap_s'] * 1e3:.0f} ms gap", fontsize=10
        )
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
        ax = axes[1][1]
        for who, label, color in (
            ("master", "master", "black"),
            ("ours", "drop-in client", "tab:blue"),
            ("theirs", "Mooncake's client", "tab:orange"),
        ):
            ax.plot(
                keys,
                [lv["rss_kib"][who] / 1024 for lv in levels],
                marker="o",
                color=color,
                label=label,
            )
        ax.set_xscale("log")
        ax.set_xlabel("keys in the store (128-byte values)")
        ax.set_ylabel("RSS MiB")
        ax.set_title("Resident memory as the store grows", fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    for ax in axes.ravel():
        if not ax.has_data():
            ax.set_visible(False)
    machine = fleet.get("machine", {})
    fig.suptitle(
        f"Many processes, one store: bench/fleet.py, {machine.get('date', '')[:10]}, "
        f"{machine.get('nproc')} cores, TCP loopback",
        fontsize=11,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
