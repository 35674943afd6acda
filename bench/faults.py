"""How long a call takes to answer under each fault: our Client (with ``op_timeout``) against
Mooncake's own ``MooncakeDistributedStore``, in the same run and the same fault window.

Root only (it builds a namespace topology: master and metadata on ``m0``, the storage node on
``s0``, the clients on ``c0``).  For each fault, three client processes on ``c0`` are set up
and seeded: ours (``op_timeout``, default 2 s), Mooncake's with its defaults, and Mooncake's
with its own timeouts shortened through the environment (``MC_TCP_STATUS_TIMEOUT_SEC=2``,
``MC_RPC_TIMEOUT_MS=2000``, ``MC_RPC_CONNECT_TIMEOUT_MS=2000``).  Then the fault is applied
and each process runs exists / get / put / batch get / batch put / remove, one thread per
call, all at once; a call that has not answered after ``--cap`` seconds is reported as
``>cap`` (its process is killed when the fault ends).

Faults: a cut between the client and the master, and between the client and the storage
node (nftables drop), 5 % random loss on the client's link, the client's link at 50 Mbit/s
(16 MiB values; the three clients take turns there), the storage node killed (SIGKILL),
the master killed.

    sudo .venv/bin/python bench/faults.py            # ~3 min; --cap 40 by default
    sudo .venv/bin/python bench/faults.py --cap 20 --faults cut-master,loss

Prints one table (per fault and call: seconds to the answer, and what the caller saw) and
writes ``bench/out/faults.json``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - first: measure the installed package, not the source tree
from _common import MiB, machine_info, parser, table, write_json

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.topology import Topology, TopologyUnavailable

FAULTS = ["cut-master", "cut-storage", "loss", "rate", "kill-storage", "kill-master"]
CALLS = ["exists", "get", "put", "batch_get", "batch_put", "remove"]
KINDS = ["ours", "mooncake", "mooncake+env"]
MOONCAKE_ENV = {
    "MC_TCP_STATUS_TIMEOUT_SEC": "2",
    "MC_RPC_TIMEOUT_MS": "2000",
    "MC_RPC_CONNECT_TIMEOUT_MS": "2000",
}
#: Value size per fault (the slow link moves large values; the others small ones).
SIZES = {"rate": 16 * MiB}
#: Faults whose client kinds run one after another: on the shaped link three clients at once
#: would share its 50 Mbit/s and each look three times slower.
SEQUENTIAL = {"rate"}
SMALL = 256 * 1024
#: Repetitions of each call under random loss (one answer says little there).
REPEATS = {"loss": 10}
#: The master's -client_ttl (seconds it keeps a silent node's segment).
CLIENT_TTL = 2

# ------------------------------------------------------------------ the client process

WORKER = r"""
import json, os, sys, threading, time
kind, config = sys.argv[1], json.loads(sys.argv[2])
size, op_timeout = int(sys.argv[3]), float(sys.argv[4])
value = os.urandom(size)
tag = f"bf-{kind}-{os.getpid()}"
old = [f"{tag}-old-{i}" for i in range(4)]
doomed = iter([f"{tag}-rm-{i}" for i in range(16)])  # one fresh key per remove

def fresh(n):
    return [f"{tag}-new-{time.monotonic_ns()}-{i}" for i in range(n)]

if kind == "ours":
    import mooncake_cffi as mc
    from mooncake_cffi import Client, MooncakeError
    c = Client(config, op_timeout=op_timeout)
    rm = [f"{tag}-rm-{i}" for i in range(16)]
    assert c.batch_put(old + rm, [value] * 4 + [b"r" * 4096] * 16) == [0] * 20
    def one(x):
        if x is True or x is None or x == value:
            return "ok"
        if x is False:
            return "miss"
        if isinstance(x, bytes):
            return "wrong bytes"
        return "ok" if x == 0 else mc.error_name(x)
    def outcome(fn):
        try:
            r = fn()
        except MooncakeError as exc:
            return exc.name
        if isinstance(r, list):
            return "/".join(sorted({"miss" if x is None else one(x) for x in r}))
        return one(r)
    calls = {
        "exists": lambda: c.exists(old[0]),
        "get": lambda: c.get(old[1]),
        "put": lambda: c.put(fresh(1)[0], value),
        "batch_get": lambda: c.batch_get(old[2:4]),
        "batch_put": lambda: c.batch_put(fresh(2), [value] * 2),
        "remove": lambda: c.remove(next(doomed), force=True) or "miss",
    }
