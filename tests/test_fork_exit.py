"""A child forked from a process with a client open exits as it would without one: its exit
code and its buffered output intact, its Python atexit handlers run, no SIGSEGV from
Mooncake's exit teardown of the parent's client (nothing of Mooncake's runs in the child's
exit).  Each scenario runs in a process of its own, bounded by a timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from mooncake_cffi.cluster import LocalCluster

# The parent: opens `kind`, forks children that print, register an atexit handler and
# leave through sys.exit (or return from a multiprocessing target), and prints their
# statuses as JSON on its last line.
PARENT = r"""
import atexit, json, multiprocessing, os, sys
config = json.loads(sys.argv[2])
kind = sys.argv[1]

def setup_args():
    return ("127.0.0.1", config["metadata_server"], 0, 16 << 20, "tcp", "",
            config["master_server_addr"])

opened = []
if kind in ("client", "both"):
    from mooncake_cffi import Client
    opened.append(Client(config))
if kind == "async":
    import asyncio
    from mooncake_cffi import AsyncClient
    aclient = AsyncClient(config)
    asyncio.run(aclient.put("fork-exit-async", b"v"))
    opened.append(aclient)
if kind == "drop-in":
    from mooncake_cffi.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    assert store.setup(*setup_args()) == 0
    opened.append(store)
if kind in ("mooncake", "both"):
    if kind == "mooncake":
        import mooncake_cffi  # imported, but no client of ours
    import mooncake.store
    theirs = mooncake.store.MooncakeDistributedStore()
    assert theirs.setup(*setup_args()) == 0
    opened.append(theirs)
if kind == "closed":
    from mooncake_cffi import Client
    Client(config).close()
sys.stdout.flush()

statuses = {}
for code in (0, 0, 3):
    pid = os.fork()
    if pid == 0:
        atexit.register(lambda: print(f"atexit {os.getpid()} {code}"))
        print(f"child {os.getpid()} {code}")  # block-buffered: stdout is a pipe
        sys.exit(code)
    statuses[pid] = os.waitpid(pid, 0)[1]

def target(code):
    print(f"mp child {os.getpid()} {code}", flush=True)
    sys.exit(code)

mp_codes = []
ctx = multiprocessing.get_context("fork")
for code in (0, 5):
    p = ctx.Process(target=target, args=(code,))
    p.start()
    p.join(60)
    mp_codes.append(p.exitcode)

for obj in opened:
    if kind == "async":
        asyncio.run(obj.aclose())
    else:
        obj.close()
print(json.dumps({"statuses": statuses, "mp": mp_codes}))
"""


def run_parent(kind: str, cluster: LocalCluster) -> tuple[dict[str, Any], str]:
    """Run the parent for ``kind``; its report and its whole stdout.  A hang fails."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", PARENT, kind, json.dumps(cluster.client_config())],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{kind}: the parent or a child hung for 120 s: {e.stdout!r}"
        ) from None
    assert done.returncode == 0, (kind, done.returncode, done.stdout, done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1]), done.stdout


def describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


@pytest.mark.parametrize("kind", ["client", "async", "drop-in", "closed"])
def test_a_forked_child_exits_as_without_a_client(cluster: LocalCluster, kind: str) -> None:
    report, out = run_parent(kind, cluster)
    seen = {pid: describe(s) for pid, s in report["statuses"].items()}
    assert sorted(seen.values()) == ["exit 0", "exit 0", "exit 3"], (kind, seen)
    for pid, status in report["statuses"].items():
        code = os.WEXITSTATUS(status)
        # its buffered print and its atexit handler's reached the pipe, once each
        assert out.count(f"child {pid} {code}\n") == 1, out
        assert out.count(f"atexit {pid} {code}\n") == 1, out
    assert report["mp"] == [0, 5], (kind, report)
    assert out.count("mp child ") == 2


@pytest.mark.parametrize("kind", ["mooncake", "both"])
def test_with_mooncakes_own_class_open_a_child_may_still_crash(
    cluster: LocalCluster, kind: str
) -> None:
    """Not our promise, stated as measured: with Mooncake's own class open in the parent
    (alone, our package imported; or next to a client of ours) a child exiting through
    sys.exit dies of SIGSEGV (3 of 3 here): Python's finalization in the child destroys the
    child's copy of Mooncake's object, whose destructor joins the parent's threads, before
    any exit handler runs.  Nothing hangs, and multiprocessing's children, which leave by
    os._exit, exit as they should."""
    report, _ = run_parent(kind, cluster)
    seen = {pid: describe(s) for pid, s in report["statuses"].items()}
    codes = iter([0, 0, 3])
    for pid in report["statuses"]:
        assert seen[pid] in (f"exit {next(codes)}", "killed by SIGSEGV"), seen
    assert report["mp"] == [0, 5]
