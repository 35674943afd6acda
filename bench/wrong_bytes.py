"""A stress for reads that return another value's bytes (root only: network namespaces).

A master and metadata server on host ``m0``, a storage node on ``s0``, and client processes
on ``c0``, whose link is slowed (``--rate``) and made lossy (``--loss``), and on ``c1``,
whose link is clean (``--clients``: even ones on c0, odd ones on c1).  Each client runs
threads that put fresh keys of 1-32 MiB, read acknowledged keys back in every mode (``get``,
``batch_get``, ``get_into``, ``AsyncClient.get``) and remove old ones, all with deadlines
shorter than the transfers, so that reads and writes race their timeouts and the storage
node's memory is freed and reused all the time.

Every 4 KiB block of a value is one 32-byte tag repeated: ``<key>/<version>/<block>``, so a
read that is not byte for byte its key's value says whose bytes it got (which key, which
version, which block), or that it holds zeros or bytes of no value.

``--beside N`` runs N more clusters in the test's own namespace on the bridge and loopback,
each with a client hammering it with values tagged ``beside-*`` (as the parallel suite runs
other tests' clusters next to the namespace tests): a read on c0 that returns such bytes
came from another cluster's process.  ``--env`` gives the client processes Mooncake's
timeouts as a process inherits them from a test run that created clients with short
deadlines (``MC_TCP_STATUS_TIMEOUT_SEC`` / ``MC_RPC_TIMEOUT_MS``).

    sudo .venv/bin/python bench/wrong_bytes.py --seconds 120 --rounds 3

Every loop is bounded in count and time; only processes started here are stopped, by PID.
The exit status is 1 when a read returned wrong bytes, 2 on a setup failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.topology import Topology, TopologyUnavailable

MiB = 1 << 20

# The client process: argv = config, client kwargs, options (JSON).  It prints one JSON line
# per wrong read as it happens, and a summary line at the end.
WORKER = r"""
import asyncio, json, os, random, sys, threading, time
import mooncake_cffi as mc
from mooncake_cffi import AsyncClient, Client, MooncakeError

config, kwargs, opt = (json.loads(a) for a in sys.argv[1:4])
client = Client(config, **kwargs)
BLOCK = 4096
TAG = 32

def tag(key, ver, blk):
    t = f"{key}/{ver}/{blk}".encode()
    return t[:TAG].ljust(TAG, b".")