else:
    from mooncake.store import MooncakeDistributedStore
    c = MooncakeDistributedStore()
    rc = c.setup(config["local_hostname"], config["metadata_server"], 0, 256 << 20, "tcp", "",
                 config["master_server_addr"])
    assert rc == 0, rc
    rm = [f"{tag}-rm-{i}" for i in range(16)]
    assert c.put_batch(old + rm, [value] * 4 + [b"r" * 4096] * 16) == 0
    def one(x):
        if isinstance(x, bytes):
            return "ok" if x == value else ("empty" if not x else "wrong bytes")
        return "ok" if x in (0, 1) else f"rc {x}"
    def outcome(fn):
        try:
            r = fn()
        except Exception as exc:
            return type(exc).__name__
        if isinstance(r, list):
            return "/".join(sorted({one(x) for x in r}))
        return one(r)
    calls = {
        "exists": lambda: c.is_exist(old[0]),
        "get": lambda: c.get(old[1]),
        "put": lambda: c.put(fresh(1)[0], value),
        "batch_get": lambda: c.get_batch(old[2:4]),
        "batch_put": lambda: c.put_batch(fresh(2), [value] * 2),
        "remove": lambda: c.remove(next(doomed), True),
    }

lock = threading.Lock()
def say(d):
    with lock:
        sys.stdout.write(json.dumps(d) + "\n")
        sys.stdout.flush()

def run(name, repeats):
    times, seen = [], []
    for _ in range(repeats):
        start = time.monotonic()
        seen.append(outcome(calls[name]))
        times.append(time.monotonic() - start)
    say({"call": name, "times": times, "outcomes": seen})

say({"ready": True})
repeats = int(sys.stdin.readline())
threads = [threading.Thread(target=run, args=(n, repeats), daemon=True) for n in calls]
for t in threads:
    t.start()
for t in threads:
    t.join()
