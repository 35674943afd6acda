"""Shared helpers of the benchmark scripts in bench/ (run by hand, not in CI).

Each script starts its own throw-away :class:`LocalCluster` on 127.0.0.1, measures, prints a
table and writes ``bench/out/<name>.json`` (raw samples included, for ``bench/plot.py``).

Import this module before ``mooncake_cffi``: it drops the repository root from ``sys.path`` so
that the *installed* package (``.venv``) is measured, never the source tree, and
:func:`check_installed` fails loudly if that went wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"

# The source tree's mooncake_cffi/ has no built shim: never import it by accident.
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != REPO_ROOT]

import numpy as np  # noqa: E402

import mooncake_cffi  # noqa: E402
from mooncake_cffi import Client  # noqa: E402
from mooncake_cffi.cluster import LocalCluster  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
pc = time.perf_counter


def check_installed() -> str:
    """Path of the imported package; refuses the source tree."""
    path = Path(mooncake_cffi.__file__).resolve()
    if REPO_ROOT / "mooncake_cffi" in path.parents:
        raise SystemExit(
            f"bench: imported mooncake_cffi from the source tree ({path}); "
            "run with the venv's python from the repo root, e.g. .venv/bin/python bench/x.py"
        )
    return str(path.parent)


# ------------------------------------------------------------------ arguments


def parser(description: str, pin: str = "none") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="short smoke run (a few rounds)")
    p.add_argument(
        "--pin",
        choices=("split", "none"),
        default=pin,
        help="split: the cluster's processes on the last CPU, this process on the others "
        "(steadier small-call latency on a VM); none: leave placement to the scheduler "
        "(default %(default)s)",
    )
    p.add_argument(
        "--segment",
        default="2 GB",
        help="storage node segment size (Mooncake units: powers of 1024; default %(default)s)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="JSON output (default bench/out/NAME.json)"
    )
    return p


def add_instances(p: argparse.ArgumentParser) -> None:
    """``--instances K``: clients per contender, for :func:`mirrored_sets`."""
    p.add_argument(
        "--instances",
        type=_at_least_one,
        default=2,
        help="clients per contender, taken in turn by the rounds and created in a mirrored "
        "order (default %(default)s: two clients of one class differ by 10-15 %% in small "
        "calls for as long as they live)",
    )


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


T = TypeVar("T")


def mirrored_sets(sides: Sequence[str], make: Callable[[str], T], count: int) -> list[dict[str, T]]:
    """``count`` sets of one ``make(side)`` per side, each set keyed in ``sides``' order.

    Two clients of one class in one process differ by 10-15 % in small calls for as long as
    they live (where their connections landed on Mooncake's I/O threads), so a ratio of one
    client each measures that luck as much as the code.  The sets are made in a mirrored
    order (A B C, then C B A, ...), so that no side takes every even or every odd place;
    a benchmark takes them in turn, round ``r`` on set ``r % count``.
    """
    sets = []
    for k in range(count):
        made = {side: make(side) for side in (sides if k % 2 == 0 else sides[::-1])}
        sets.append({side: made[side] for side in sides})
    return sets


# ------------------------------------------------------------------ cluster


@contextlib.contextmanager
def cluster(segment: str | Sequence[str] = "2 GB", pin: str = "none") -> Iterator[LocalCluster]:
    """A LocalCluster in a temporary directory, stopped (and removed) on exit.

    ``pin="split"`` puts every thread of the cluster's processes on the last CPU and this
    thread (and the threads it starts from now on, the clients' included) on the others.
    On this project's 2-CPU VM a ~50 us cross-CPU wake-up otherwise comes and goes with the
    scheduler's placement, so the same Mooncake call measures 66 us for a few seconds and
    95 us the next; split, both clients see one placement and ratios repeat within a few %.
    """
    with tempfile.TemporaryDirectory(prefix="mcs-bench-") as tmp:
        local = LocalCluster(tmp, segment_size=segment)
        local.start()
        try:
            if pin == "split":
                split_cpus(local)
            yield local
        finally:
            local.stop()


def split_cpus(local: LocalCluster) -> None:
    """The cluster's threads on the last allowed CPU, this thread on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("bench: --pin split needs 2 CPUs; placement left to the scheduler", flush=True)
        return
    for proc in local.procs.values():
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))


def our_client(local: LocalCluster, **kwargs: Any) -> Client:
    """A Client of the cluster.  ``num_workers`` / ``per_op_workers`` go in the config;
    every other keyword goes to Client()."""
    extra = {k: kwargs.pop(k) for k in ("num_workers", "per_op_workers") if k in kwargs}
    return Client(local.client_config(**extra), **kwargs)


