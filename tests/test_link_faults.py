"""Link faults between a client and the cluster, on the namespace topology (root only).

The master and metadata server run on host ``m0``, the storage node on ``s0``, and the client
under test in a process of its own on ``c0`` (a Mooncake client cannot leave its process, and
a process has one network namespace).  The test drives it over JSON lines (``WORKER``).

- a cut between the client and the master, or the storage node: every call answers within its
  deadline + 1 s with a typed, retryable error (calls that need only the master may succeed
  while the storage node is cut off); once healed, calls succeed again within a few seconds
  on the same client;
- 5 % random loss on the client's link during a checksummed mixed workload: no read returns
  other bytes than were written, no acknowledged write is lost, every call answers in time;
- the client's link shaped to 50 Mbit/s: large puts and gets finish intact or time out by
  their deadline, and a timed-out transfer still ends (``in_flight`` drops) without harm.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.topology import Topology

pytestmark = pytest.mark.usefixtures("netns")

SLACK = 1.0  # an answer may come this long after the call's deadline
CUT_DEADLINE = 1.0  # op_timeout of the clients in the partition tests (seconds)
#: How soon a cut-off node's keys must stop counting as hits: the node-health monitor's worst
#: case (PROBE_EVERY + FRESH_FOR, 0.4 s) and slack for a loaded machine.
STALE_LIMIT = 1.4
MiB = 1 << 20

# The client process: one JSON command per line in, one JSON answer per line out.  Values are
# derived from their key and size, so every read is checked against what was written.
WORKER = r"""
import asyncio, hashlib, json, os, random, sys, threading, time
import mooncake_cffi as mc
from mooncake_cffi import AsyncClient, Client, MooncakeError

client = Client(json.loads(sys.argv[1]), **json.loads(sys.argv[2]))
loop = asyncio.new_event_loop()
aclient = AsyncClient(client)

def value(key, size):
    return random.Random(f"{key}/{size}").randbytes(size)

def verdict(key, size, got):
    if got is None:
        return "miss"
    return "match" if bytes(got) == value(key, size) else f"wrong:{len(got)}"

def codes(results):
    return [r if r >= 0 else mc.error_name(r) for r in results]

def run(op, keys=(), size=0, **kw):
    c = client
    if op == "put":
        return c.put(keys[0], value(keys[0], size), **kw)
    if op == "get":
        return verdict(keys[0], size, c.get(keys[0], **kw))
    if op in ("exists", "remove", "size"):
        return getattr(c, op)(keys[0], **kw)
    if op == "batch_put":
        return codes(c.batch_put(keys, [value(k, size) for k in keys], **kw))
    if op == "batch_get":
        return [verdict(k, size, g) for k, g in zip(keys, c.batch_get(keys, **kw))]
    if op == "batch_exists":
        return c.batch_exists(keys, **kw)
    if op == "batch_remove":
        return codes(c.batch_remove(keys, **kw))
    if op == "put_from":
        return codes(c.put_from(keys, [bytearray(value(k, size)) for k in keys], **kw))
    if op == "get_into":
        bufs = [bytearray(size) for _ in keys]
        res = c.get_into(keys, bufs, **kw)
        return [verdict(k, size, b[:r]) if r >= 0 else mc.error_name(r)
                for k, b, r in zip(keys, bufs, res)]
    if op in ("aget", "aexists", "aput"):
        fn = getattr(aclient, op[1:])
        args = (keys[0], value(keys[0], size)) if op == "aput" else (keys[0],)
        got = loop.run_until_complete(fn(*args, **kw))
        return verdict(keys[0], size, got) if op == "aget" else got
    if op == "in_flight":  # let the event loop drain AsyncClient's completions first
        loop.run_until_complete(asyncio.sleep(0.05))
        return c.in_flight
    if op == "workload":
        return workload(**kw)
    if op == "parallel":
        return parallel(keys, size, **kw)
    raise ValueError(op)

