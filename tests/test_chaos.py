"""The chaos run, bounded: verified writes and reads from threads, asyncio, the drop-in and
another process while storage nodes are killed, frozen and restarted, the segments fill
until eviction and (HA) the leader master is killed (``bench/chaos.py``; its longer runs'
figures are in ``bench/RESULTS.md``).

Never: a read that returns bytes other than its key's value, a crash, a call that answers
later than its deadline plus the slack, a worker that does not stop. Lost acknowledged
writes are counted, not judged (eviction and killed nodes lose values by Mooncake's rules).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: The chaos script, run as its own process: its HA clients hold the process's one etcd
#: connection (Mooncake keeps one per process), and its setup writes Mooncake's RPC wait
#: into the environment; neither may leak into the tests that share this worker.
CHAOS = Path(__file__).resolve().parent.parent / "bench" / "chaos.py"

#: Long enough for every kind of fault at one every 3 s (seeds 0 and 3 draw each of them).
SECONDS = 30.0


@pytest.mark.parametrize(("ha", "seed"), [(False, 0), (True, 3)], ids=["one-master", "ha"])
def test_no_wrong_byte_crash_or_late_call_under_every_fault(ha, seed):
    argv = [sys.executable, str(CHAOS), "--seconds", str(SECONDS), "--seed", str(seed),
            "--every", "3"] + (["--ha"] if ha else [])  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.stdout.strip(), done.stderr[-3000:]
    summary = json.loads(done.stdout)
    print(
        f"\n[chaos {SECONDS:.0f} s, load {summary['load_at_start']:.1f}] "
        f"{summary['operations']} operations {summary['ops']}; faults {summary['faults']}; "
        f"acknowledged writes lost {summary['acknowledged_writes_lost']}; "
        f"threads left {summary['threads_left']}, fds left {summary['fds_left']}"
    )
    assert summary["wrong_reads"] == []
    assert summary["crashes"] == []
    assert summary["late_calls"] == []
    assert summary["hung_workers"] == []
    kinds = {f.split()[0] for f in summary["faults"]}
    assert kinds >= ({"kill", "freeze", "leader"} if ha else {"kill", "freeze", "fill"}), kinds
    ops = summary["ops"]
    assert ops.get("get right", 0) > 100 and ops.get("put ok", 0) > 100, ops
    assert summary["threads_left"] <= 0, summary