def value(key, ver, size):
    n = -(-size // BLOCK)
    return b"".join(tag(key, ver, i) * (BLOCK // TAG) for i in range(n))[:size]

def whose(got):
    # The distinct tags found at block starts, with how many blocks carry each.
    seen = {}
    b = bytes(got)
    for off in range(0, len(b), BLOCK):
        t = b[off:off + TAG]
        if t == bytes(TAG):
            name = "zeros"
        elif b"/" in t:
            parts = t.rstrip(b".").split(b"/")
            name = b"/".join(parts[:2]).decode(errors="replace") if len(parts) >= 3 else "?"
        else:
            name = "other"
        seen[name] = seen.get(name, 0) + 1
    return dict(sorted(seen.items(), key=lambda kv: -kv[1])[:6])

lock = threading.Lock()
acked = {}      # key -> (ver, size): reads must return exactly this, or fail
stats = {"puts": 0, "put_ok": 0, "put_timeout": 0, "put_err": 0, "reads": 0, "read_ok": 0,
         "read_miss": 0, "read_timeout": 0, "read_err": 0, "removes": 0, "wrong": 0,
         "errors": {}}
stop_at = time.monotonic() + opt["seconds"]
wid = opt["wid"]
sizes = [s * (1 << 20) for s in opt["sizes_mib"]]

def note_err(exc):
    with lock:
        stats["errors"][exc.name] = stats["errors"].get(exc.name, 0) + 1

def deadline(rng):
    lo, hi = opt["deadlines"]
    return rng.uniform(lo, hi)

def check(mode, key, got, extra=""):
    with lock:
        ver, size = acked.get(key, (None, None))
    if got is None:
        with lock:
            stats["read_miss"] += 1
        return
    if ver is None:  # removed meanwhile: cannot judge
        return
    b = bytes(got)
    want = value(key, ver, size)
    if b == want:
        with lock:
            stats["read_ok"] += 1
        return
    with lock:
        stats["wrong"] += 1
    first_bad = next((i for i in range(0, min(len(b), size), BLOCK)
                      if b[i:i + BLOCK] != want[i:i + BLOCK]), None)
    print(json.dumps({"wrong": mode, "key": key, "ver": ver, "size": size, "got": len(b),
                      "first_bad_block": None if first_bad is None else first_bad // BLOCK,
                      "whose": whose(b), "extra": extra, "t": time.time()}), flush=True)

def pick(rng, n):
    with lock:
        keys = list(acked)
    return rng.sample(keys, min(n, len(keys))) if keys else []

def writer(tid):
    rng = random.Random(f"{wid}-{tid}-{opt['seed']}")
    n = 0
    live_bytes = 0
    order = []
    while time.monotonic() < stop_at and n < 100000:
        n += 1
        key = f"w{wid}t{tid}-{n}"
        size = rng.choice(sizes)
        v = value(key, 1, size)
        with lock:
            stats["puts"] += 1
        try:
            client.put(key, v, timeout=deadline(rng))
            with lock:
                acked[key] = (1, size)
                stats["put_ok"] += 1
            order.append((key, size))
            live_bytes += size
        except mc.MooncakeTimeoutError:
            with lock:
                stats["put_timeout"] += 1
        except MooncakeError as exc:
            note_err(exc)
            with lock:
                stats["put_err"] += 1
        # Keep the storage node's memory in use, and freed and reused: remove the oldest.
        while live_bytes > opt["live_mib"] * (1 << 20) and order:
            old, sz = order.pop(0)
            with lock:
                acked.pop(old, None)
                stats["removes"] += 1
            live_bytes -= sz
            try:
                client.remove(old, force=True, timeout=5.0)
            except MooncakeError as exc:
                note_err(exc)

def reader(tid):
    rng = random.Random(f"r{wid}-{tid}-{opt['seed']}")
    loop = asyncio.new_event_loop() if opt["async"] else None
    aclient = AsyncClient(client) if loop else None
    n = 0
    modes = opt["modes"]
    while time.monotonic() < stop_at and n < 100000:
        n += 1
        mode = rng.choice(modes)
        keys = pick(rng, 3 if mode == "batch_get" else 1)
        if not keys:
            time.sleep(0.05)
            continue
        t = deadline(rng)
        with lock:
            stats["reads"] += 1
        try:
            if mode == "get":
                check(mode, keys[0], client.get(keys[0], timeout=t))
            elif mode == "batch_get":
                for k, g in zip(keys, client.batch_get(keys, timeout=t)):
                    check(mode, k, g)
            elif mode == "get_into":
                with lock:
                    size = acked.get(keys[0], (0, 1 << 20))[1]
                buf = bytearray(size)
                r = client.get_into(keys, [buf], timeout=t)[0]
                if r >= 0:
                    check(mode, keys[0], buf[:r])
                elif r == -704:
                    check(mode, keys[0], None)
                else:
                    with lock:
                        stats["read_err"] += 1
                        name = mc.error_name(r)
                        stats["errors"][name] = stats["errors"].get(name, 0) + 1
            elif mode == "aget":
                check(mode, keys[0], loop.run_until_complete(aclient.get(keys[0], timeout=t)))
        except mc.MooncakeTimeoutError:
            with lock:
                stats["read_timeout"] += 1
        except MooncakeError as exc:
            note_err(exc)
            with lock:
                stats["read_err"] += 1

threads = [threading.Thread(target=writer, args=(i,)) for i in range(opt["writers"])]
threads += [threading.Thread(target=reader, args=(i,)) for i in range(opt["readers"])]
for t in threads:
    t.start()
for t in threads:
    t.join(opt["seconds"] + 120)
# A last pass once the link is quiet: every acknowledged key, read with a long deadline.
if opt["final_check"]:
    end = time.monotonic() + 120
    while client.in_flight and time.monotonic() < end:
        time.sleep(0.2)
    with lock:
        keys = list(acked)
    for k in keys:
        try:
            check("final", k, client.get(k, timeout=30.0))
        except MooncakeError as exc:
            note_err(exc)
stats["in_flight_at_end"] = client.in_flight
print(json.dumps({"summary": stats}), flush=True)
client.close_for_exit()
os._exit(0)
"""

# A client of a cluster beside the one under test: puts and gets values tagged beside-*.
BESIDE = r"""
import json, os, random, sys, time
from mooncake_cffi import Client, MooncakeError
config, seconds, seed = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
client = Client(config, op_timeout=2.0)
BLOCK, TAG = 4096, 32
def value(key, size):
    n = -(-size // BLOCK)
    return b"".join(f"{key}/1/{i}".encode()[:TAG].ljust(TAG, b".") * (BLOCK // TAG)
                    for i in range(n))[:size]
rng = random.Random(seed)
end = time.monotonic() + seconds
n = 0
keys = []
while time.monotonic() < end and n < 100000:
    n += 1
    k = f"beside-{seed}-{n}"
    try:
        client.put(k, value(k, rng.choice([1, 2, 4, 8]) << 20))
        keys.append(k)
        client.get(rng.choice(keys))
        if len(keys) > 20:
            client.remove(keys.pop(0), force=True)
    except MooncakeError:
        pass
client.close_for_exit()
os._exit(0)
"""

BUSY = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\n" + (
    "while time.monotonic() < end:\n    sum(range(1000))\n"
)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=90.0, help="workload time per round")
    p.add_argument("--rounds", type=int, default=1, help="rounds (a fresh topology each)")
    p.add_argument("--rate", type=float, default=50.0, help="c0's link, Mbit/s (0: no limit)")
    p.add_argument("--loss", type=float, default=0.0, help="c0's random loss, percent")
    p.add_argument(
        "--clients", type=int, default=2, help="client processes: even ones on c0, odd on c1"
    )
    p.add_argument("--wmem", type=int, default=0, help="c0's tcp_wmem default and max, bytes")
    p.add_argument("--writers", type=int, default=1, help="writer threads per client")
    p.add_argument("--readers", type=int, default=2, help="reader threads per client")
    p.add_argument("--sizes", default="1,2,4,8,16,32", help="value sizes, MiB")
    p.add_argument("--deadlines", default="0.3,4.0", help="per-call deadline range, seconds")
    p.add_argument("--op-timeout", type=float, default=10.0, help="the clients' op_timeout")
    p.add_argument("--live", type=int, default=160, help="MiB kept stored per writer thread")
    p.add_argument("--modes", default="get,batch_get,get_into,aget")
    p.add_argument(
        "--env",
        default="",
        help="extra client environment, e.g. MC_TCP_STATUS_TIMEOUT_SEC=1,MC_RPC_TIMEOUT_MS=100",
    )
    p.add_argument("--beside", type=int, default=0, help="clusters in the root namespace")
    p.add_argument("--busy", type=int, default=0, help="busy loops beside (at most 1)")
    p.add_argument("--segment", default="512 MB")
    p.add_argument("--config", default="{}", help="extra client config (JSON)")
    p.add_argument("--no-final-check", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def run_round(args: argparse.Namespace, base: Path, index: int) -> dict[str, Any]:
    env_extra = dict(kv.split("=", 1) for kv in args.env.split(",") if kv)
    started: list[subprocess.Popen[Any]] = []
    beside: list[LocalCluster] = []
    wrong: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with Topology(hosts=["m0", "s0", "c0", "c1"]) as t:
        place = t.placement({"metadata": "m0", "master": "m0", "storage": "s0"})
        cluster = LocalCluster(
            base / f"round{index}", args.segment, placement=place, client_host=t.ip("c0")
        )
        cluster.start()
        healer: threading.Timer | None = None
        try:
            for i in range(args.beside):
                other = LocalCluster(base / f"round{index}-beside{i}", "256 MB")
                other.start()
                beside.append(other)
                started.append(
                    subprocess.Popen(
                        [sys.executable, "-c", BESIDE, json.dumps(other.client_config())]
                        + [str(args.seconds + 10), f"{index}-{i}"],
                        env={**os.environ, **other.client_env()},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        cwd=base,
                    )
                )
            for _ in range(min(args.busy, 1)):
                started.append(
                    subprocess.Popen([sys.executable, "-c", BUSY, str(args.seconds + 10)])
                )
            if args.wmem:
                # Room for a large send queue on c0 (a host tuned for fast links): a write's
                # last bytes then trail its call by seconds on the slowed link.
                wmem = f"4096 {args.wmem} {args.wmem}"
                subprocess.run(
                    [*t.prefix("c0"), "sh", "-c", f"echo {wmem} > /proc/sys/net/ipv4/tcp_wmem"],
                    check=True,
                    timeout=10,
                )
            if args.rate > 0:
                t.rate("c0", args.rate)
            if args.loss > 0:
                t.loss("c0", args.loss)
            workers = []
            lo, hi = (float(x) for x in args.deadlines.split(","))
            for wid in range(args.clients):
                opt = {
                    "wid": f"{index}{chr(97 + wid)}",
                    "seconds": args.seconds,
                    "seed": args.seed,
                    "sizes_mib": [int(s) for s in args.sizes.split(",")],
                    "deadlines": [lo, hi],
                    "writers": args.writers,
                    "readers": args.readers,
                    "live_mib": args.live,
                    "modes": args.modes.split(","),
                    "async": "aget" in args.modes,
                    "final_check": not args.no_final_check,
                }
                # Even clients on c0 (the faulty link), odd ones on c1 (a clean link).
                host = "c0" if wid % 2 == 0 else "c1"
                config = cluster.client_config(local_hostname=t.ip(host), **json.loads(args.config))
                kwargs = {"op_timeout": args.op_timeout}
                env = {**os.environ, **cluster.client_env(), **env_extra}
                for name in ("MCS_BIND_ADDRESS", "MC_TCP_BIND_ADDRESS"):
                    if name in env:
                        env[name] = t.ip(host)
                log = (base / f"round{index}-client{wid}.log").open("wb")
                proc = t.run_in(
                    host,
                    [sys.executable, "-c", WORKER]
                    + [json.dumps(config), json.dumps(kwargs), json.dumps(opt)],
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env=env,
                    cwd=base,
                )
                workers.append(proc)

            def read(proc: subprocess.Popen[str]) -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if "wrong" in msg:
                        wrong.append(msg)
                        print("WRONG", json.dumps(msg), flush=True)
                    elif "summary" in msg:
                        summaries.append(msg["summary"])

            # The final check runs on a quiet link: the faults end with the workload.
            healer = threading.Timer(args.seconds + 1.0, t.heal)
            healer.start()
            readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in workers]
            for r in readers:
                r.start()
            limit = time.monotonic() + args.seconds + 300
            for p in workers:
                try:
                    p.wait(timeout=max(1.0, limit - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()  # ours: started above, by PID
                    p.wait(timeout=10)
            for r in readers:
                r.join(10)
        finally:
            if healer is not None:
                healer.cancel()
            t.heal()
            for p in started:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
            for other in beside:
                other.stop()
            cluster.stop()
    return {
        "round": index,
        "seconds": round(time.monotonic() - t0, 1),
        "wrong": len(wrong),
        "wrong_reads": wrong[:20],
        "clients": summaries,
    }


def main() -> None:
    args = parse()
    out: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="wrong-bytes-") as d:
            for i in range(args.rounds):
                r = run_round(args, Path(d), i)
                out.append(r)
                c = r["clients"]
                print(
                    f"round {i}: {r['seconds']} s, wrong reads {r['wrong']}, "
                    f"reads ok {sum(s['read_ok'] for s in c)}, "
                    f"timeouts {sum(s['read_timeout'] for s in c)}/"
                    f"{sum(s['put_timeout'] for s in c)} (read/put), "
                    f"puts ok {sum(s['put_ok'] for s in c)}, "
                    f"errors {[s['errors'] for s in c]}",
                    flush=True,
                )
    except TopologyUnavailable as exc:
        print(f"cannot make network namespaces: {exc}", file=sys.stderr)
        sys.exit(2)
    total = sum(r["wrong"] for r in out)
    print(json.dumps({"rounds": len(out), "wrong": total}))
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
