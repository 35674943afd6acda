"""A lookup promises only what can be read now: the drop-in's existence answers, when it
fails open, count a key as present only if the storage nodes holding it answer.

The master says a key exists from its metadata alone. A storage node that froze (SIGSTOP, a
partition, a stalled host) keeps its keys in the master's books until its lease with the
master runs out, so a stack that looks up a prompt's blocks is told they are there, and the
load that follows fails at its deadline. vLLM, by default (``kv_load_failure_policy:
fail``), then fails the request. So, before the drop-in answers 1 for a key, it makes sure
the nodes holding it answer, within :data:`ANSWER_WITHIN`:

- it asks the master for the hit keys' replicas (one ``BatchQuery``, the call behind
  ``batch_get_replica_desc``), and reads one byte of one key on each storage node among
  them (Mooncake's ``get_into_ranges``, into a page registered for it);
- a key whose every memory replica lies on a node that answered keeps its 1; a key with a
  replica on a node that did not (a transfer that failed, or no answer in time) is
  answered 0, and a node that did not answer in time opens the breaker
  (:mod:`.fail_open`), as a read from it would have;
- a lookup that comes right behind another one (within :data:`BURST_GAP` of its end),
  while every node lately among the hits answered within :data:`TRUSTED_FOR`, asks nothing
  more: a caller looking up in a tight loop pays one check per that interval, not one per
  call, while a lookup after a pause (a new request to an engine) is always checked.

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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..status import INVALID_PARAMS, MCS_E_UNSUPPORTED
from .repair import key_bytes
from .replicas import memory_endpoints

__all__ = ["ANSWER_WITHIN", "BURST_GAP", "TRUSTED_FOR", "LiveHits"]

log = logging.getLogger("mooncake_cffi.store")

#: The longest a lookup waits for the nodes holding its hits to answer (seconds).
ANSWER_WITHIN = 0.5
#: How long a node that answered is trusted without asking again (seconds), by lookups
#: that follow one another within BURST_GAP seconds.
TRUSTED_FOR = 0.05
BURST_GAP = 0.005
#: Nodes one check reads from at most (one byte each of a registered page).
_PAGE = mmap.PAGESIZE
#: A node not among any lookup's hits for this long (seconds) no longer counts for the
#: trust above (a node that left the cluster would otherwise never let it start).
_FORGET_AFTER = 30.0

_monotonic = time.monotonic


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
        #: node -> when it last answered, and when a lookup's hits were last on it.
        self._answered: dict[str, float] = {}
        self._seen: dict[str, float] = {}
        #: Until when every node seen so far is trusted (monotonic), and the last lookup.
        self._trusted_until = 0.0
        self._last_lookup = 0.0
        #: Hits answered 0 because a node holding them did not answer, and checks made.
        self.withheld = 0
        self.checks = 0

    def trusted(self) -> bool:
        """Whether a lookup now needs no check: every node lately among the hits answered
        within :data:`TRUSTED_FOR`, and the last lookup was within :data:`BURST_GAP`."""
        now = _monotonic()
        previous, self._last_lookup = self._last_lookup, now
        return now < self._trusted_until and now - previous < BURST_GAP

    def confirm(self, keys: Sequence[Any], results: list[int]) -> list[int]:
        """``results`` (the master's answers for ``keys``) with each 1 whose nodes did not
        answer turned into 0 (the caller asked :meth:`trusted` first)."""
        hits = [i for i, r in enumerate(results) if r == 1]
        if not hits or not self.enabled:
            return results
        packed = [key_bytes(keys[i]) for i in hits]
        verdict = self._run(packed, keys[hits[0]])
        # The next lookup is "right behind" this one if it comes within BURST_GAP of this
        # one's end: a check of many hits (milliseconds) does not make a tight loop's next
        # lookup look like one after a pause.
        self._last_lookup = _monotonic()
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
        """Stops the pool, without waiting for a check held by a node (the page stays
        mapped while a check can still read into it; the client's close unregisters it)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self.enabled = False
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
        now = _monotonic()
        nodes: dict[str, bytes] = {}  # node -> a key to read from it
        must_read: dict[str, bool] = {}  # every node among the hits -> whether to read it now
        for kb, endpoints in zip(packed, per_key):
            for ep in endpoints:
                must = must_read.get(ep)
                if must is None:
                    answered = self._answered.get(ep, -TRUSTED_FOR)
                    must = must_read[ep] = now - answered >= TRUSTED_FOR
                # a key held by this node alone reads from it; else the first one seen
                if must and (ep not in nodes or len(endpoints) == 1):
                    nodes[ep] = kb
        with self._lock:
            self._seen.update(dict.fromkeys(must_read, now))
        dead = self._probe(nodes)
        if dead is None:
            return None
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
                # a value shorter than a byte (-600) still came from a node that answered
                if a >= 0 or a == INVALID_PARAMS:
                    self._answered[name] = _monotonic()
                else:  # TRANSFER_FAIL, a key gone meanwhile: not read from that node
                    dead.add(name)
        self._trust(bool(dead))
        return dead

    def _trust(self, failed: bool) -> None:
        """Until when every node a lookup's hits were on lately stays trusted."""
        with self._lock:
            now = _monotonic()
            for ep in [ep for ep, t in self._seen.items() if now - t > _FORGET_AFTER]:
                del self._seen[ep]
                self._answered.pop(ep, None)
            if failed or not self._seen:
                self._trusted_until = 0.0
                return
            oldest = min(self._answered.get(ep, -TRUSTED_FOR) for ep in self._seen)
            self._trusted_until = oldest + TRUSTED_FOR
