"""How ``mcl2 bench`` times an operation: :class:`Runner` sends batches of keys from
``--concurrency`` threads and gathers per-call latencies into an :class:`OpResult`;
:func:`warm_up` touches the storage nodes' memory with throw-away keys first, and
:func:`cleanup` force-removes every key the bench wrote.
"""

from __future__ import annotations

import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mooncake_cffi.status import OBJECT_NOT_FOUND

from .interrupts import held_signals
from .output import Progress

#: Keys per remove batch during cleanup.
CLEANUP_BATCH = 1024
#: How long cleanup retries keys Mooncake refuses to remove.
CLEANUP_RETRY_SECONDS = 5.0
_POLL = 0.1


@dataclass
class OpResult:
    """Figures of one operation over all keys."""

    op: str
    keys: int = 0
    bytes: int = 0
    failed: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        rate = self.keys / self.seconds if self.seconds > 0 else 0.0
        mib = self.bytes / self.seconds / (1 << 20) if self.seconds > 0 else 0.0
        return {
            "op": self.op,
            "keys": self.keys,
            "failed": self.failed,
            "seconds": round(self.seconds, 6),
            "ops_per_s": round(rate, 1),
            "mib_per_s": round(mib, 2),
            "latency_us": {
                "p50": _us(_percentile(lat, 0.50)),
                "p99": _us(_percentile(lat, 0.99)),
                "max": _us(lat[-1] if lat else None),
            },
            "first_error": self.first_error,
        }


def _percentile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e6, 1)


