"""Render the figures of bench/out/*.json as markdown into bench/RESULTS.md.

Everything between ``<!-- figures:begin -->`` and ``<!-- figures:end -->`` in RESULTS.md is
replaced by tables built from the JSON files (the written analysis around it is kept).

    .venv/bin/python bench/report.py            # rewrite the figures section
    .venv/bin/python bench/report.py --print    # print it instead
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"
RESULTS = BENCH / "RESULTS.md"
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"


def load(name: str) -> dict[str, Any] | None:
    path = OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        if v != v:
            return "-"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.{digits}f}"
    return str(v)


def md(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(f(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def run_line(d: dict[str, Any]) -> str:
    m = d["machine"]
    la = m.get("loadavg_start", [0])[0]
    lb = m.get("loadavg_end", [0])[0]
    return (
        f"`{m['command']}` - {m['date']}, commit {m['git_commit']}, "
        f"load average {la:.2f} at start, {lb:.2f} at end"
    )


def lanes_section(d: dict[str, Any]) -> list[str]:
    p, s = d["params"], d["summary_ms"]
    out = [
        "### 1. Lane isolation",
        "",
        run_line(d),
        "",
        f"{p['rounds']} measured rounds per configuration ({p['warmup']} warm-up rounds "
        f"discarded), configurations interleaved round by round. Each round: "
        f"{p['batches']} store batches of {p['batch_keys']} x {p['value_size'] >> 20} MiB fresh "
        f"keys submitted together, then a lookup (`batch_exists` of {p['lookup_keys']} keys "
        f"of the previous round) and a load (`get_into` of {p['load_keys']} x "
        f"{p['value_size'] >> 20} MiB). Latency in ms.",
        "",
    ]
    rows = []
    for cfg, ops in s.items():
        rows.append(
            [
                cfg,
                ops["lookup"]["avg"],
                ops["lookup"]["p50"],
                ops["lookup"]["p99"],
                ops["load"]["avg"],
                ops["load"]["p50"],
                ops["load"]["p99"],
                ops["store"]["avg"],
                ops["store"]["p99"],
                d["store_MiB_per_s"][cfg],
                d["errors"][cfg],
            ]
        )
    out.append(
        md(
            [
                "config",
                "lookup avg",
                "lookup p50",
                "lookup p99",
                "load avg",
                "load p50",
                "load p99",
                "store avg",
                "store p99",
                "store MiB/s",
                "errors",
            ],
            rows,
        )
    )
    out += ["", "Targets:", ""]
    out.append(
        md(
            ["ratio", "value", "target", "met"],
            [[k, v["value"], v["target"], v["met"]] for k, v in d["targets"].items()],
        )
    )
    out += ["", "Lane state just before each lookup (`client.stats()`, mean over rounds):", ""]
    drows = []
    for cfg, samples in d["lane_depth_before_lookup"].items():
        ds = samples[p["warmup"] :] or samples
        n = max(1, len(ds))
        drows.append(
            [
                cfg,
                sum(x[0] for x in ds) / n,
                sum(x[1] for x in ds) / n,
                sum(x[2] for x in ds) / n,
                sum(x[3] for x in ds) / n,
            ]
        )
    out.append(
        md(
            [
                "config",
                "lookup's lane: running",
                "lookup's lane: queued",
                "store lane: running",
                "store lane: queued",
            ],
            drows,
        )
    )
    out += [
        "",
        "`client.stats()` at the end of the run (batch latency from submit to completion, whole "
        "run including warm-up and the untimed removals; the shim's histogram reports bucket "
        "upper edges):",
        "",
    ]
    srows = []
    for cfg, lanes in d["lane_stats"].items():
        for lane, st in lanes.items():
            if st["submitted"]:
                srows.append(
                    [
                        cfg,
                        lane,
                        int(st["workers"]),
                        int(st["completed"]),
                        int(st["keys"]),
                        st["mean_us"] / 1e3,
                        st["p50_us"] / 1e3,
                        st["p99_us"] / 1e3,
                        st["max_us"] / 1e3,
                    ]
                )
    out.append(
        md(
            ["config", "lane", "workers", "batches", "keys", "mean", "p50", "p99", "max"],
            srows,
        )
    )
    cp = d.get("cpu_profile")
    if cp:
        out += [
            "",
            "CPU while each configuration's rounds run (`/proc/<pid>/task/*/stat`, CPU seconds "
            "/ wall seconds; 2 cores = 2.0):",
            "",
            md(
                ["config", "client process", "busiest client threads", "storage node"],
                [
                    [
                        c,
                        x["client_cpu_share"],
                        " ".join(f"{t:.2f}" for t in x["busiest_threads_share"][:6]),
                        x["storage_node_share"],
                    ]
                    for c, x in cp.items()
                ],
            ),
        ]
    return out


def throughput_section(d: dict[str, Any]) -> list[str]:
    p, r = d["params"], d["results"]
    lb, la = d["loopback_GiBps"]["before"], d["loopback_GiBps"]["after"]
    out = [
        "### 2. Batch throughput against Mooncake's client",
        "",
        run_line(d),
        "",
        f"{p['keys']} x {p['value_size'] >> 20} MiB per batch call, median of {p['reps']} "
        "repetitions, clients alternating. Loopback TCP measured in the same run: "
        f"{lb['1 stream']:.2f} / {la['1 stream']:.2f} GiB/s with one stream (before / after), "
        f"{lb['2 streams']:.2f} / {la['2 streams']:.2f} GiB/s with two.",
        "",
    ]
    out.append(
        md(
            [
                "client",
                "put GiB/s",
                "put x theirs",
                "put p99 ms",
                "get GiB/s",
                "get x theirs",
                "get p99 ms",
                "put / loopback",
                "get / loopback",
            ],
            [
                [
                    nm,
                    x["put_GiBps"],
                    x["put_vs_theirs"],
                    x["put_p99_ms"],
                    x["get_GiBps"],
                    x["get_vs_theirs"],
                    x["get_p99_ms"],
                    x["put_of_loopback"],
                    x["get_of_loopback"],
                ]
                for nm, x in r.items()
            ],
        )
    )
    cp = d.get("cpu_profile")
    if cp:
        out += [
            "",
            "Per-thread CPU seconds over a few more put+get repetitions per client "
            "(`/proc/<pid>/task/*/stat`):",
            "",
        ]
        out.append(
            md(
                ["client", "wall s", "busiest client threads (CPU s)", "storage node (CPU s)"],
                [
                    [
                        nm,
                        x["wall_s"],
                        ", ".join(f"{t[2]:.2f}" for t in x["client_threads"][:5]),
                        ", ".join(f"{t[2]:.2f}" for t in x["storage_threads"]),
                    ]
                    for nm, x in cp.items()
                ],
            )
        )
    return out


def small_section(d: dict[str, Any]) -> list[str]:
    p, s = d["params"], d["summary_ms"]
    out = [
        "### 3. Small-operation overhead",
        "",
        run_line(d),
        "",
        f"{p['calls']} calls per row, one at a time, alternating blocks of {p['block']}; "
        f"value {p['value_size']} bytes. `raw` is the shim's `mcs_client_run` called through cffi "
        "with prebuilt arrays (no Python layer). Microseconds.",
        "",
    ]
    rows = []
    for op, d2 in s.items():
        for who, x in d2.items():
            rows.append(
                [
                    op,
                    who,
                    x["p50"] * 1e3,
                    x["p90"] * 1e3,
                    x["p99"] * 1e3,
                    x["p50"] / d2["theirs"]["p50"],
                    x["p99"] / d2["theirs"]["p99"],
                ]
            )
    out.append(md(["op", "client", "p50", "p90", "p99", "p50 / theirs", "p99 / theirs"], rows))
    out += [
        "",
        md(
            ["target", "value", "wanted", "met"],
            [[k, v["value"], v["target"], v["met"]] for k, v in d["targets"].items()],
        ),
    ]
    return out


def scaling_section(d: dict[str, Any]) -> list[str]:
    p = d["params"]
    out = ["### 4. Scaling", "", run_line(d), ""]
    for sweep, title in (
        ("size", f"Value size, {p['size_batch']} keys per batch"),
        ("batch", f"Batch size, {p['batch_value'] >> 10} KiB values"),
    ):
        rows = []
        for r in d["results"]:
            if r["sweep"] != sweep:
                continue
            vs = r["value_size"]
            rows.append(
                [
                    r["keys"],
                    f"{vs >> 20} MiB" if vs >= 1 << 20 else f"{vs >> 10} KiB",
                    r["ours_put_GiBps"],
                    r["ours_put_kops"],
                    r["ours_put_p50_ms"],
                    r["ours_put_p99_ms"],
                    r["ours_get_GiBps"],
                    r["ours_get_kops"],
                    r["ours_get_p50_ms"],
                    r["ours_get_p99_ms"],
                    r["theirs_put_GiBps"],
                    r["theirs_get_GiBps"],
                ]
            )
        out += [
            f"{title} (ours; theirs for reference; median GiB/s, thousand keys/s, "
            "ms per batch call):",
            "",
            md(
                [
                    "keys",
                    "value",
                    "put GiB/s",
                    "put kkeys/s",
                    "put p50",
                    "put p99",
                    "get GiB/s",
                    "get kkeys/s",
                    "get p50",
                    "get p99",
                    "theirs put",
                    "theirs get",
                ],
                rows,
            ),
            "",
        ]
    return out


def async_section(d: dict[str, Any]) -> list[str]:
    p = d["params"]
    out = [
        "### asyncio: concurrent gets",
        "",
        run_line(d),
        "",
        f"{p['concurrency']} concurrent gets of {p['value_size'] >> 10} KiB per burst, "
        f"{p['bursts']} bursts per mode, modes alternating; latency = completion time after the "
        "burst started. `wN` = the Client's shared pool has N workers. Threads in the process "
        "before / after the AsyncClient was created: "
        + ", ".join(
            f"{k}: {a} / {b}" for k, (a, b) in d["threads_before_after_async_client"].items()
        )
        + ".",
        "",
    ]
    out.append(
        md(
            [
                "mode",
                "burst ms",
                "gets/s",
                "get p50 ms",
                "get p99 ms",
                "CPU ms / burst",
                "threads",
                "busiest threads (CPU / wall)",
            ],
            [
                [
                    m,
                    r["burst_ms_median"],
                    r["gets_per_s"],
                    r["get_p50_ms"],
                    r["get_p99_ms"],
                    r["cpu_ms_per_burst"],
                    r["threads"],
                    " ".join(f"{x:.2f}" for x in r.get("busiest_threads_share_of_wall", [])),
                ]
                for m, r in d["results"].items()
            ],
        )
    )
    return out


def profile_section(d: dict[str, Any]) -> list[str]:
    out = ["### Profiles (`bench/profiles.py`)", "", run_line(d), ""]
    sp = d.get("spin", {})
    if "where_and_state" in sp:
        out += [
            f"Where a thread looping 64 x 1 MiB `put_from` / `get_into` was, over {sp['dumps']} "
            "`py-spy dump --native` samples (py-spy's thread state in brackets):",
            "",
            md(
                ["where", "dumps"],
                sorted(sp["where_and_state"].items(), key=lambda x: -x[1]),
            ),
            "",
        ]
    sh = d.get("shim", {})
    if "dso_share_percent" in sh:
        out += [
            f"CPU samples per shared object (`perf record -g`) over {sh['calls']} raw "
            "`mcs_client_run` single-key exists calls:",
            "",
            md(
                ["shared object", "% of samples"],
                sorted(sh["dso_share_percent"].items(), key=lambda x: -x[1]),
            ),
            "",
        ]
    return out


def render() -> str:
    parts: list[str] = []
    any_d = None
    for name, fn in (
        ("lanes", lanes_section),
        ("throughput", throughput_section),
        ("small_ops", small_section),
        ("scaling", scaling_section),
        ("async_gets", async_section),
        ("profiles", profile_section),
    ):
        d = load(name)
        if d is None:
            parts += [f"_{name}: no results (bench/out/{name}.json missing)_", ""]
            continue
        any_d = any_d or d
        parts += fn(d) + [""]
    head: list[str] = []
    if any_d:
        m = any_d["machine"]
        head = [
            f"Machine: {m['nproc']} cores ({m['cpu']}), {m['memory']} RAM, Linux {m['kernel']}, "
            f"Python {m['python']}, mooncake-transfer-engine-non-cuda {m['mooncake_wheel']}, "
            f"mooncake-cffi {m['mooncake_cffi']} (installed in .venv). Cluster: one "
            "mooncake_master and one storage node (mooncake_client) on 127.0.0.1, TCP.",
            "",
        ]
    return "\n".join(head + parts).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true", help="print instead of writing RESULTS.md")
    args = ap.parse_args()
    text = render()
    if args.print:
        print(text)
        return
    doc = RESULTS.read_text() if RESULTS.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc = doc.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    pre, rest = doc.split(BEGIN, 1)
    _, post = rest.split(END, 1)
    RESULTS.write_text(f"{pre}{BEGIN}\n{text}{END}{post}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