def their_store(local: LocalCluster, local_buffer_size: int = 16 * MiB) -> Any:
    """Mooncake's own Python client, set up like ours (TCP, contributes no memory)."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(
        "127.0.0.1",
        local.metadata_server,
        0,
        local_buffer_size,
        "tcp",
        "",
        local.master_addr,
    )
    if rc != 0:
        raise RuntimeError(f"MooncakeDistributedStore.setup failed: {rc}")
    return store


def dropin_store(local: LocalCluster, local_buffer_size: int = 16 * MiB) -> Any:
    """This package's drop-in ``mooncake_cffi.store.MooncakeDistributedStore``, set up exactly
    as :func:`their_store` sets up Mooncake's."""
    from mooncake_cffi.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(
        "127.0.0.1",
        local.metadata_server,
        0,
        local_buffer_size,
        "tcp",
        "",
        local.master_addr,
    )
    if rc != 0:
        raise RuntimeError(f"mooncake_cffi.store.MooncakeDistributedStore.setup failed: {rc}")
    return store


#: Each class's module, by the names the benchmarks that spawn processes give them.
IMPLS = {"ours": "mooncake_cffi.store", "theirs": "mooncake.store"}


def spawned_store(impl: str, metadata: str, master: str) -> Any:
    """A store of class ``impl`` (:data:`IMPLS`) set up as a stack sets it up (tcp, no
    segment of its own), from the addresses a spawned process is given."""
    module = __import__(IMPLS[impl], fromlist=["MooncakeDistributedStore"])
    store = module.MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, 0, 16 * MiB, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"{impl}: setup failed: {rc}")
    return store


def warm_segment(client: Client, nbytes: int, chunk: int = 4 * MiB) -> float:
    """Fault in the storage node's segment pages: put ``nbytes`` then remove it.

    The storage node maps its segment lazily: the first write to a page costs a page fault
    (measured: 0.1-0.35 GiB/s for first-touch puts against 0.8-1.0 GiB/s once warm), and
    Mooncake's allocator reuses freed space.  Benchmarks whose live data stays below
    ``nbytes`` then never pay first-touch faults.  Returns the seconds it took.
    """
    t0 = pc()
    src = np.ones(chunk, dtype=np.uint8)
    n = max(1, nbytes // chunk)
    keys = [f"__warm_{i}" for i in range(n)]
    for i in range(0, n, 16):
        part = keys[i : i + 16]
        res = client.put_from(part, [src] * len(part))
        bad = [r for r in res if r < 0]
        if bad:
            raise RuntimeError(f"warm-up put failed: {bad[0]} (segment too small?)")
    client.batch_remove(keys, force=True)
    return pc() - t0


class Arena:
    """One page-aligned numpy buffer cut into ``n`` slots of ``size`` bytes."""

    def __init__(self, n: int, size: int, fill: int | None = None) -> None:
        self.n, self.size = n, size
        raw = np.empty(n * size + 4096, dtype=np.uint8)
        off = (-raw.ctypes.data) % 4096
        self.buf = raw[off : off + n * size]
        self._raw = raw
        if fill is None:
            rng = np.random.default_rng(1234)
            self.buf[:] = rng.integers(0, 256, n * size, dtype=np.uint8)
        else:
            self.buf[:] = fill  # also faults every page in now
        self.base = self.buf.ctypes.data

    def views(self, count: int | None = None, start: int = 0) -> list[np.ndarray]:
        count = self.n - start if count is None else count
        return [
            self.buf[(start + i) * self.size : (start + i + 1) * self.size] for i in range(count)
        ]

    def ptrs(self, count: int | None = None, start: int = 0) -> list[int]:
        count = self.n - start if count is None else count
        return [self.base + (start + i) * self.size for i in range(count)]


# ------------------------------------------------------------------ statistics


def summarize(samples_s: Sequence[float]) -> dict[str, float]:
    """avg/p50/p90/p99/max in milliseconds of latencies given in seconds."""
    if not len(samples_s):
        return {
            "n": 0,
            "avg": float("nan"),
            "p50": float("nan"),
            "p90": float("nan"),
            "p99": float("nan"),
            "max": float("nan"),
        }
    a = np.asarray(samples_s, dtype=float) * 1e3
    return {
        "n": int(a.size),
        "avg": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


def ms_list(samples_s: Sequence[float]) -> list[float]:
    """Raw samples as milliseconds rounded to 0.1 us, for the JSON file."""
    return [round(x * 1e3, 4) for x in samples_s]


def quantile(xs: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``xs`` (p10 / p90 of paired ratios)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def ratio(a: float, b: float) -> float:
    return float(a / b) if b else float("nan")


# ------------------------------------------------------------------ output


def fmt(v: Any, digits: int = 3) -> str:
    if isinstance(v, float):
        if v != v:
            return "-"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 10:
            return f"{v:.2f}"
        return f"{v:.{digits}f}"
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """A GitHub-markdown table (also readable in a terminal); printed and returned."""
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]

    def line(cols: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    text = ("\n" + title + "\n" if title else "") + "\n".join(out)
    print(text, flush=True)
    return text


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except Exception:
        return "unknown"


def _installed_hashes() -> dict[str, str]:
    """Short sha256 of the installed shim and client (the tree may differ from the install)."""
    import hashlib

    out = {}
    pkg = Path(mooncake_cffi.__file__).resolve().parent
    for name in ("libmcs.so", "client.py", "aio.py"):
        try:
            out[name] = hashlib.sha256((pkg / name).read_bytes()).hexdigest()[:16]
        except OSError:
            out[name] = "missing"
    return out


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    try:
        from importlib.metadata import version

        wheel = version("mooncake-transfer-engine-non-cuda")
    except Exception:
        wheel = "unknown"
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mooncake_wheel": wheel,
        "mooncake_cffi": getattr(mooncake_cffi, "__version__", "?"),
        "mooncake_cffi_path": check_installed(),
        "git_commit": _git_commit(),
        "installed_sha256": _installed_hashes(),
        "loadavg_start": os.getloadavg(),
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv]),
    }


