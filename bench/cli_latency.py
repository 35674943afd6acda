"""Wall time of single-key mcl2 commands, and what 200 invocations leave behind.

Starts its own :class:`LocalCluster` in a temporary directory, stores a small key and a
1 MiB key with mcl2, then times, as separate processes (interpreter start included):

* ``mcl2 exists KEY``
* ``mcl2 get KEY -o /dev/null`` (1 MiB value)

``--runs`` times each (default 30), and prints median / p90 / max; the target is a median of
at most 0.5 s.  The commands find the cluster through ``MCL2_STATE_DIR``, as a user's
``mcl2`` finds the one ``mcl2 cluster up`` started.

Then it checks that nothing is left behind.  Before and after ``--invocations`` (default
200, the timed runs included) it reads the master's ``master_active_clients`` (``/metrics``)
and counts the entries of the HTTP metadata server that belong to clients on 127.0.0.1
(``mooncake/ram/127.0.0.1:P`` and ``mooncake/rpc_meta/127.0.0.1:P`` for every P in Mooncake's
client port range 12300..14300; the storage node's two entries are the baseline).  Once the
master's client TTL has passed (read from its log, 10 s by default) both must be back to
their baseline.  (Observed with wheel 0.3.13.post1: the master counts only clients that mount
a segment, so mcl2's clients, which contribute none, never show in ``master_active_clients``;
the metadata entries are what a skipped teardown would leak.  A control run first shows the
scan sees the two entries a client killed without any cleanup leaves, and removes them.)

    .venv/bin/python bench/cli_latency.py
    .venv/bin/python bench/cli_latency.py --runs 10 --invocations 50   # quicker

Results go to ``bench/out/cli_latency.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"

# Never measure the source tree (it has no built shim): drop the repo root from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != REPO_ROOT]

from mooncake_cffi.cluster import LocalCluster  # noqa: E402

CLIENT_PORTS = range(12300, 14301)
ENTRY_KINDS = ("ram", "rpc_meta")
TARGET_MEDIAN_S = 0.5
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def mcl2_path() -> Path:
    here = Path(sys.executable).with_name("mcl2")
    if here.exists():
        return here
    found = shutil.which("mcl2")
    if not found:
        raise SystemExit("bench: cannot find the mcl2 console script; run ./scripts/install.sh")
    return Path(found)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def active_clients(local: LocalCluster) -> int | None:
    return local.status().get("active_clients")


def metadata_entries(metadata_server: str) -> list[str]:
    """Keys of 127.0.0.1 clients present in the HTTP metadata server (a full port scan)."""
    present = []
    for port in CLIENT_PORTS:
        for kind in ENTRY_KINDS:
            key = f"mooncake/{kind}/127.0.0.1:{port}"
            url = f"{metadata_server}?key={urllib.parse.quote(key, safe='')}"
            try:
                with _HTTP.open(url, timeout=2) as response:
                    if response.status == 200:
                        present.append(key)
            except urllib.error.HTTPError as exc:
                exc.close()
            except OSError:
                pass
    return present


def client_ttl(local: LocalCluster) -> int:
    try:
        text = local.master_log.read_text(errors="replace")
    except OSError:
        return 10
    match = re.search(r"client_ttl=(\d+)", text)
    return int(match.group(1)) if match else 10


def run(argv: list[str], env: dict[str, str], stdin: bytes | None = None) -> tuple[float, Any]:
    started = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False)
    return time.perf_counter() - started, proc


def timed(label: str, argv: list[str], env: dict[str, str], runs: int) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        seconds, proc = run(argv, env)
        if proc.returncode != 0:
            raise SystemExit(
                f"bench: {' '.join(argv)} exited with {proc.returncode}: {proc.stderr.decode()}"
            )
        if proc.stderr:
            raise SystemExit(f"bench: {label} printed on stderr: {proc.stderr.decode()!r}")
        samples.append(seconds)
    return {
        "label": label,
        "argv": argv,
        "runs": runs,
        "median_s": statistics.median(samples),
        "p90_s": percentile(samples, 0.9),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30, help="timed runs per command (default 30)")
    ap.add_argument("--invocations", type=int, default=200, help="mcl2 processes in the leak check")
    ap.add_argument("--segment-size", default="256 MB")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "cli_latency.json")
    args = ap.parse_args()

    mcl2 = str(mcl2_path())
    workdir = Path(tempfile.mkdtemp(prefix="mcl2-bench-"))
    local = LocalCluster(workdir / "cluster", segment_size=args.segment_size)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCL2_")}
    env["MCL2_STATE_DIR"] = str(local.state_dir)
    print(f"starting a local cluster in {local.state_dir} ...", flush=True)
    local.start()
    try:
        ttl = client_ttl(local)
        value = os.urandom(1 << 20)
        for key, data in (("bench-small", b"x"), ("bench-1mib", value)):
            _, proc = run([mcl2, "put", "--overwrite", key], env, stdin=data)
            if proc.returncode != 0:
                raise SystemExit(f"bench: put {key} failed: {proc.stderr.decode()}")
        _, check = run([mcl2, "get", "bench-1mib"], env)
        assert check.stdout == value, "the 1 MiB value did not round-trip"

        control = leak_control(local, env)

        # Let the setup clients expire, then take the baseline.
        print(f"waiting for the master's client TTL ({ttl} s) before the baseline ...", flush=True)
        baseline_clients = wait_clients(local, target=None, timeout=ttl + 20)
        baseline_entries = metadata_entries(local.metadata_server)

        python_start, _ = run([sys.executable, "-c", "pass"], env)
        help_time = statistics.median(run([mcl2, "--help"], env)[0] for _ in range(5))
        results = [
            timed("mcl2 exists KEY", [mcl2, "exists", "bench-small"], env, args.runs),
            timed(
                "mcl2 get KEY -o /dev/null (1 MiB)",
                [mcl2, "get", "bench-1mib", "-o", os.devnull],
                env,
                args.runs,
            ),
        ]
        done = 2 * args.runs + 5 + 1  # timed runs, --help (no client), the round-trip check
        extra = max(0, args.invocations - 2 * args.runs)
        for i in range(extra):
            argv = (
                [mcl2, "exists", "bench-small"]
                if i % 2
                else [mcl2, "get", "bench-1mib", "-o", os.devnull]
            )
            run(argv, env)
        invocations = 2 * args.runs + extra
        print(f"ran {invocations} client invocations (+{done - 2 * args.runs} others)", flush=True)

        right_after_clients = active_clients(local)
        right_after_entries = metadata_entries(local.metadata_server)
        t0 = time.monotonic()
        time.sleep(ttl + 2)  # the master's client TTL must pass before the "after" figures
        after_clients = wait_clients(local, target=baseline_clients, timeout=ttl * 3 + 30)
        settle_s = time.monotonic() - t0
        after_entries = metadata_entries(local.metadata_server)
    finally:
        local.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(f"{'command':<36} {'runs':>4} {'median':>8} {'p90':>8} {'min':>8} {'max':>8}")
    for r in results:
        print(
            f"{r['label']:<36} {r['runs']:>4} {r['median_s']:>7.3f}s {r['p90_s']:>7.3f}s "
            f"{r['min_s']:>7.3f}s {r['max_s']:>7.3f}s"
        )
    print(f"(python -c pass: {python_start:.3f}s; mcl2 --help, no client: {help_time:.3f}s)")
    ok_latency = all(r["median_s"] <= TARGET_MEDIAN_S for r in results)
    print(f"target median <= {TARGET_MEDIAN_S}s: {'met' if ok_latency else 'MISSED'}")
    print()
    print(f"leak check over {invocations} invocations (client TTL {ttl} s):")
    print(
        f"  active clients   baseline {baseline_clients}, right after {right_after_clients}, "
        f"after the TTL {after_clients} ({settle_s:.1f} s later)"
    )
    print(
        f"  metadata entries baseline {len(baseline_entries)}, right after "
        f"{len(right_after_entries)}, after the TTL {len(after_entries)}"
    )
    ok_leak = after_clients == baseline_clients and sorted(after_entries) == sorted(
        baseline_entries
    )
    print(f"  back to baseline: {'yes' if ok_leak else 'NO'}")

    report = {
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "target_median_s": TARGET_MEDIAN_S,
        "latency": results,
        "python_start_s": python_start,
        "help_median_s": help_time,
        "leak_check": {
            "invocations": invocations,
            "client_ttl_s": ttl,
            "active_clients": {
                "baseline": baseline_clients,
                "right_after": right_after_clients,
                "after_ttl": after_clients,
                "settle_s": settle_s,
            },
            "metadata_entries": {
                "baseline": baseline_entries,
                "right_after": right_after_entries,
                "after_ttl": after_entries,
            },
            "back_to_baseline": ok_leak,
            "control": control,
        },
        "latency_target_met": ok_latency,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if not (ok_latency and ok_leak):
        sys.exit(1)


_CONTROL = """
import os, sys
from mooncake_cffi import Client
client = Client(dict(local_hostname="127.0.0.1", metadata_server=sys.argv[1],
                     master_server_addr=sys.argv[2], protocol="tcp", global_segment_size="0"))
