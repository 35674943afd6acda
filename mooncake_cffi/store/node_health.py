"""Each storage node's health as standing knowledge: what the drop-in's lookups consult
instead of asking the nodes on every call.

:class:`NodeHealth` knows the storage nodes a client's lookups have found keys on, each with
a key it holds (a *sample*), and keeps each node's state:

- ``up``: it answered a one-byte read of its sample less than :data:`FRESH_FOR` seconds
  ago;
- ``suspect``: its last answer is older than that (frozen, cut off, a stalled host: a read
  sent to it is not answered); one whose read has waited over :data:`ANSWER_IN` is
  *silent*, and a lookup's check counts it as not answering without asking it again;
- ``down``: its last read failed (a transfer error: the process is gone).

A thread of its own reads each node's sample every :data:`PROBE_EVERY` seconds, one read
per node at a time (a node that does not answer holds one read, never more): **at most
1 / PROBE_EVERY probes per node per second, one byte each, whatever the number of keys,
clients' calls or lookups**. What the lookups' own checks learn (a node that answered, one
that failed) is taken in at once.

:meth:`NodeHealth.healthy` is true while every known node is up; the drop-in then answers a
lookup from the master's reply alone, one round trip as Mooncake's class. Otherwise the
lookup's hits are checked against the nodes holding them (:mod:`.live_hits`). A node's
keys therefore stop counting as hits within PROBE_EVERY + FRESH_FOR seconds of it dying,
freezing or being cut off.

Each node that falls silent or fails a read, and each that answers again, is logged once
at WARNING on the ``mooncake_cffi.store`` logger, so an engine's log says when and why its
hits stopped counting.

A sample that the master no longer has (removed, evicted, or dropped with its node at the
client TTL) makes its node unknown again: the next lookup that finds keys on it learns a
new one.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..status import INVALID_PARAMS, OBJECT_NOT_FOUND

__all__ = ["ANSWER_IN", "FRESH_FOR", "PROBE_EVERY", "NodeHealth"]

log = logging.getLogger("mooncake_cffi.store")

#: Seconds between two reads of one node's sample (10 probes per node per second).
PROBE_EVERY = 0.1
#: A node whose read has waited this many seconds is silent: lookups do not wait on it.
ANSWER_IN = 0.2
#: A node is up only while its last answer is at most this old (seconds).
FRESH_FOR = 0.3

_monotonic = time.monotonic

UP, SUSPECT, DOWN = "up", "suspect", "down"


def answered(result: int) -> bool:
    """Whether a one-byte read's result came from a node that answered (a value shorter
    than a byte, INVALID_PARAMS, still did)."""
    return result >= 0 or result == INVALID_PARAMS


class _Node:
    __slots__ = ("answered_at", "failed", "in_flight", "sample", "said", "sent_at")

    def __init__(self, sample: bytes) -> None:
        self.sample = sample
        self.answered_at = -1e9  # monotonic time of its last answer
        self.failed = False  # its last read failed (a transfer error)
        self.in_flight: Future[int] | None = None
        self.sent_at = 0.0
        self.said = ""  # what the log last said of it: "", SUSPECT (silent) or DOWN


_Reader = Callable[[], Callable[[bytes], int] | None]

_shared_lock = threading.Lock()
#: One monitor per cluster (its master's address) in a process, shared by its clients.
_shared: dict[str, NodeHealth] = {}


class NodeHealth:
    """The storage nodes' states, kept by a probe thread and by what lookups learn.

    A reader gives the function (or None once its owner is gone) that reads one byte of
    the key ``sample`` (bytes) and returns Mooncake's result (a size, or a negative code);
    it runs on the monitor's pool. Readers are ``weakref.WeakMethod``: the monitor must not
    keep a store alive that its user dropped. The clients of one cluster in a process share
    one monitor (:meth:`shared`): its probes are the cluster's, not each client's; it stops
    when the last reader is detached or gone.
    """

    def __init__(self, cluster: str = "") -> None:
        self._cluster = cluster
        self._readers: list[_Reader] = []
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: Every known node is up until this monotonic time (0.0 while one is down or none
        #: is known): kept with the states, so that a lookup's question is one comparison
        #: (the drop-in's C lookup, :meth:`~.._capi.runner.Runner.lookups`, reads it too).
        self.up_until = 0.0
        #: Probe reads sent, and the states' changes, for the benchmarks and the operator.
        self.probes = 0
        self.changes = 0

    @classmethod
    def shared(cls, cluster: str, reader: _Reader) -> NodeHealth:
        """The process's monitor of ``cluster``, with ``reader`` among its readers."""
        with _shared_lock:
            health = _shared.get(cluster)
            if health is None or health._closed:
                health = _shared[cluster] = cls(cluster)
            health._readers.append(reader)
            return health

    def detach(self, reader: _Reader) -> None:
        """``reader``'s client closed: the monitor goes on for the others, or stops."""
        with _shared_lock:
            if reader in self._readers:
                self._readers.remove(reader)
            last = not self._readers
            if last and _shared.get(self._cluster) is self:
                del _shared[self._cluster]
        if last:
            self.close()

    def _read(self) -> Callable[[bytes], int] | None:
        """A live reader's function (dropping the readers whose clients are gone)."""
        with _shared_lock:
            while self._readers:
                read = self._readers[0]()
                if read is not None:
                    return read
                del self._readers[0]
            if _shared.get(self._cluster) is self:
                del _shared[self._cluster]
            return None

    # -- what lookups ask ------------------------------------------------------------

    def healthy(self) -> bool:
        """True while at least one node is known and every known node is up (no lock:
        :attr:`up_until` is one float, replaced whole)."""
        return _monotonic() < self.up_until

    def _recount(self) -> None:  # with the lock held, after any node's state changed
        nodes = self._nodes.values()
        if not nodes or any(n.failed for n in nodes):
            self.up_until = 0.0
        else:
            self.up_until = min(n.answered_at for n in nodes) + FRESH_FOR

    def state(self, node: str) -> str | None:
        """``"up"``, ``"suspect"`` or ``"down"``; None for a node not known."""
        with self._lock:
            n = self._nodes.get(node)
            if n is None:
                return None
            if n.failed:
                return DOWN
            return UP if _monotonic() - n.answered_at < FRESH_FOR else SUSPECT

    def fresh(self, node: str) -> bool:
        """Whether ``node`` is up (a lookup's check need not read from it)."""
        return self.state(node) == UP

    def silent(self, node: str) -> bool:
        """Whether ``node`` is down, or its probe read has waited over ANSWER_IN (a
        lookup's check then counts it as not answering, without waiting on it)."""
        with self._lock:
            n = self._nodes.get(node)
            if n is None:
                return False
            waiting = n.in_flight is not None and _monotonic() - n.sent_at > ANSWER_IN
            return n.failed or waiting

    def states(self) -> dict[str, str]:
        with self._lock:
            names = list(self._nodes)
        return {name: self.state(name) or DOWN for name in names}

    # -- what lookups tell -------------------------------------------------------------

    def learn(self, node: str, sample: bytes) -> None:
        """A lookup found ``sample`` on ``node``: know the node (and start probing)."""
        with self._lock:
            if self._closed:
                return
            if node not in self._nodes:
                self._nodes[node] = _Node(sample)
                self._recount()
                self._start()

    def observed(self, node: str, result: int) -> None:
        """A lookup's own read from ``node`` gave ``result``."""
        with self._lock:
            n = self._nodes.get(node)
            if n is not None:
                self._take(node, n, result)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            self._nodes.clear()
            self.up_until = 0.0
        self._wake.set()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- the probe thread ----------------------------------------------------------------

    def _start(self) -> None:  # with the lock held
        if self._thread is None:
            self._pool = ThreadPoolExecutor(8, thread_name_prefix="mooncake-node-health")
            self._thread = threading.Thread(
                target=self._run, name="mooncake-node-health", daemon=True
            )
            self._thread.start()

    def _take(self, node: str, n: _Node, result: int) -> None:  # with the lock held
        was = (n.failed, _monotonic() - n.answered_at < FRESH_FOR)
        if answered(result):
            n.answered_at, n.failed = _monotonic(), False
            if n.said:
                n.said = ""
                log.warning("storage node %s answers again: its keys count as hits", node)
        elif result == OBJECT_NOT_FOUND:  # the sample is gone: the node is unknown again
            del self._nodes[node]
            self._recount()
            return
        else:
            n.failed = True
            if n.said != DOWN:
                n.said = DOWN
                log.warning(
                    "storage node %s failed a read (%d): lookups count its keys as misses "
                    "until it answers",
                    node,
                    result,
                )
        self._recount()
        if was != (n.failed, _monotonic() - n.answered_at < FRESH_FOR):
            self.changes += 1
            log.debug("node %s: %s", node, DOWN if n.failed else UP)

    def _run(self) -> None:
        while not self._wake.wait(PROBE_EVERY):
            with self._lock:
                pool = self._pool
                todo = [(name, n) for name, n in self._nodes.items() if n.in_flight is None]
                self._say_silent()
            read = self._read()
            if pool is None or read is None:
                self.close()
                return
            for name, n in todo:
                try:
                    future = pool.submit(read, n.sample)
                except RuntimeError:  # closed meanwhile
                    return
                self.probes += 1
                with self._lock:
                    n.in_flight, n.sent_at = future, _monotonic()
                future.add_done_callback(functools.partial(self._done, name, n))
            del read

    def _say_silent(self) -> None:  # with the lock held
        """Log, once per silence, each node whose read has waited over ANSWER_IN."""
        now = _monotonic()
        for name, n in self._nodes.items():
            if n.in_flight is not None and not n.said and now - n.sent_at > ANSWER_IN:
                n.said = SUSPECT
                log.warning(
                    "storage node %s has not answered a read for %.1f s: lookups count its "
                    "keys as misses until it answers",
                    name,
                    now - n.sent_at,
                )

    def _done(self, name: str, n: _Node, future: Future[int]) -> None:
        try:
            result = future.result()
        except Exception:  # noqa: BLE001 - a client closed meanwhile: nothing to learn
            result = None
        with self._lock:
            n.in_flight = None
            if result is not None and self._nodes.get(name) is n:
                self._take(name, n, result)
