"""``MooncakeConnector``: the native client behind LMCache's ``"type": "native_plugin"``.

LMCache's ``NativeConnectorL2Adapter`` drives a "native client" through seven methods:
``event_fd``, ``submit_batch_set`` / ``_get`` / ``_exists`` / ``_delete`` (each returns an
int id at once), ``drain_completions`` (a list of ``(id, ok, error, per_key_bools)``) and
``close``.  This class implements them on our :class:`mooncake_cffi.Client`: batches go to
its per-operation lanes with ``Client.submit``, and its completion eventfd is what LMCache
polls.  Nothing here imports LMCache.

What LMCache relies on, and how it is kept:

- A submit never raises (it runs under LMCache's adapter lock, in its controller threads).
  A batch the client refuses (full lane, closed client, a key twice, a buffer outside the
  registered L1 region, a bad buffer) becomes a failed completion; an empty batch an
  empty, successful one.  Such completions are signalled through a second eventfd of our
  own; ``event_fd()`` is an epoll descriptor over both, readable exactly while something
  is waiting, so LMCache still polls one fd and ``drain_completions()`` leaves it
  unreadable when nothing is left.
- A load counts as a hit only when the stored value has exactly the buffer's size (a
  layout change must not read as a hit); a missing key is a plain miss.
- A delete forces past Mooncake's read lease (LMCache's eviction decides, not the lease)
  and counts a missing key as deleted.
- Every failure is logged by the connector, once, with Mooncake's error name
  (:mod:`.failure_log`), since LMCache drops the error text.
- Buffers: the client keeps the memoryviews and their cdata alive until the completion is
  drained.  The memoryviews LMCache passes do not own their memory: the memory object
  behind each must stay alive until its completion is drained, which LMCache's adapter
  does (it holds its MemoryObjs until the task completes).  ``close()`` waits for accepted
  batches, so no transfer writes into memory after it returns.
"""

from __future__ import annotations

import heapq
import os
import select
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .._core.breaker import DEADLINE, PROBE_KEY, Breaker
from ..client import Client, Completion
from ..errors import MooncakeError
from ..replica import ReplicateConfig
from ..status import (
    MCS_E_CLOSED,
    MCS_E_INVALID_ARG,
    MCS_E_TIMEOUT,
    is_retryable,
)
from ..status import name as status_name
from .compat import check_lmcache_version, check_native_client
from .completions import DrainedCompletion, TaskBatch, Translation, none_found
from .failure_log import FailureLog, logger
from .params import parse_adapter_params

__all__ = ["MooncakeConnector"]

#: LMCache's name of each operation (for logs) -> our Client's op.
_OPS = {"store": "put", "load": "get", "lookup": "exists", "delete": "remove"}