class Runner:
    """Runs one operation over every key with ``concurrency`` threads."""

    def __init__(self, client: Any, keys: list[bytes], size: int, batch: int, conc: int) -> None:
        self.client = client
        self.keys = keys
        self.size = size
        self.batch = batch
        self.concurrency = conc
        self.value = secrets.token_bytes(size)
        self.stop = threading.Event()
        #: Every key a put was sent for (stored or not: an interrupted call may store it).
        self.written: set[bytes] = set()
        self._lock = threading.Lock()
        self._next = 0
        self._total = len(keys)
        self.done = 0

    def _take(self) -> list[bytes] | None:
        """The next batch: up to ``batch`` keys, never across the end of one pass."""
        with self._lock:
            if self.stop.is_set() or self._next >= self._total:
                return None
            start = self._next % len(self.keys)
            end = min(start + self.batch, len(self.keys))
            self._next += end - start
        return self.keys[start:end]

    def _call(self, op: str, scratch: list[memoryview]) -> Callable[[list[bytes]], list[bool]]:
        client, value, size = self.client, self.value, self.size

        def put(keys: list[bytes]) -> list[bool]:
            statuses = client.put_from(keys, [value] * len(keys), timeout=None)
            return [s == 0 for s in statuses]

        def get(keys: list[bytes]) -> list[bool]:
            got = client.get_into(keys, scratch[: len(keys)], timeout=None)
            return [n == size for n in got]

        def exists(keys: list[bytes]) -> list[bool]:
            if len(keys) == 1:
                return [client.exists(keys[0], timeout=None)]
            return list(client.batch_exists(keys, timeout=None))

        return {"put": put, "get": get, "exists": exists}[op]

    def run(self, op: str, progress: Progress, warm_calls: int = 0, passes: int = 1) -> OpResult:
        """Time ``op`` over every key, ``passes`` times (reads only: a put stores each key
        once).  Before the clock starts each worker makes ``warm_calls`` untimed calls on
        the first batch (reads only too)."""
        result = OpResult(op)
        if op == "put":
            warm_calls, passes = 0, 1
        self._next = 0
        self._total = len(self.keys) * passes
        self.done = 0
        errors: list[BaseException] = []
        # The clock starts once every worker has its buffers ready, and stops when the last
        # one is done.
        ready = threading.Barrier(self.concurrency + 1)
        ends: list[float] = []

        def worker() -> None:
            # Signals go to the main thread; a worker's call is never cut short by one.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            scratch_buf = bytearray(self.size * self.batch) if op == "get" else bytearray()
            view = memoryview(scratch_buf)
            scratch = [view[i * self.size : (i + 1) * self.size] for i in range(self.batch)]
            call = self._call(op, scratch)
            lat: list[float] = []
            ok_keys = failed = 0
            try:
                for _ in range(warm_calls):
                    try:
                        call(self.keys[: self.batch])
                    except Exception:  # noqa: S110 - the timed calls report failures
                        pass
                ready.wait()
                while (keys := self._take()) is not None:
                    if op == "put":
                        with self._lock:
                            self.written.update(keys)
                    t0 = time.perf_counter()
                    try:
                        oks = call(keys)
                    except Exception as exc:  # a whole batch failed: count it, keep going
                        oks = [False] * len(keys)
                        if result.first_error is None:
                            result.first_error = f"{getattr(exc, 'name', type(exc).__name__)}"
                    lat.append(time.perf_counter() - t0)
                    good = sum(oks)
                    ok_keys += good
                    failed += len(keys) - good
                    with self._lock:
                        self.done += len(keys)
            except BaseException as exc:  # pragma: no cover - reported by the main thread
                errors.append(exc)
            finally:
                end = time.perf_counter()
                with self._lock:
                    ends.append(end)
                    result.latencies.extend(lat)
                    result.keys += ok_keys
                    result.failed += failed

        threads = [
            threading.Thread(target=worker, name=f"mcl2-bench-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        try:
            ready.wait()
            start = time.perf_counter()
            shown = 0
            for t in threads:
                while t.is_alive():
                    t.join(_POLL)
                    done = self.done
                    progress.advance(done - shown)
                    shown = done
        except KeyboardInterrupt:
            self.stop.set()  # the threads finish the batch they hold, then stop
            ready.abort()  # (in case the signal came before the start)
            with held_signals():
                for t in threads:
                    t.join()
            raise
        result.seconds = (max(ends) if ends else time.perf_counter()) - start
        result.bytes = result.keys * self.size if op != "exists" else 0
        if errors:
            raise errors[0]
        return result


def warm_up(client: Any, runner: Runner, show: bool) -> dict[str, Any]:
    """Put the throw-away values and remove them again, untimed.

    A storage node maps its segment lazily, so the first put to each page pays a page fault
    (measured on a fresh local cluster: 16 x 4 KiB puts at 0.74x the throughput of a warm
    one); Mooncake's allocator then reuses the freed space for the timed keys.
    """
    start = time.perf_counter()
    with Progress(show, len(runner.keys), "warm-up") as progress:
        result = runner.run("put", progress)
    left, _error = cleanup(client, sorted(runner.written))
    if not left:
        runner.written.clear()  # nothing for the final cleanup to do again
    return {
        "keys": len(runner.keys),
        "value_size": runner.size,
        "bytes": len(runner.keys) * runner.size,
        "failed": result.failed,
        "seconds": round(time.perf_counter() - start, 3),
        "left_behind": left,
    }


def cleanup(client: Any, keys: Sequence[bytes]) -> tuple[int, str | None]:
    """Force-remove the keys the bench wrote (absent ones count as removed), and check that
    they are gone.

    Keys Mooncake refuses to remove yet (a put that was cut short may still be finishing),
    and keys still found after their removal, are tried again for up to
    :data:`CLEANUP_RETRY_SECONDS`.  Returns how many are left behind and why the last of
    them was (an error name, or ``still present``).
    """
    from mooncake_cffi import error_name

    pending = list(keys)
    last_error: str | None = None
    deadline = time.monotonic() + CLEANUP_RETRY_SECONDS
    while True:
        failed: list[bytes] = []
        removed: list[bytes] = []
        for i in range(0, len(pending), CLEANUP_BATCH):
            chunk = pending[i : i + CLEANUP_BATCH]
            try:
                statuses = client.batch_remove(chunk, force=True)
            except Exception as exc:
                failed.extend(chunk)
                last_error = getattr(exc, "name", type(exc).__name__)
                continue
            for key, status in zip(chunk, statuses, strict=True):
                if status < 0 and status != OBJECT_NOT_FOUND:
                    failed.append(key)
                    last_error = error_name(status)
                else:
                    removed.append(key)
        for i in range(0, len(removed), CLEANUP_BATCH):
            chunk = removed[i : i + CLEANUP_BATCH]
            try:
                present = client.batch_exists(chunk)
            except Exception as exc:
                failed.extend(chunk)
                last_error = getattr(exc, "name", type(exc).__name__)
                continue
            still = [key for key, there in zip(chunk, present, strict=True) if there]
            if still:
                failed.extend(still)
                last_error = "still present"
        if not failed or time.monotonic() >= deadline:
            return len(failed), last_error
        pending = failed
        time.sleep(0.2)