print(client.hostname, flush=True)
os._exit(0)  # no close at all: Mooncake's entries stay behind
"""


def leak_control(local: LocalCluster, env: dict[str, str]) -> dict[str, Any]:
    """Show that the scan sees what a client that exits without any cleanup leaves behind,
    then remove those entries with mooncake_cffi.metadata.forget_client."""
    from mooncake_cffi.metadata import forget_client

    before = metadata_entries(local.metadata_server)
    proc = subprocess.run(
        [sys.executable, "-c", _CONTROL, local.metadata_server, local.master_addr],
        capture_output=True,
        env=env,
        cwd=local.state_dir,  # not the repo root: its mooncake_cffi/ would shadow the venv's
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench: the control client failed: {proc.stderr.decode()}")
    hostname = proc.stdout.decode().strip()
    leaked = metadata_entries(local.metadata_server)
    deleted = forget_client(local.metadata_server, hostname)
    cleaned = metadata_entries(local.metadata_server)
    print(
        f"control: a client killed without cleanup left {len(leaked) - len(before)} "
        f"metadata entries; forget_client deleted {len(deleted)}",
        flush=True,
    )
    return {
        "hostname": hostname,
        "entries_before": len(before),
        "entries_left_by_unclean_exit": len(leaked),
        "deleted_by_forget_client": deleted,
        "entries_after_forget": len(cleaned),
    }


def wait_clients(local: LocalCluster, target: int | None, timeout: float) -> int | None:
    """Poll master_active_clients until it equals ``target`` (or, with None, until it stops
    falling and is at most 1: the storage node) or ``timeout`` passes; return the last value."""
    deadline = time.monotonic() + timeout
    value = active_clients(local)
    while time.monotonic() < deadline:
        if target is not None and value == target:
            return value
        if target is None and value is not None and value <= 1:
            return value
        time.sleep(0.5)
        value = active_clients(local)
    return value


if __name__ == "__main__":
    main()
