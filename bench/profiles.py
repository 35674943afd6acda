"""The profiles behind RESULTS.md's explanations, reproducible with one command.

* ``spin``: a thread runs ``put_from`` / ``get_into`` of 64 x 1 MiB in a loop while
  ``py-spy dump --native`` samples it; prints which Mooncake frames the caller sits in
  (Mooncake busy-polls transfer completion: ``wait_for_completion`` / ``check_task_status``).
* ``shim``: a loop of raw single-key ``mcs_client_run`` exists calls under ``perf record``;
  prints the share of CPU samples per shared object (how much of a small call is the shim's
  own code).

Needs ``py-spy`` (``.venv/bin/pip install py-spy``) and ``perf`` (Debian: ``linux-perf``).

    .venv/bin/python bench/profiles.py            # both
    .venv/bin/python bench/profiles.py --only spin
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import Arena, MiB, banner, cluster, our_client, parser, table, warm_segment, write_json

from mooncake_cffi.capi import prepared_call


def _tool(name: str) -> str | None:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


def spin_profile(local: Any, dumps: int) -> dict[str, Any]:
    pyspy = _tool("py-spy")
    if not pyspy:
        return {"error": "py-spy not installed"}
    arena = Arena(128, MiB)
    c = our_client(local)
    warm_segment(c, 300 * MiB)
    stop = threading.Event()
    tid: list[int] = []

    def loop() -> None:
        tid.append(threading.get_native_id())
        r = 0
        while not stop.is_set():
            keys = [f"prof/{r}/{i}" for i in range(64)]
            r += 1
            c.put_from(keys, arena.views(64))
            c.get_into(keys, arena.views(64, 64))
            c.batch_remove(keys, force=True)

    th = threading.Thread(target=loop)
    th.start()
    time.sleep(0.5)
    frames: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for _ in range(dumps):
        out = subprocess.run(
            [pyspy, "dump", "--native", "--pid", str(os.getpid())],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        block = out.split(f"Thread {tid[0]}", 1)[-1].split("\nThread ", 1)[0]
        state = "active" if block.startswith(" (active)") else "idle"
        lines = [ln.strip().split(" (")[0] for ln in block.splitlines()[1:] if ln.strip()]
        if any("wait_for_completion" in ln for ln in lines):
            what = "waiting for its transfers (TransferEngineOperationState::wait_for_completion)"
        elif any("invoke_batch_rpc" in ln or "invoke_rpc" in ln for ln in lines):
            rpc = next(ln for ln in lines if "invoke_batch_rpc" in ln or "invoke_rpc" in ln)
            name = rpc.split("WrappedMasterService::", 1)[-1].split("(", 1)[0]
            what = f"master RPC {name}"
        elif any(ln.startswith("mooncake::") for ln in lines):
            what = "other Mooncake: " + next(ln for ln in lines if ln.startswith("mooncake::"))
        elif any(ln.startswith("clock_gettime") for ln in lines):
            # The unwinder stops in the vdso; the wait loop reads the clock every iteration.
            what = "inside the call, in clock_gettime (the polling loop; unwinding stops there)"
        elif any("mcs" in ln for ln in lines):
            what = "shim, outside Mooncake"
        else:
            what = "Python, outside the shim"
        frames[what] += 1
        calls[f"{what} [{state}]"] += 1
        time.sleep(0.05)
    stop.set()
    th.join()
    c.close()
    return {"dumps": dumps, "where": dict(frames), "where_and_state": dict(calls)}


def shim_profile(local: Any, seconds: float) -> dict[str, Any]:
    perf = shutil.which("perf")
    if not perf:
        return {"error": "perf not installed"}
    c = our_client(local)
    c.put("prof/key", b"x" * 4096)
    call = prepared_call(c, "exists", ["prof/key"])  # the shim call without the Python layer
    stop = threading.Event()
    count = [0]

    def loop() -> None:
        while not stop.is_set():
            call()
            count[0] += 1

    th = threading.Thread(target=loop)
    th.start()
    time.sleep(0.3)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.run(
            [
                perf,
                "record",
                "-F",
                "2000",
                "-g",
                "-p",
                str(os.getpid()),
                "-o",
                data,
                "--",
                "sleep",
                str(seconds),
            ],
            capture_output=True,
            text=True,
        )
        stop.set()
        th.join()
        rep = subprocess.run(
            [perf, "report", "-i", data, "--no-children", "-g", "none", "--sort", "dso", "--stdio"],
            capture_output=True,
            text=True,
        )
    c.close()
    shares = {}
    for line in rep.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            shares[" ".join(parts[1:])] = float(parts[0].rstrip("%"))
    if not shares:
        return {"error": (rec.stderr + rep.stderr)[-500:]}
    return {"calls": count[0], "dso_share_percent": shares}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=("spin", "shim"), default=None)
    p.add_argument("--dumps", type=int, default=30, help="py-spy dumps for 'spin'")
    p.add_argument("--seconds", type=float, default=3.0, help="perf record time for 'shim'")
    args = p.parse_args()
    if args.quick:
        args.dumps, args.seconds = 8, 1.0
    info = banner("profiles", args)
    result: dict[str, Any] = {}
    with cluster(args.segment, args.pin) as local:
        if args.only in (None, "spin"):
            result["spin"] = spin_profile(local, args.dumps)
        if args.only in (None, "shim"):
            result["shim"] = shim_profile(local, args.seconds)
    if "spin" in result:
        sp = result["spin"]
        if "error" in sp:
            print(f"spin: {sp['error']}")
        else:
            table(
                ["where the calling thread was [py-spy thread state]", "dumps"],
                sorted(sp["where_and_state"].items(), key=lambda x: -x[1]),
                title=f"spin: {sp['dumps']} py-spy dumps of a thread looping 64 x 1 MiB "
                "put_from/get_into",
            )
    if "shim" in result:
        sh = result["shim"]
        if "error" in sh:
            print(f"shim: {sh['error']}")
        else:
            table(
                ["shared object", "% of CPU samples"],
                sorted(sh["dso_share_percent"].items(), key=lambda x: -x[1]),
                title=f"shim: perf, {sh['calls']} raw mcs_client_run exists calls",
            )
    write_json("profiles", result, out=args.out, machine=info)


if __name__ == "__main__":
    main()
