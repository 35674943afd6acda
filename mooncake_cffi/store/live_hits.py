"""A lookup promises only what can be read now: the drop-in's existence answers, when it
fails open, count a key as present only if the storage nodes holding it answer.

The master says a key exists from its metadata alone. A storage node that froze (SIGSTOP, a
partition, a stalled host) or died keeps its keys in the master's books until its lease with
the master runs out (10 s by default), so a stack that looks up a prompt's blocks is told
they are there, and the load that follows fails at its deadline. vLLM, by default
(``kv_load_failure_policy: fail``), then fails the request. So:

- while every storage node the client knows is up (:mod:`.node_health`: a thread reads a
  byte of a key on each, 10 times a second), a lookup is the master's answer alone, one
  round trip, as with Mooncake's class; the first lookup with hits after
  :data:`DISCOVER_EVERY` seconds is checked as below anyway, so that nodes holding keys
  the client had not seen yet become known;
- otherwise, before the drop-in answers 1 for a key, it asks the master for the hit keys'
  replicas (one ``BatchQuery``, the call behind ``batch_get_replica_desc``) and reads one
  byte of one key on each storage node among them that is not known to be up (Mooncake's
  ``get_into_ranges``, into a page registered for it), within :data:`ANSWER_WITHIN`; a
  node known to be down or silent is not asked again;
- a key whose every memory replica lies on a node that answered keeps its 1; a key with a
  replica on a node that did not (a transfer that failed, or no answer in time) is
  answered 0, and a node that did not answer in time opens the breaker
  (:mod:`.fail_open`), as a read from it would have.

A dead, frozen or cut-off node's keys thus stop counting as hits within about
``PROBE_EVERY + FRESH_FOR`` (0.4 s), and count again once its reads answer.

The check runs on a small pool of threads of its own: a node that does not answer holds a
thread of it until Mooncake's own transfer wait ends, never the caller. Misses, and
answers from a wheel without these calls, are left as the master gave them.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..status import MCS_E_UNSUPPORTED
from .node_health import NodeHealth, answered
from .repair import key_bytes
from .replicas import memory_endpoints

__all__ = ["ANSWER_WITHIN", "DISCOVER_EVERY", "LiveHits"]

log = logging.getLogger("mooncake_cffi.store")

#: The longest a lookup waits for the nodes holding its hits to answer (seconds).
ANSWER_WITHIN = 0.5
#: While every known node is up, the first lookup with hits after this many seconds is
#: checked all the same (one replica query): it finds the nodes not known yet.
DISCOVER_EVERY = 1.0
#: Nodes one check reads from at most (one byte each of a registered page).
_PAGE = mmap.PAGESIZE

_monotonic = time.monotonic


def _cluster_of(calls: Any) -> str:
    """The cluster a client belongs to, by its master's address (its monitor's key)."""
    try:
        setup = calls.client.config.setup_config
        return (
            str(setup.get("master_server_addr", "")) + "|" + str(setup.get("metadata_server", ""))
        )
    except AttributeError:
        return f"client-{id(calls)}"


class LiveHits:
    """Confirms existence answers of 1 against the storage nodes holding the keys.

    ``calls`` is the drop-in's :class:`~.calls.StoreCalls` (its runner asks the master for
    replicas; its ``register`` and ``get_into_ranges`` read the byte); ``trip(key)`` is
    called when a node holding ``key`` did not answer in time.
    """

    def __init__(self, calls: Any, trip: Callable[[Any], None]) -> None:
        self._calls = calls
        self._trip = trip
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._page: mmap.mmap | None = None
        self._addr = 0
        #: False once the wheel or the client cannot check (no replica query, no
        #: registered page): answers are then the master's.
        self.enabled = True
        #: The storage nodes' states (its probe reads go through :meth:`_read_byte`).
        self._reader = weakref.WeakMethod(self._read_byte)
        self.health = NodeHealth.shared(_cluster_of(calls), self._reader)
        #: When the next lookup is checked even with every node up (monotonic; the C
        #: lookup of :meth:`~.._capi.runner.Runner.lookups` reads it too).
        self.discover_at = 0.0
        #: Hits answered 0 because a node holding them did not answer, and checks made.
        self.withheld = 0
        self.checks = 0

    def trusted(self) -> bool:
        """Whether a lookup now needs no check: every storage node known is up
        (:class:`~.node_health.NodeHealth`), and no discovery check is due."""
        return _monotonic() < self.discover_at and self.health.healthy()

    def confirm(self, keys: Sequence[Any], results: list[int]) -> list[int]:
        """``results`` (the master's answers for ``keys``) with each 1 whose nodes did not
        answer turned into 0 (the caller asked :meth:`trusted` first)."""
        hits = [i for i, r in enumerate(results) if r == 1]
        if not hits or not self.enabled:
            return results
        packed = [key_bytes(keys[i]) for i in hits]
        verdict = self._run(packed, keys[hits[0]])
        self.discover_at = _monotonic() + DISCOVER_EVERY
        if verdict is None:
            return results
        out = list(results)
        for i, ok in zip(hits, verdict):
            if not ok:
                out[i] = 0
                self.withheld += 1
        return out

    def confirm_one(self, key: Any) -> int:
        """The answer 1 for ``key``, confirmed: 1, or 0 when its nodes did not answer."""
        return self.confirm([key], [1])[0]

    def close(self) -> None:
        """Stops the pool and the health monitor, without waiting for a check held by a
        node (the page stays mapped while a read can still land in it; the client's close
        unregisters it)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self.enabled = False
        self.health.detach(self._reader)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _ready(self) -> ThreadPoolExecutor | None:
        with self._lock:
            if self._pool is None and self.enabled:
                page = mmap.mmap(-1, _PAGE)
                addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
                if self._calls.register(addr, _PAGE) != 0:
                    log.debug("live hits: the probe page cannot be registered; not checking")
                    self.enabled = False
                    return None
                self._page, self._addr = page, addr
                self._pool = ThreadPoolExecutor(4, thread_name_prefix="mooncake-live-hits")
            return self._pool

    def _read_byte(self, key: bytes) -> int:
        """One byte of ``key`` read into the probe page: Mooncake's result (the health
        monitor's probe, on its own pool)."""
        if self._ready() is None:
            return MCS_E_UNSUPPORTED
        got = self._calls.get_into_ranges([self._addr], [[key]], [[[0]]], [[[0]]], [[[1]]])
        return int(got[0][0][0])

    def _run(self, packed: list[bytes], first: Any) -> list[bool] | None:
        pool = self._ready()
        if pool is None:
            return None
        self.checks += 1
        try:
            future: Future[list[bool] | None] = pool.submit(self._check, packed)
        except RuntimeError:  # closed meanwhile
            return None
        try:
            return future.result(timeout=ANSWER_WITHIN)
        except FutureTimeout:
            self._trip(first)
            return [False] * len(packed)

    def _check(self, packed: list[bytes]) -> list[bool] | None:
        """On a pool thread: each key's verdict, or None when the master's answer cannot be
        used (the key's 1 then stands)."""
        per_key = memory_endpoints(self._calls.runner, packed)
        if per_key is None:  # the wheel has no replica query
            self.enabled = False
            return None
        health = self.health
        verdicts: dict[str, str] = {}  # node -> "up" (known), "silent" (known not), "read"
        nodes: dict[str, bytes] = {}  # node -> a key to read from it now
        for kb, endpoints in zip(packed, per_key):
            for ep in endpoints:
                health.learn(ep, kb)
                if ep not in verdicts:
                    verdicts[ep] = (
                        "silent" if health.silent(ep) else "up" if health.fresh(ep) else "read"
                    )
                # a key held by this node alone reads from it; else the first one seen
                if verdicts[ep] == "read" and (ep not in nodes or len(endpoints) == 1):
                    nodes[ep] = kb
        dead = {ep for ep, verdict in verdicts.items() if verdict == "silent"}
        failed = self._probe(nodes)
        if failed is None:
            return None
        dead |= failed
        if not dead:
            return [True] * len(packed)
        return [not any(ep in dead for ep in endpoints) for endpoints in per_key]

    def _probe(self, nodes: dict[str, bytes]) -> set[str] | None:
        """Reads a byte of one key on each node; the nodes that did not answer."""
        names = list(nodes)[:_PAGE]
        dead: set[str] = set()
        if names:
            keys = [nodes[n] for n in names]
            got = self._calls.get_into_ranges(
                [self._addr],
                [keys],
                [[[i] for i in range(len(keys))]],
                [[[0] for _ in keys]],
                [[[1] for _ in keys]],
            )
            answers = [r[0] for r in got[0]]
            if all(a == MCS_E_UNSUPPORTED for a in answers):
                self.enabled = False
                return None
            for name, a in zip(names, answers):
                self.health.observed(name, a)
                if not answered(a):  # TRANSFER_FAIL, a key gone meanwhile: not read there
                    dead.add(name)
        return dead
