"""What a burst of timed-out transfers does to the calls after it, on a slow link.

Root only (it builds a namespace topology: master and metadata on ``m0``, the storage node on
``s0``, the client on ``c0``).  Each round starts one client process on ``c0`` (default lanes:
the shared pool of 4 workers), seeds values over the clean link, limits ``c0``'s link to
``--mbit`` Mbit/s (50 by default) and then, with ``--threads`` callers (3):

1. *before*: reads (``--op``: ``get_into`` by default, or ``get``), or writes (``put``), of
   ``--small`` MiB values with a deadline of ``--deadline`` s, each fitting its deadline:
   the link's rate as callers see it;
2. *burst*: reads (or writes) of ``--big`` MiB values with a deadline of ``--short`` s, far
   shorter than their transfers: every call times out, and each caller tries again at once;
3. *after*: the calls of *before* again, on the same client (``--heal`` lifts the rate
   limit when the burst ends instead).

It reports, per phase, calls, timeouts and the worst overrun of a call past its deadline;
for *after*, the successful bytes per second in 2 s windows, the time until they reach 80 %
of *before*'s rate (and stay there for two windows), and the lane's occupancy over the run
(running tiles, those of them whose callers had gone, queued tiles, ``in_flight``
batches), sampled every 0.25 s.

    sudo .venv/bin/python bench/recovery.py                 # ~3 min: 3 rounds of reads
    sudo .venv/bin/python bench/recovery.py --op put --rounds 2
    sudo .venv/bin/python bench/recovery.py --heal

Writes ``bench/out/recovery.json`` (every call and sample of every round).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - first: measure the installed package, not the source tree
from _common import MiB, fmt, machine_info, parser, table, write_json

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.topology import Topology, TopologyUnavailable

# The client process: one JSON command a line in, one JSON answer a line out.
WORKER = r"""
import json, os, sys, threading, time
from mooncake_cffi import Client, MooncakeError

client = Client(json.loads(sys.argv[1]))
t0 = time.monotonic()
samples, stop = [], threading.Event()

def sampler():
    while not stop.wait(0.25):
        st = client.stats()
        busy = [s for s in st.values() if s.get("workers")]
        samples.append([round(time.monotonic() - t0, 3),
                        sum(s["running"] for s in busy), sum(s["queued"] for s in busy),
                        sum(s["pending"] for s in busy), client.in_flight,
                        sum(s.get("abandoned", 0) for s in busy)])

threading.Thread(target=sampler, daemon=True).start()
pools = {}

def seed(name, count, size):
    keys = [f"{name}-{os.getpid()}-{i}" for i in range(count)]
    value = os.urandom(size)
    for k in keys:
        assert client.put(k, value, timeout=60) is None
    pools[name] = (keys, size, value)
    return len(keys)