say({"done": True})
sys.stdin.readline()
os._exit(0)
"""


class Probe:
    """One client process on ``c0``: seeded at start, runs every call at once on ``go``."""

    def __init__(
        self,
        t: Topology,
        cluster: LocalCluster,
        kind: str,
        size: int,
        timeout: float,
        mooncake_env: dict[str, str] | None = None,
    ):
        env = {**os.environ, **cluster.client_env()}
        if kind == "mooncake+env":
            env.update(MOONCAKE_ENV if mooncake_env is None else mooncake_env)
        argv = [sys.executable, "-c", WORKER, "ours" if kind == "ours" else "mooncake"]
        argv += [json.dumps(cluster.client_config()), str(size), str(timeout)]
        self.kind = kind
        self.proc = t.run_in(
            "c0",
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log(kind),
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self.lines.get(timeout=60)
        if json.loads(first or "{}") != {"ready": True}:
            tail = Path(self.log.name).read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{kind} client did not start: {first!r}\n{tail}")
        self.results: dict[str, dict[str, Any]] = {}

    def _log(self, kind: str) -> Any:
        """The client's stderr (Mooncake's log lines), kept for a failure report."""
        self.log = tempfile.NamedTemporaryFile(prefix=f"faults-{kind}-", suffix=".log")
        return self.log

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def go(self, repeats: int) -> None:
        self.started = time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{repeats}\n")
        self.proc.stdin.flush()

    def collect(self, until: float) -> bool:
        """Read answers until every call answered (True) or ``until`` (monotonic) passes;
        answers that arrived before ``until`` are read even when it has passed."""
        while True:
            left = until - time.monotonic()
            try:
                line = self.lines.get(timeout=left) if left > 0 else self.lines.get_nowait()
            except queue.Empty:
                return False
            if not line:
                return False
            msg = json.loads(line)
            if msg.get("done"):
                return True
            if msg["times"] and max(msg["times"]) <= until - self.started:
                self.results[msg["call"]] = msg

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


# ------------------------------------------------------------------ faults


def apply(fault: str, t: Topology, cluster: LocalCluster) -> None:
    if fault == "cut-master":
        t.cut("c0", "m0")
    elif fault == "cut-storage":
        t.cut("c0", "s0")
    elif fault == "loss":
        t.loss("c0", 5)
    elif fault == "rate":
        t.rate("c0", 50)
    elif fault == "kill-storage":
        cluster.kill("storage")
    elif fault == "kill-master":
        cluster.kill("master")
    else:
        raise ValueError(fault)


def undo(fault: str, t: Topology, cluster: LocalCluster) -> None:
    t.heal()
    role = {"kill-storage": "storage", "kill-master": "master"}.get(fault)
    if role is None:
        return
    cluster.restart(role, timeout=30)
    # The master keeps a dead node's segment for CLIENT_TTL s: wait until only the restarted
    # node's is left.
    time.sleep(CLIENT_TTL + 2.0)


def run_fault(
    fault: str, t: Topology, cluster: LocalCluster, cap: float, timeout: float
) -> dict[str, dict[str, Any]]:
    """Answers per client kind: {kind: {call: {"times": [...], "outcomes": [...]}}}."""
    groups = [[k] for k in KINDS] if fault in SEQUENTIAL else [KINDS]
    results: dict[str, dict[str, Any]] = {}
    for kinds in groups:
        results.update(_one_window(fault, kinds, t, cluster, cap, timeout))
    return results


def _one_window(
    fault: str, kinds: list[str], t: Topology, cluster: LocalCluster, cap: float, timeout: float
) -> dict[str, dict[str, Any]]:
    """Set up a client of each kind, apply the fault, run every call at once, undo it."""
    size = SIZES.get(fault, SMALL)
    probes = [Probe(t, cluster, kind, size, timeout) for kind in kinds]
    try:
        apply(fault, t, cluster)
        time.sleep(0.2)
        for p in probes:
            p.go(REPEATS.get(fault, 1))
        until = time.monotonic() + cap * REPEATS.get(fault, 1)
        for p in probes:
            p.collect(until)
    finally:
        for p in probes:
            p.kill()
        undo(fault, t, cluster)
    return {p.kind: p.results for p in probes}


def cell(result: dict[str, Any] | None, cap: float) -> str:
    """``max seconds (outcomes)``, or ``>cap`` for a call that never answered."""
    if result is None:
        return f">{cap:.0f} (no answer)"
    times, seen = result["times"], sorted(set(result["outcomes"]))
    return f"{max(times):.2f} ({', '.join(seen)})"


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.set_defaults(segment="1 GB")
    p.add_argument("--cap", type=float, default=40.0, help="seconds a call may take (default 40)")
    p.add_argument("--timeout", type=float, default=2.0, help="our op_timeout (default 2)")
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset of faults")
    p.add_argument(
        "--mooncake-env",
        default=",".join(f"{k}={v}" for k, v in MOONCAKE_ENV.items()),
        help="VAR=VALUE,... for the third client (default %(default)s)",
    )
    args = p.parse_args()
    pairs = [kv.split("=", 1) for kv in args.mooncake_env.split(",") if kv]
    MOONCAKE_ENV.clear()
    MOONCAKE_ENV.update({k: v for k, v in pairs})
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        raise SystemExit(f"unknown faults {unknown}; choose from {FAULTS}")
    faults = [f for f in FAULTS if f in faults]  # kills last: they restart processes
    machine = machine_info()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as d, Topology(hosts=["m0", "s0", "c0"]) as t:
            place = t.placement({"metadata": "m0", "master": "m0", "storage": "s0"})
            cluster = LocalCluster(
                Path(d) / "c",
                args.segment,
                placement=place,
                client_host=t.ip("c0"),
                client_ttl=CLIENT_TTL,
            )
            cluster.start()
            try:
                for fault in faults:
                    start = time.monotonic()
                    results[fault] = run_fault(fault, t, cluster, args.cap, args.timeout)
                    print(f"{fault}: {time.monotonic() - start:.0f} s", flush=True)
            finally:
                cluster.stop()
    except TopologyUnavailable as exc:
        raise SystemExit(f"bench/faults.py: {exc}") from None
    rows = []
    for fault in faults:
        for call in CALLS:
            rows.append(
                [fault, call] + [cell(results[fault][k].get(call), args.cap) for k in KINDS]
            )
    table(
        [
            "fault",
            "call",
            f"ours (op_timeout={args.timeout:g} s)",
            "mooncake",
            "mooncake + env",
        ],
        rows,
        title="Seconds until the call answered (worst of the repeats) and what the caller saw",
    )
    write_json(
        "faults",
        {"cap": args.cap, "op_timeout": args.timeout, "results": results},
        args.out,
        machine,
    )


if __name__ == "__main__":
    main()