def write_json(
    name: str, data: dict[str, Any], out: Path | None = None, machine: dict[str, Any] | None = None
) -> Path:
    path = out or OUT_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = machine or machine_info()
    meta = {**meta, "loadavg_end": os.getloadavg()}
    path.write_text(json.dumps({"benchmark": name, "machine": meta, **data}, indent=1))
    print(f"\nwrote {path}", flush=True)
    return path


# ------------------------------------------------------------------ loopback bandwidth


def loopback_bandwidth(seconds: float = 1.0, chunk: int = MiB, streams: int = 1) -> float:
    """GiB/s of ``streams`` TCP connections over 127.0.0.1 (sendall / recv_into, GIL released).

    The ceiling that any TCP transfer on loopback on this machine can reach.
    """
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(streams)
    port = srv.getsockname()[1]
    total = [0] * streams
    stop = threading.Event()

    def sender() -> None:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = bytes(chunk)
        with s:
            while not stop.is_set():
                s.sendall(data)

    def receiver(conn: socket.socket, idx: int) -> None:
        buf = bytearray(chunk)
        view = memoryview(buf)
        with conn:
            while True:
                n = conn.recv_into(view)
                if not n:
                    break
                total[idx] += n

    senders = [threading.Thread(target=sender, daemon=True) for _ in range(streams)]
    for t in senders:
        t.start()
    conns = [srv.accept()[0] for _ in range(streams)]
    srv.close()
    receivers = [
        threading.Thread(target=receiver, args=(c, i), daemon=True) for i, c in enumerate(conns)
    ]
    for t in receivers:
        t.start()
    time.sleep(0.1)  # ramp up
    b0, t0 = sum(total), pc()
    time.sleep(seconds)
    b1, t1 = sum(total), pc()
    stop.set()
    for t in senders + receivers:
        t.join(timeout=5)
    return (b1 - b0) / (t1 - t0) / GiB


def thread_count() -> int:
    """Threads of this process (from /proc), including the ones Python does not know."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    t = os.times()
    return t.user + t.system


def banner(name: str, args: argparse.Namespace) -> dict[str, Any]:
    info = machine_info()
    print(
        f"# {name}  {info['date']}\n# {info['nproc']} cores, {info['cpu']}, {info['memory']}, "
        f"Python {info['python']}, wheel {info['mooncake_wheel']}, mooncake_cffi "
        f"{info['mooncake_cffi']} ({info['mooncake_cffi_path']}), commit {info['git_commit']}, "
        f"load {info['loadavg_start'][0]:.2f}\n# {info['command']}",
        flush=True,
    )
    return info


def thread_cpu(pid: int | None = None) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every thread of ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.find("(") + 1 : raw.rfind(")")]
        fields = raw[raw.rfind(")") + 2 :].split()
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tick)
    return out


def busiest_threads(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], top: int = 6
) -> list[tuple[int, str, float]]:
    """(tid, name, CPU seconds) of the threads that used the most CPU between two snapshots."""
    used = []
    for tid, (comm, cpu) in after.items():
        d = cpu - before.get(tid, (comm, 0.0))[1]
        if d > 0:
            used.append((tid, comm, round(d, 3)))
    used.sort(key=lambda x: -x[2])
    return used[:top]