def phase(op, pool, seconds, timeout, threads):
    keys, size, value = pools[pool]
    calls, end = [], time.monotonic() + seconds
    def caller(n):
        i = n
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                if op == "get":
                    got = client.get(keys[i % len(keys)], timeout=timeout)
                    outcome = "ok" if got == value else ("miss" if got is None else "wrong")
                elif op == "get_into":  # a fresh buffer: a timed-out read may still fill it
                    buf = bytearray(size)
                    r = client.get_into([keys[i % len(keys)]], [buf], timeout=timeout)[0]
                    outcome = "ok" if r == size and buf == value else f"result {r}"
                else:
                    key = f"{pool}-w-{os.getpid()}-{n}-{i}"
                    client.put(key, value, timeout=timeout)
                    outcome = "ok"
            except MooncakeError as exc:
                outcome = exc.name
            calls.append([round(start - t0, 3), round(time.monotonic() - start, 3), outcome])
            i += threads
    ts = [threading.Thread(target=caller, args=(n,)) for n in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    return {"calls": sorted(calls), "size": size}

def drain(seconds):
    start = time.monotonic()
    while client.in_flight and time.monotonic() - start < seconds:
        time.sleep(0.1)
    return {"in_flight": client.in_flight, "took": round(time.monotonic() - start, 2)}

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "seed":
        out = seed(**cmd["kw"])
    elif cmd["cmd"] == "phase":
        out = phase(**cmd["kw"])
    elif cmd["cmd"] == "drain":
        out = drain(**cmd["kw"])
    elif cmd["cmd"] == "now":
        out = round(time.monotonic() - t0, 3)
    else:
        ops = {k: {f: v[f] for f in ("calls", "failed_calls", "timeouts", "failures")}
               for k, v in client.op_stats().items() if v["calls"]}
        out = {"samples": samples, "ops": ops}
    print(json.dumps({"result": out}), flush=True)
stop.set()
client.close_for_exit()
os._exit(0)
"""


class Worker:
    """The client process on ``c0``."""

    def __init__(self, t: Topology, cluster: LocalCluster) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="recovery-", suffix=".log")
        config = json.dumps(cluster.client_config(local_hostname=t.ip("c0")))
        self.proc = t.run_in(
            "c0",
            [sys.executable, "-c", WORKER, config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, **cluster.client_env()},
            cwd=tempfile.gettempdir(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert json.loads(self._next(60)) == {"ready": True}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def _next(self, limit: float) -> str:
        line = self.lines.get(timeout=limit)
        if not line:
            tail = Path(self.log.name).read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the client process exited: {tail}")
        return line

    def ask(self, cmd: str, limit: float = 300, **kw: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, "kw": kw}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._next(limit))["result"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def windows(calls: list[list[Any]], size: int, start: float, end: float, width: float = 2.0):
    """MB/s of successful calls per window of ``width`` s, by the time each call ended."""
    n = max(1, int((end - start) / width))
    got = [0.0] * n
    for t, took, outcome in calls:
        k = int((t + took - start) / width)
        if outcome == "ok" and 0 <= k < n:
            got[k] += size / 1e6
    return [g / width for g in got]


def summary(phase: dict[str, Any], deadline: float) -> dict[str, Any]:
    calls = phase["calls"]
    ok = sum(1 for c in calls if c[2] == "ok")
    return {
        "calls": len(calls),
        "ok": ok,
        "timeouts": sum(1 for c in calls if c[2] == "MCS_E_TIMEOUT"),
        "other": sorted({c[2] for c in calls} - {"ok", "MCS_E_TIMEOUT"}),
        "worst_overrun": max((c[1] - deadline for c in calls), default=0.0),
    }


def one_round(t: Topology, cluster: LocalCluster, args: Any) -> dict[str, Any]:
    w = Worker(t, cluster)
    try:
        w.ask("seed", name="small", count=8, size=int(args.small * MiB))
        w.ask("seed", name="big", count=4, size=int(args.big * MiB))
        t.rate("c0", args.mbit)
        common = {"op": args.op, "threads": args.threads}
        t_before = w.ask("now")
        before = w.ask("phase", pool="small", seconds=args.phase, timeout=args.deadline, **common)
        t_burst = w.ask("now")
        burst = w.ask("phase", pool="big", seconds=args.burst, timeout=args.short, **common)
        if args.heal:
            t.heal()
        t_after = w.ask("now")
        after = w.ask("phase", pool="small", seconds=args.after, timeout=args.deadline, **common)
        t_end = w.ask("now")
        drained = w.ask("drain", seconds=120)
        occupancy = w.ask("samples")
    finally:
        w.kill()
        t.heal()
    # One window of the whole phase: its mean rate.
    rate_before = windows(before["calls"], before["size"], t_before, t_burst, args.phase)[0]
    after_w = windows(after["calls"], after["size"], t_after, t_end)
    back = None
    for i in range(len(after_w) - 1):
        if min(after_w[i : i + 2]) >= 0.8 * rate_before:
            back = 2.0 * i
            break
    samples = occupancy["samples"]
    in_after = [s for s in samples if t_after <= s[0] <= t_end]
    first_idle = next((s[0] - t_after for s in in_after if s[1] + s[2] == 0), None)
    return {
        "before": {**summary(before, args.deadline), "mb_s": rate_before},
        "burst": {**summary(burst, args.short), "mb_s": 0.0},
        "after": {
            **summary(after, args.deadline),
            "mb_s": sum(after_w) / len(after_w),
            "mb_s_windows": after_w,
            "recovered_after_s": back,
            "max_queued": max((s[2] for s in in_after), default=0),
            "lane_idle_after_s": first_idle,
        },
        "drain": drained,
        "ops": occupancy["ops"],
        "marks": {"before": t_before, "burst": t_burst, "after": t_after, "end": t_end},
        "samples": samples,
        "calls": {"before": before["calls"], "burst": burst["calls"], "after": after["calls"]},
    }


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.set_defaults(segment="1 GB")
    p.add_argument(
        "--op",
        choices=("get_into", "get", "put"),
        default="get_into",
        help="get_into: reads into the caller's buffers (one Mooncake read each; default); "
        "get: Client.get (large values are sized first); put: writes of fresh keys",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=3, help="callers (default 3)")
    p.add_argument("--mbit", type=float, default=50.0, help="c0's link rate (default 50)")
    p.add_argument("--small", type=float, default=1.0, help="MiB of a later call (default 1)")
    p.add_argument("--big", type=float, default=16.0, help="MiB of a burst call (default 16)")
    p.add_argument("--deadline", type=float, default=2.0, help="later calls' (default 2 s)")
    p.add_argument("--short", type=float, default=0.5, help="burst calls' (default 0.5 s)")
    p.add_argument("--phase", type=float, default=8.0, help="seconds of *before* (default 8)")
    p.add_argument("--burst", type=float, default=10.0, help="seconds of the burst (default 10)")
    p.add_argument("--after", type=float, default=40.0, help="seconds of *after* (default 40)")
    p.add_argument("--heal", action="store_true", help="lift the rate limit after the burst")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.burst, args.after = 1, 6.0, 20.0
    machine = machine_info()
    rounds = []
    try:
        with tempfile.TemporaryDirectory() as d, Topology(hosts=["m0", "s0", "c0"]) as t:
            place = t.placement({"metadata": "m0", "master": "m0", "storage": "s0"})
            cluster = LocalCluster(
                Path(d) / "c", args.segment, placement=place, client_host=t.ip("c0")
            )
            cluster.start()
            try:
                for r in range(args.rounds):
                    rounds.append(one_round(t, cluster, args))
                    a = rounds[-1]["after"]
                    print(
                        f"round {r + 1}: after the burst {a['ok']}/{a['calls']} ok, worst "
                        f"overrun {a['worst_overrun']:.2f} s, back to rate after "
                        f"{a['recovered_after_s']} s",
                        flush=True,
                    )
            finally:
                cluster.stop()
    except TopologyUnavailable as exc:
        raise SystemExit(f"bench/recovery.py: {exc}") from None
    rows = []
    for i, r in enumerate(rounds, 1):
        for name in ("before", "burst", "after"):
            s = r[name]
            extra = ["", "", ""]
            if name == "after":
                extra = [str(s["recovered_after_s"]), s["max_queued"], r["drain"]["took"]]
            row = [i, name, s["calls"], s["ok"], s["timeouts"], fmt(s["worst_overrun"], 2)]
            rows.append([*row, fmt(s["mb_s"], 2), *extra])
    headers = ["round", "phase", "calls", "ok", "timeouts", "worst overrun s", "MB/s"]
    headers += ["back to 80 % after s", "max queued", "in_flight 0 after s"]
    title = f"{args.op}s on a {args.mbit:g} Mbit/s link, {args.threads} callers"
    table(headers, rows, title + (" (link restored after the burst)" if args.heal else ""))
    write_json(
        "recovery",
        {"args": vars(args) | {"out": str(args.out)}, "rounds": rounds},
        args.out,
        machine,
    )


if __name__ == "__main__":
    main()