def parallel(keys, size, call, threads, repeat, **kw):
    # `call` from `threads` threads at once, `repeat` times each, on keys taken in turn:
    # each call's error name (or "ok"), message and time.
    out, lock = [], threading.Lock()
    def one(n):
        for r in range(repeat):
            start = time.monotonic()
            try:
                run(call, [keys[(n + r * threads) % len(keys)]], size, **kw)
                answer = {"result": "ok"}
            except MooncakeError as exc:
                answer = {"error": exc.name, "message": str(exc)[:300]}
            answer["took"] = time.monotonic() - start
            with lock:
                out.append(answer)
    ts = [threading.Thread(target=one, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out

def workload(seconds, seed, sizes):
    # Mixed puts / gets / batch gets / exists / removes on fresh keys for `seconds`: counts
    # calls, errors by name, reads of other bytes, and each call's overrun of its deadline.
    rng = random.Random(seed)
    acked, unsure, stats = {}, {}, {"calls": 0, "ok": 0, "errors": {}, "wrong": [], "late": 0.0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pick = rng.random()
        start = time.monotonic()
        try:
            if pick < 0.35 or not acked:
                keys = [f"loss-{seed}-{stats['calls']}-{i}" for i in range(rng.choice((1, 4)))]
                size = rng.choice(sizes)
                for k in keys:
                    unsure[k] = size
                res = client.batch_put(keys, [value(k, size) for k in keys])
                for k, r in zip(keys, res):
                    if r == 0:
                        acked[k] = unsure.pop(k)
                    else:
                        name = mc.error_name(r)
                        stats["errors"][name] = stats["errors"].get(name, 0) + 1
            elif pick < 0.75:
                keys = rng.sample(sorted(acked), min(4, len(acked)))
                for k, got in zip(keys, client.batch_get(keys)):
                    if verdict(k, acked[k], got) != "match":
                        stats["wrong"].append(f"{k}: {verdict(k, acked[k], got)}")
            elif pick < 0.9:
                keys = rng.sample(sorted(acked), min(8, len(acked)))
                if not all(client.batch_exists(keys)):
                    stats["wrong"].append(f"an acknowledged key is missing among {keys}")
            else:
                k = rng.choice(sorted(acked))
                size = acked.pop(k)
                unsure[k] = size
                client.remove(k, force=True)
                unsure.pop(k)
            stats["ok"] += 1
        except MooncakeError as exc:
            stats["errors"][exc.name] = stats["errors"].get(exc.name, 0) + 1
            if not exc.retryable:
                stats["wrong"].append(f"non-retryable {exc!r}")
        stats["calls"] += 1
        stats["late"] = max(stats["late"], time.monotonic() - start - client.op_timeout)
    globals()["_model"] = (acked, unsure)
    return stats

def verify(timeout):
    # After the fault: every acknowledged write reads back intact; unsure keys (a write or
    # remove that failed or timed out) are a miss or what was written.
    acked, unsure = globals()["_model"]
    out = {"acked": len(acked), "lost": [], "wrong": [], "unsure": len(unsure)}
    for group, must in ((acked, True), (unsure, False)):
        keys = sorted(group)
        for i in range(0, len(keys), 16):
            part = keys[i:i + 16]
            for k, got in zip(part, client.batch_get(part, timeout=timeout)):
                v = verdict(k, group[k], got)
                if v == "miss" and must:
                    out["lost"].append(k)
                elif v.startswith("wrong"):
                    out["wrong"].append(f"{k}: {v}")
    return out

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    start = time.monotonic()
    answer = {"op": cmd["op"]}
    try:
        if cmd["op"] == "verify":
            answer["result"] = verify(**cmd.get("kw", {}))
        else:
            answer["result"] = run(cmd["op"], cmd.get("keys", ()), cmd.get("size", 0),
                                   **cmd.get("kw", {}))
    except MooncakeError as exc:
        answer.update(error=exc.name, cls=type(exc).__name__, retryable=exc.retryable,
                      message=str(exc)[:300],
                      typed=isinstance(exc, (mc.MooncakeTimeoutError, mc.TransportError)))
    answer["took"] = time.monotonic() - start
    print(json.dumps(answer), flush=True)
client.close_for_exit()
os._exit(0)
"""


class Worker:
    """The client process on host ``c0``; :meth:`call` sends one command and waits (bounded)."""

    def __init__(
        self,
        t: Topology,
        cluster: LocalCluster,
        cwd: Path,
        config: dict[str, Any] | None = None,
        host: str = "c0",
        env_extra: dict[str, str] | None = None,
        **client_kwargs: Any,
    ) -> None:
        env = {**os.environ, **cluster.client_env()}
        # Mooncake's waits as this test's process may have left them (its earlier clients'
        # op_timeout, in a parallel run) are not the client's under test: it sets its own.
        for name in ("MC_RPC_TIMEOUT_MS", "MC_TCP_STATUS_TIMEOUT_SEC"):
            env.pop(name, None)
        env.update(env_extra or {})
        for name in ("MCS_BIND_ADDRESS", "MC_TCP_BIND_ADDRESS"):  # the loopback preload's
            if name in env:
                env[name] = t.ip(host)
        config = {"local_hostname": t.ip(host), **(config or {})}
        argv = [sys.executable, "-c", WORKER, json.dumps(cluster.client_config(**config))]
        self.log = cwd / f"worker-{len(list(cwd.glob('worker-*')))}.log"
        self.proc = t.run_in(
            host,
            [*argv, json.dumps(client_kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            stderr=self.log.open("wb"),
            env=env,
            cwd=cwd,  # not the source tree: import the installed package
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert json.loads(self._next(60.0)) == {"ready": True}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _next(self, limit: float) -> str:
        try:
            line = self._lines.get(timeout=limit)
        except queue.Empty:
            raise AssertionError(f"the client process gave no answer within {limit} s") from None
        if not line:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"the client process exited ({self.proc.poll()}): {tail}")
        return line

    def call(self, op: str, keys: list[str] = (), size: int = 0, limit: float = 60.0, **kw):
        """Run ``op`` in the client process; its answer (``result`` or ``error``, ``took``)."""
        assert self.proc.stdin is not None
        msg = {"op": op, "keys": list(keys), "size": size, "kw": kw}
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._next(limit))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture(scope="module")
def net(
    netns: None, make_module_cluster: Callable[..., LocalCluster]
) -> Iterator[tuple[Topology, LocalCluster]]:
    """Master and metadata on m0, a 512 MB storage node on s0, clients on c0 (and c1)."""
    with Topology(hosts=["m0", "s0", "c0", "c1"]) as t:
        place = t.placement({"metadata": "m0", "master": "m0", "storage": "s0"})
        cluster = make_module_cluster("512 MB", placement=place, client_host=t.ip("c0"))
        cluster.start()
        try:
            yield t, cluster
        finally:
            cluster.stop()  # before the hosts go


@pytest.fixture
def worker(net, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A factory of client processes on c0 (closed, and links healed, after the test)."""
    t, cluster = net
    made: list[Worker] = []

    def make(**client_kwargs: Any) -> Worker:
        made.append(Worker(t, cluster, tmp_path, **client_kwargs))
        return made[-1]

    try:
        yield make
    finally:
        t.heal()
        for w in made:
            w.close()


#: (op, keys, size): every operation, single and batch, blocking and asyncio.
CALLS = [
    ("exists", ["old-0"], 0),
    ("get", ["old-0"], 300_000),
    ("size", ["old-1"], 0),
    ("put", ["cut-new-0"], 4096),
    ("remove", ["old-2"], 0),
    ("batch_exists", ["old-0", "old-1"], 0),
    ("batch_get", ["old-0", "old-1"], 300_000),
    ("batch_put", ["cut-new-1", "cut-new-2"], 4096),
    ("batch_remove", ["old-3"], 0),
    ("put_from", ["cut-new-3"], 4096),
    ("get_into", ["old-0"], 300_000),
    ("aexists", ["old-0"], 0),
    ("aget", ["old-0"], 300_000),
    ("aput", ["cut-new-4"], 4096),
]
#: Operations that need only the master: they may succeed while the storage node is cut off.
MASTER_ONLY = {"exists", "size", "remove", "batch_exists", "batch_remove", "aexists"}


def _failed_typed(answer: dict[str, Any]) -> bool:
    """A typed error: raised, or every per-key status of a batch a transport failure."""
    if "error" in answer:
        return bool(answer["typed"] and answer["retryable"])
    result = answer.get("result")
    return (
        isinstance(result, list)
        and bool(result)
        and all(r in ("TRANSFER_FAIL", "RPC_FAIL", "RPC_TIMEOUT") for r in result)
    )


def _cut_and_heal(t: Topology, w: Worker, peer: str, deadline: float) -> None:
    tag = f"cut-{peer}-{os.urandom(3).hex()}"
    old = [f"{tag}-old-{i}" for i in range(4)]
    assert w.call("batch_put", old, 300_000)["result"] == [0] * 4
    t.cut("c0", peer)
    answers = []
    for op, keys, size in CALLS:
        answer = w.call(op, [f"{tag}-{k}" for k in keys], size, limit=deadline + 30)
        answers.append(answer)
        assert answer["took"] <= deadline + SLACK, answer
        if op in MASTER_ONLY and peer == "s0" and "error" not in answer:
            continue
        assert _failed_typed(answer), answer
    t.heal()
    healed = time.monotonic()
    while True:  # the same client: new writes land, old keys read back
        results = [
            w.call("put", [f"{tag}-healed"], 4096),
            w.call("get", [f"{tag}-healed"], 4096),
            w.call("get", [old[0]], 300_000),
        ]
        if [a.get("result") for a in results] == [None, "match", "match"]:
            break
        assert not any(str(a.get("result")).startswith("wrong") for a in results), results
        assert time.monotonic() - healed < 10, results
        time.sleep(0.2)
    recovered = time.monotonic() - healed
    assert w.call("batch_get", old[:2], 300_000)["result"] == ["match", "match"]
    while w.call("in_flight")["result"]:  # the timed-out batches end too, releasing buffers
        assert time.monotonic() - healed < 60, "timed-out batches still running 60 s after"
        time.sleep(0.5)
    drained = time.monotonic() - healed
    summary = ", ".join(f"{a['op']} {a.get('error', 'ok')} {a['took']:.2f}s" for a in answers)
    print(
        f"\n[cut c0-{peer}] {summary}; calls succeed again {recovered:.1f} s after the heal,"
        f" the timed-out batches ended after {drained:.1f} s"
    )


def test_cut_from_master_every_call_answers_by_its_deadline_then_recovers(net, worker):
    t, _ = net
    _cut_and_heal(t, worker(op_timeout=CUT_DEADLINE), "m0", CUT_DEADLINE)


def test_cut_from_storage_node_every_call_answers_by_its_deadline_then_recovers(net, worker):
    t, _ = net
    _cut_and_heal(t, worker(op_timeout=CUT_DEADLINE), "s0", CUT_DEADLINE)


def test_five_percent_loss_loses_and_corrupts_nothing(net, worker):
    """15 s of mixed puts, batch gets, exists and removes with 5 % of c0's packets dropped."""
    t, _ = net
    deadline = 3.0
    lanes = {"per_op_workers": {"lookup": 1, "retrieve": 2, "store": 2}}
    w = worker(config=lanes, op_timeout=deadline)
    t.loss("c0", 5)
    sizes = [1024, 65_536, 512 * 1024, 2 * MiB]
    stats = w.call("workload", limit=60, seconds=15.0, seed=5, sizes=sizes)["result"]
    t.heal()
    check = w.call("verify", limit=120, timeout=20.0)["result"]
    print(
        f"\n[5 % loss] {stats['calls']} calls, {stats['ok']} ok, errors {stats['errors']}, "
        f"worst overrun {stats['late']:.2f} s; {check['acked']} acknowledged writes checked, "
        f"{len(check['lost'])} lost, {check['unsure']} unsure"
    )
    assert stats["late"] <= SLACK, stats
    assert not stats["wrong"], stats["wrong"][:10]
    assert not check["wrong"], check["wrong"][:10]
    assert not check["lost"], check["lost"][:10]
    assert stats["ok"] >= 50 and check["acked"] >= 20, (stats, check)


def test_50_mbit_link_large_values_finish_intact_or_time_out_cleanly(net, worker):
    """At 50 Mbit/s (6.25 MB/s) an 8 MiB value takes ~1.4 s and a 32 MiB one ~5.4 s."""
    t, _ = net
    w = worker(op_timeout=10.0)
    tag = f"rate-{os.urandom(3).hex()}"
    t.rate("c0", 50)
    small, big = f"{tag}-8m", f"{tag}-32m"
    fits = w.call("put", [small], 8 * MiB)
    assert "error" not in fits and fits["took"] > 0.8, fits  # the link really is slow
    assert w.call("get", [small], 8 * MiB)["result"] == "match"
    answers = [
        w.call("put", [big], 32 * MiB, timeout=2.0),  # cannot finish in time
        w.call("get", [small], 8 * MiB, timeout=0.5),
        w.call("batch_get", [small], 8 * MiB, timeout=0.5),
        w.call("get_into", [small], 8 * MiB, timeout=0.5),
    ]
    for answer, deadline in zip(answers, (2.0, 0.5, 0.5, 0.5), strict=True):
        assert answer.get("error") == "MCS_E_TIMEOUT", answer
        assert deadline <= answer["took"] <= deadline + SLACK, answer
    start = time.monotonic()  # the timed-out transfers go on, and end
    while w.call("in_flight")["result"]:
        assert time.monotonic() - start < 60, "timed-out transfers never ended"
        time.sleep(0.5)
    drained = time.monotonic() - start
    # The timed-out put either landed whole or not at all; the small value is intact.
    got = w.call("get", [big], 32 * MiB, timeout=20.0)
    assert got.get("result") in ("match", "miss"), got
    assert w.call("batch_get", [small], 8 * MiB, timeout=10.0)["result"] == ["match"]
    t.heal()
    print(
        f"\n[50 Mbit/s] 8 MiB put {fits['took']:.2f} s; timeouts at "
        + ", ".join(f"{a['op']} {a['took']:.2f}s" for a in answers)
        + f"; in-flight transfers ended {drained:.1f} s later"
    )


def _send_queue(t: Topology, host: str, peer: str) -> int:
    """Bytes ``host``'s kernel still holds to send to ``peer`` (closed sockets included)."""
    out = subprocess.run(
        [*t.prefix(host), "ss", "-tn", "dst", t.ip(peer)],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return sum(int(line.split()[2]) for line in out.splitlines()[1:] if line.split())


def test_a_write_that_outlives_its_call_never_lands_in_another_key(net, worker):
    """A client with a short deadline writes 8 MiB over a 10 Mbit/s link whose host lets the
    kernel queue the whole value; a client on a clean link writes another key at once.

    The first write's bytes leave its host for ~7 s after its call timed out.  Had Mooncake
    given that write up meanwhile (its TCP acknowledgement wait, MC_TCP_STATUS_TIMEOUT_SEC,
    which a client with op_timeout=1 used to set to 1 s), it would revoke the write and the
    storage node would hand its memory to the second write, into which the first one's
    late bytes then land: the second key read back as ~85 % the first's bytes.  Now the
    first write ends when its bytes are in, and each key reads back as its own value."""
    t, _ = net
    wmem_path = "/proc/sys/net/ipv4/tcp_wmem"
    read = [*t.prefix("c0"), "cat", wmem_path]
    saved = subprocess.run(read, capture_output=True, text=True, timeout=10).stdout.split()
    slow = worker(op_timeout=1.0)
    fast = worker(host="c1", op_timeout=10.0)

    def set_wmem(values: list[str]) -> None:
        line = " ".join(values)
        write = [*t.prefix("c0"), "sh", "-c", f"echo {line} > {wmem_path}"]
        subprocess.run(write, check=True, timeout=10)

    set_wmem(["4096", str(16 * MiB), str(16 * MiB)])
    try:
        t.rate("c0", 10)
        for r in range(2):
            tag = f"late-{os.urandom(3).hex()}"
            first, second = f"{tag}-first", f"{tag}-second"
            assert slow.call("put", [first], 8 * MiB).get("error") == "MCS_E_TIMEOUT"
            assert "error" not in fast.call("put", [second], 8 * MiB)
            start = time.monotonic()
            while slow.call("in_flight")["result"] or _send_queue(t, "c0", "s0"):
                assert time.monotonic() - start < 60, "the first write's bytes still flow"
                time.sleep(0.5)
            got = fast.call("get", [second], 8 * MiB, timeout=10.0)["result"]
            assert got == "match", (r, got)  # another value's bytes: 'wrong:8388608'
            assert fast.call("get", [first], 8 * MiB, timeout=10.0)["result"] in (
                "match",
                "miss",
            )
    finally:
        t.heal()
        set_wmem(saved)


def test_own_lanes_keep_master_only_calls_answering_while_transfers_hang(net, worker):
    """Storage node cut off: gets and puts hang in Mooncake until their deadline and beyond.
    With a lane of their own, exists / size / remove (which need only the master) still answer
    at once; in the shared pool they would wait behind the hung transfers."""
    t, _ = net
    lanes = {"lookup": 1, "retrieve": 1, "store": 1, "delete": 1}
    w = worker(config={"per_op_workers": lanes}, op_timeout=CUT_DEADLINE)
    tag = f"lanes-{os.urandom(3).hex()}"
    old = [f"{tag}-old-{i}" for i in range(3)]
    assert w.call("batch_put", old, 100_000)["result"] == [0] * 3
    t.cut("c0", "s0")
    for i in range(3):  # fill the data lanes with transfers that cannot finish
        assert w.call("get", [old[i]], 100_000).get("error") == "MCS_E_TIMEOUT"
        # A put's transfer hangs too, or (when the cut resets a connection Mooncake holds
        # to the node, seen under load) fails at once: either way it does not store.
        put = w.call("put", [f"{tag}-new-{i}"], 100_000)
        assert put.get("error") in ("MCS_E_TIMEOUT", "TRANSFER_FAIL"), put
    answers = [
        w.call("exists", [old[0]]),
        w.call("batch_exists", old),
        w.call("size", [old[1]]),
        w.call("remove", [old[2]], force=True),
        w.call("aexists", [old[0]]),
    ]
    for answer in answers:
        assert "error" not in answer and answer["took"] < 0.5, answer
    assert [a["result"] for a in answers] == [True, [True] * 3, 100_000, True, True]


def test_timed_out_reads_leave_no_queue_behind_on_a_slow_link(net, worker):
    """A burst of reads whose deadlines are far shorter than their transfers, on a 50 Mbit/s
    link (a 16 MiB read takes ~2.7 s), then reads that fit their deadline.

    Mooncake cannot cancel the read that was running when its caller gave up: it keeps its
    worker until its transfer ends.  The reads still queued behind it are withdrawn at their
    deadlines ("did not start ... nothing of it was sent"), so the reads after the burst wait
    for that one transfer at most, not for the burst's: they answer by their deadline all
    along and succeed again within a few seconds.  (Before, every timed-out read still ran
    later, each on the link in turn, and the reads after it timed out too, adding their own:
    the lane stayed busy with work nobody waited for.)"""
    t, _ = net
    w = worker(config={"per_op_workers": {"retrieve": 1}}, op_timeout=10.0)
    tag = f"burst-{os.urandom(3).hex()}"
    big = [f"{tag}-big-{i}" for i in range(8)]
    small = f"{tag}-small"
    assert w.call("batch_put", big, 16 * MiB, timeout=60.0)["result"] == [0] * 8
    assert w.call("put", [small], MiB, timeout=60.0).get("error") is None
    t.rate("c0", 50)
    short, deadline = 0.3, 2.0
    burst = w.call("parallel", big, 16 * MiB, call="get_into", threads=3, repeat=4, timeout=short)
    burst = burst["result"]
    for answer in burst:
        assert answer.get("error") == "MCS_E_TIMEOUT", answer
        assert answer["took"] <= short + SLACK, answer
    ended = time.monotonic()
    later = []
    while True:  # reads that fit their deadline, until one succeeds
        answer = w.call("get_into", [small], MiB, timeout=deadline)
        later.append(answer)
        assert answer["took"] <= deadline + SLACK, answer
        if answer.get("result") == ["match"]:
            break
        assert answer.get("error") == "MCS_E_TIMEOUT", answer
        assert time.monotonic() - ended < 10.0, f"no read succeeded 10 s after the burst: {later}"
    back = time.monotonic() - ended
    # The first read of the burst ran; those queued behind it were withdrawn, not run.
    withdrawn = [a for a in burst if "nothing of it was sent" in a["message"]]
    assert len(withdrawn) >= len(burst) - 2, [a["message"] for a in burst]
    for _ in range(3):  # and they go on succeeding
        again = w.call("get_into", [small], MiB, timeout=deadline)
        assert again.get("result") == ["match"] and again["took"] <= deadline, again
    start = time.monotonic()
    while w.call("in_flight")["result"]:  # withdrawn calls included: none left behind
        assert time.monotonic() - start < 60, "in_flight still counts a burst call after 60 s"
        time.sleep(0.2)
    t.heal()
    print(
        f"\n[burst of {len(burst)} timed-out 16 MiB reads at 50 Mbit/s] {len(withdrawn)} withdrawn;"
        f" a 1 MiB read succeeded {back:.1f} s after the burst ({len(later)} tries)"
    )


#: A stack's process on c0 with the drop-in as it gets it (positional setup, no options):
#: it stores 16 keys, waits until its node-health monitor trusts the storage node, says
#: "ready", then on "go" looks the keys up every 5 ms and reports each answer.
LOOKUPS = r"""
import json, sys, time
from mooncake_cffi.store import MooncakeDistributedStore
cfg = json.loads(sys.argv[1])
s = MooncakeDistributedStore()
assert s.setup(cfg["local_hostname"], cfg["metadata_server"], 0, 16 << 20, "tcp", "",
               cfg["master_server_addr"]) == 0
keys = [f"{sys.argv[2]}-{i}" for i in range(16)]
for k in keys:
    assert s.put(k, b"h" * 32768) == 0
limit = time.monotonic() + 30
while not s._x.live.trusted() and time.monotonic() < limit:
    s.batch_is_exist(keys); time.sleep(0.01)
print(json.dumps({"ready": s._x.live.trusted()}), flush=True)
for line in sys.stdin:
    until = time.monotonic() + float(json.loads(line)["seconds"])
    while time.monotonic() < until:
        t0 = time.monotonic()
        answer = s.batch_is_exist(keys)
        t1 = time.monotonic()
        print(json.dumps({"at": t1, "took": t1 - t0, "hits": answer.count(1)}), flush=True)
        time.sleep(0.005)
    print(json.dumps({"done": True}), flush=True)
s.close()
"""


def test_a_cut_off_storage_nodes_keys_stop_counting_as_hits_then_count_again(net, tmp_path):
    """The drop-in's lookups answer a storage node's keys 0 within STALE_LIMIT of the link
    to it going down (the master, reached, still lists them), each lookup within its
    bound, and count them again once the link is back."""
    t, cluster = net
    env = {**os.environ, **cluster.client_env()}
    for name in ("MC_RPC_TIMEOUT_MS", "MC_TCP_STATUS_TIMEOUT_SEC"):
        env.pop(name, None)
    for name in ("MCS_BIND_ADDRESS", "MC_TCP_BIND_ADDRESS"):
        if name in env:
            env[name] = t.ip("c0")
    config = cluster.client_config(local_hostname=t.ip("c0"))
    tag = f"health-{os.urandom(3).hex()}"
    proc = t.run_in(
        "c0",
        [sys.executable, "-c", LOOKUPS, json.dumps(config), tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        stderr=(tmp_path / "lookups.log").open("wb"),
        env=env,
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    def run(seconds: float) -> list[dict[str, Any]]:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"seconds": seconds}) + "\n")
        proc.stdin.flush()
        out = []
        while True:
            line = lines.get(timeout=seconds + 30)
            assert line, (tmp_path / "lookups.log").read_text(errors="replace")[-2000:]
            answer = json.loads(line)
            if answer.get("done"):
                return out
            out.append(answer)

    threading.Thread(target=read, daemon=True).start()
    try:
        ready = json.loads(lines.get(timeout=90) or "{}")
        assert ready.get("ready") is True, ready
        t.cut("c0", "s0")
        cut_at = time.monotonic()  # one clock for every namespace (CLOCK_MONOTONIC)
        during = run(3.0)
        t.heal()
        healed_at = time.monotonic()
        after = run(5.0)
        stale = [a for a in during if a["hits"]]
        first_clean = next(a["at"] for a in during if not a["hits"])
        back = next((a["at"] for a in after if a["hits"] == 16), None)
        print(
            f"\n[cut c0-s0, drop-in lookups] hits promised {first_clean - cut_at:.2f} s after"
            f" the cut ({len(stale)} lookups), slowest lookup {max(a['took'] for a in during):.2f}"
            f" s; promised again {(back or float('nan')) - healed_at:.2f} s after the heal"
        )
        assert first_clean - cut_at <= STALE_LIMIT, (first_clean - cut_at, stale[-3:])
        assert not [a for a in during if a["hits"] and a["at"] > first_clean], "promised again"
        assert max(a["took"] for a in during) <= 0.5 + SLACK
        assert back is not None, "the keys never counted again after the heal"
    finally:
        t.heal()
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