class MooncakeConnector:
    """A native LMCache L2 connector over Mooncake Store.

    LMCache builds it as ``MooncakeConnector(**adapter_params)`` from a
    ``"type": "native_plugin"`` spec.  ``adapter_params`` is the JSON of LMCache's
    ``mooncake_store`` adapter (``num_workers``, ``per_op_workers`` and
    Mooncake's setup keys, passed through as :class:`mooncake_cffi.StoreConfig` does), plus:

    - ``queue_timeout`` (seconds a submit to a full lane waits, default 0: fail the batch
      at once, since LMCache's submit must not block), ``queue_capacity``,
      ``coalesce_keys``, ``tile_bytes``, ``tile_keys``, ``connect_timeout``,
      ``register_l1``, ``l1_block_size``: the :class:`mooncake_cffi.Client` options;
    - ``op_timeout``: bounds Mooncake's own waits (a master RPC, a TCP transfer to a silent
      peer), so a batch against a dead process fails within about that long;
    - ``fail_open`` (default true): without an ``op_timeout``, every batch has a deadline of
      2 s (which also shortens Mooncake's master RPC wait), and a batch that fails slowly
      or finds the master gone opens a breaker: until a probe finds the master answering
      again, every batch completes at once as failed (lookups and loads find nothing), so
      LMCache recomputes instead of waiting (:mod:`mooncake_cffi._core.breaker`). Loads
      (without a registered L1) read into the connector's own memory, copied into
      LMCache's buffers when they succeed, so one that outlives the deadline fails then
      while Mooncake finishes with that memory, never with LMCache's;
    - ``retry``: ``true`` or an object of :class:`mooncake_cffi.RetryPolicy` fields: the keys
      of a batch that fail with a retryable error (a full pool, a failed transfer or RPC, a
      replica not yet ready) are submitted again after the policy's backoff, and the batch
      completes once, with every key's last outcome;
    - ``key_prefix``: prepended to every key (a namespace per deployment or test).

    Args:
        l1: a writable buffer to register with Mooncake as L1 memory (not a JSON key: the
            ``"plugin"`` adapter passes LMCache's L1 region here).  Required with
            ``protocol: rdma``; with tcp registered only when ``register_l1`` is true.
        replicate_config: the replica options of every write (not a JSON key; None: from
            the JSON's ``replica_num`` / ``soft_pin_ttl_ms`` / ... keys).
        **params: ``adapter_params``.

    Raises:
        ValueError: a bad ``adapter_params`` value, named; a missing L1 region with rdma
            (before any network traffic).
        LMCacheVersionError: created inside an LMCache that lacks something the plugins
            need, or calls a method this class lacks (named, with the release).
        MooncakeError: Mooncake's setup failed (e.g. ``TransportError`` for an
            unreachable master).
    """

    def __init__(
        self, *, l1: Any = None, replicate_config: ReplicateConfig | None = None, **params: Any
    ) -> None:
        if "lmcache" in sys.modules:  # built by LMCache: check that it has what we need
            check_lmcache_version()
            check_native_client(type(self))
        parsed = parse_adapter_params(params)
        self._prefix = parsed.key_prefix
        self._lock = threading.Lock()
        self._closed = False
        self._next_id = 1
        # The client's batch id (of the latest submit of a batch: a retry is a new one) ->
        # the batch, which LMCache knows by its own task id (info.task_id).
        self._batches: dict[int, TaskBatch] = {}
        self._ready: list[DrainedCompletion] = []  # completions made here, not by the client
        self._failures = FailureLog()
        self._retry = parsed.retry
        self._due: list[tuple[float, int, TaskBatch]] = []  # retries: (when, task id, batch)
        self._breaker: Breaker | None = None
        if parsed.fail_open and parsed.client_options.get("op_timeout") is None:
            parsed.client_options["op_timeout"] = DEADLINE
        self._armed_at: float | None = None  # when the load-deadline timer rings
        #: Failing open, how long a load may take before it fails (it goes on in the
        #: shim's memory: loads land, ``Client.submit(land=True)``).
        self._load_deadline: float | None = None
        if l1 is None and parsed.store.protocol == "rdma":
            raise ValueError(
                "RDMA protocol is enabled, but no L1 memory descriptor was provided: LMCache "
                "hands its L1 region only to 'plugin' adapters, never to a 'native_plugin' "
                'one; use "type": "plugin", "module_path": "mooncake_cffi.lmcache", '
                '"class_name": "MooncakeL2Adapter"'
            )
        self._client = Client(
            parsed.store, l1, replicate_config=replicate_config, **parsed.client_options
        )
        if parsed.fail_open and not self._client.l1_registered:
            # (With L1 registered, transfers must use it: loads stay zero-copy, unstaged.)
            self._load_deadline = parsed.client_options["op_timeout"]
        if parsed.fail_open:
            client = self._client
            self._breaker = Breaker(lambda: int(client.exists(PROBE_KEY, timeout=DEADLINE + 1.0)))
        self._translation = Translation(self._failures, self._breaker)
        try:
            self._local_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._epoll = select.epoll()
            self._epoll.register(self._client.fileno(), select.EPOLLIN)
            self._epoll.register(self._local_fd, select.EPOLLIN)
        except BaseException:
            self._client.close()
            raise

    # ------------------------------------------------------------ LMCache's interface

    def event_fd(self) -> int:
        """A descriptor that polls readable exactly while completions wait (-1 once closed)."""
        return -1 if self._closed else self._epoll.fileno()

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        """Store each buffer under its key; the completion's ``ok`` says all were stored.

        Mooncake keeps the first value written, so storing an existing key succeeds and
        leaves the old value.
        """
        return self._submit("store", keys, memoryviews)

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        """Read each key into its writable buffer; per key True only if the sizes match."""
        return self._submit("load", keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        """Look keys up; per key True if it exists (this renews Mooncake's read lease)."""
        return self._submit("lookup", keys, None)

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        """Remove keys, forcing past read leases; per key True if removed or already absent."""
        return self._submit("delete", keys, None)

    def drain_completions(self) -> list[DrainedCompletion]:
        """Finished batches as ``(id, ok, error, per_key_bools or None)``; never blocks.

        Leaves :meth:`event_fd` unreadable when nothing is left.
        """
        with self._lock:
            if self._closed:
                done, self._ready = self._ready, []
                return done
            try:
                os.eventfd_read(self._local_fd)
            except BlockingIOError:
                pass
            done, self._ready = self._ready, []
            while True:
                try:
                    batch = self._client.drain()
                except MooncakeError as exc:  # cannot happen while open; never raise
                    logger.error("Mooncake drain failed: %s: %s", exc.name, exc)
                    break
                for completion in batch:
                    info = self._batches.pop(completion.id, None)
                    if info is None:
                        logger.error("completion for unknown Mooncake batch %d", completion.id)
                        continue
                    if info.abandoned:  # answered at its deadline; Mooncake is done now
                        continue
                    if not self._retry_later(info, completion):
                        done.append(self._translation(info, completion))
                if len(batch) < 1024:
                    break
            self._abandon_late(done)
            self._resubmit_due()
        return done

    def close(self) -> None:
        """Let accepted batches finish, tear the client down and close the fds.  Idempotent.

        Completions not drained by then are dropped (LMCache stops draining before it
        closes its native client).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._breaker is not None:
            self._breaker.stop()
        try:
            self._client.close()
        finally:
            self._epoll.close()
            os.close(self._local_fd)
            with self._lock:
                self._batches.clear()
                self._ready.clear()

    # ------------------------------------------------------------------ extras

    @property
    def client(self) -> Client:
        """The underlying :class:`mooncake_cffi.Client` (for stats and tests)."""
        return self._client

    @property
    def key_prefix(self) -> str:
        """The prefix added to every key."""
        return self._prefix

    def stats(self) -> dict[str, dict[str, float]]:
        """Per-lane counters and latencies of the client (see ``Client.stats``)."""
        return self._client.stats()

    def __enter__(self) -> MooncakeConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<mooncake_cffi.lmcache.MooncakeConnector {state} prefix={self._prefix!r}>"

    # ---------------------------------------------------------------- plumbing

    def _submit(self, kind: str, keys: Sequence[str], buffers: Sequence[Any] | None) -> int:
        """Queue one batch and return its id; every refusal becomes a failed completion."""
        try:
            names = [self._prefix + k for k in keys] if self._prefix else list(keys)
            bufs = list(buffers) if buffers is not None else None
            sizes = [memoryview(b).nbytes for b in bufs] if bufs is not None else None
        except Exception as exc:  # not a list of str / buffers: refuse, never raise
            return self._refuse(kind, 0, type(exc).__name__, str(exc))
        if bufs is not None and len(bufs) != len(names):
            detail = f"{len(names)} keys but {len(bufs)} buffers"
            return self._refuse(kind, len(names), status_name(MCS_E_INVALID_ARG), detail)
        if not names:
            with self._lock:
                return self._post(True, "", [] if kind != "store" else None)
        with self._lock:
            if self._closed:
                return self._post_failure(
                    kind, len(names), status_name(MCS_E_CLOSED), "the connector is closed"
                )
            breaker = self._breaker
            if breaker is not None and breaker.open:
                breaker.refused += 1
                name = status_name(breaker.code)
                return self._post(
                    False, f"{name}: the store is not answering", none_found(kind, names)
                )
            # Failing open, a load lands: Mooncake reads into the shim's memory, copied
            # into LMCache's buffers as each read ends until the load is withdrawn at its
            # deadline. One that outlives it then fails at once (LMCache recomputes and
            # reuses its buffers) while Mooncake may still write, into the shim's memory.
            limit = self._load_deadline if kind == "load" else None
            land = limit is not None
            try:
                client_batch = self._client.submit(
                    _OPS[kind], names, bufs, force=(kind == "delete"), land=land
                )
            except Exception as exc:
                name = getattr(exc, "name", None) or type(exc).__name__
                return self._post_failure(kind, len(names), name, str(exc))
            task_id = self._take_id()
            # LMCache keeps its buffers alive; a retry needs them again.
            keep = bufs if self._retry is not None else None
            info = TaskBatch(task_id, kind, names, sizes, keep)
            if limit is not None:
                info.deadline = info.start + limit
                self._arm(info.deadline)
            self._batches[client_batch] = info
            return task_id

    def _abandon_late(self, done: list[DrainedCompletion]) -> None:
        """Fail the landed loads past their deadline (call with the lock held): LMCache
        recomputes, the breaker opens, and their completions are dropped when they come."""
        now = time.monotonic()
        for client_batch, info in self._batches.items():
            if info.deadline is None or info.abandoned or now < info.deadline:
                continue
            info.abandoned = True
            self._client.batches.withdraw(client_batch)  # what is still queued is not read
            n = len(info.keys)
            name = status_name(MCS_E_TIMEOUT)
            detail = f"batch of {n} keys: not read within {self._load_deadline:g} s"
            self._failures.report("load", name, detail)
            done.append((info.task_id, False, f"{name}: {detail}", [False] * n))
            if self._breaker is not None:
                self._breaker.trip(MCS_E_TIMEOUT)
        due = [i.deadline for i in self._batches.values() if i.deadline and not i.abandoned]
        if due:
            self._arm(min(due))

    def _arm(self, when: float) -> None:
        """Make event_fd() readable at ``when``, a load's deadline (call with the lock held):
        one timer for the earliest, not one per load."""
        if self._armed_at is not None and self._armed_at <= when:
            return
        self._armed_at = when
        timer = threading.Timer(max(0.0, when - time.monotonic()), self._ring_armed)
        timer.daemon = True
        timer.start()

    def _ring_armed(self) -> None:
        with self._lock:
            self._armed_at = None
            if not self._closed:
                os.eventfd_write(self._local_fd, 1)

    def _retry_later(self, info: TaskBatch, c: Completion) -> bool:
        """With a retry policy, whether the retryable keys of ``c`` go again (later); the
        outcomes land in ``info.results`` (call with the lock held)."""
        if self._retry is None or len(c.results) != len(info.todo):
            return False
        for i, r in zip(info.todo, c.results):
            info.results[i] = r
        again = [i for i in info.todo if info.results[i] < 0 and is_retryable(info.results[i])]
        if not again:
            return self._finish(info)
        if info.delays is None:
            info.delays = self._retry.delays()
        delay = next(info.delays, None)
        budget = self._retry.budget
        now = time.monotonic()
        if delay is None or (budget is not None and now + delay - info.start > budget):
            return self._finish(info)
        info.todo = again
        heapq.heappush(self._due, (now + delay, info.task_id, info))
        self._wake_at(now + delay)
        return True

    def _finish(self, info: TaskBatch) -> bool:
        """After retries: the batch completes with every key's last outcome."""
        if info.todo == list(range(len(info.keys))):
            return False  # the completion in hand is the whole batch's
        whole = Completion(
            id=info.task_id,
            op=_OPS[info.kind],
            status=0,
            results=info.results,
            n_failed=0,
            message="",
        )
        self._ready.append(self._translation(info, whole))
        os.eventfd_write(self._local_fd, 1)
        return True

    def _wake_at(self, when: float) -> None:
        """Make event_fd() readable at ``when`` (a retry is due): a timer on our eventfd."""
        timer = threading.Timer(max(0.0, when - time.monotonic()), self._ring)
        timer.daemon = True
        timer.start()

    def _ring(self) -> None:
        with self._lock:
            if not self._closed:
                os.eventfd_write(self._local_fd, 1)

    def _resubmit_due(self) -> None:
        """Submit again the retries whose time has come (call with the lock held)."""
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            _, _, info = heapq.heappop(self._due)
            keys = [info.keys[i] for i in info.todo]
            bufs = None if info.buffers is None else [info.buffers[i] for i in info.todo]
            try:
                client_batch = self._client.submit(
                    _OPS[info.kind],
                    keys,
                    bufs,
                    force=info.kind == "delete",
                    land=info.deadline is not None,
                )
            except Exception as exc:  # the retry itself was refused: the batch ends here
                code = getattr(exc, "code", MCS_E_INVALID_ARG)
                for i in info.todo:
                    info.results[i] = code
                info.todo = []
                self._finish(info)
                continue
            self._batches[client_batch] = info

    def _refuse(self, kind: str, n: int, name: str, detail: str) -> int:
        with self._lock:
            return self._post_failure(kind, n, name, detail)

    def _post_failure(self, kind: str, n: int, name: str, detail: str) -> int:
        """A failed completion for a refused batch (call with the lock held)."""
        self._failures.report(kind, name, f"batch of {n} keys refused: {detail}")
        bools: list[bool] | None = None if kind == "store" else [False] * n
        return self._post(False, detail if detail.startswith(name) else f"{name}: {detail}", bools)

    def _post(self, ok: bool, error: str, bools: list[bool] | None) -> int:
        """Queue a completion made here and signal it (call with the lock held)."""
        task_id = self._take_id()
        self._ready.append((task_id, ok, error, bools))
        if not self._closed:
            os.eventfd_write(self._local_fd, 1)
        return task_id

    def _take_id(self) -> int:
        """A task id for LMCache (ours: refused and empty batches take one too)."""
        task_id = self._next_id
        self._next_id += 1
        return task_id
