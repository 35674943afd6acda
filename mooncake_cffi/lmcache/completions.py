"""What a completion of the client means to LMCache: ``(task id, ok, error, per-key bools)``.

The connector (:mod:`.connector`) remembers a :class:`TaskBatch` for each batch it
submitted, under the client's batch id; :class:`Translation` turns the client's
:class:`~mooncake_cffi.Completion` of it into the tuple LMCache drains, under the task id
LMCache was given (the two ids are never the same thing).  A load counts as a hit only
when the stored value has exactly the buffer's size; a delete of a missing key counts as
done; each failure is logged once, with Mooncake's error name.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from .._core.breaker import Breaker
from .._core.breaker import failed as has_failed
from ..client import Completion
from ..status import INVALID_PARAMS, OBJECT_NOT_FOUND, SHIM_BASE
from ..status import name as status_name
from .failure_log import FailureLog

__all__ = ["DrainedCompletion", "TaskBatch", "Translation", "none_found"]

DrainedCompletion = tuple[int, bool, str, "list[bool] | None"]


def none_found(kind: str, keys: Sequence[str]) -> list[bool] | None:
    """Per-key bools of a batch that found nothing (stores have none)."""
    return None if kind == "store" else [False] * len(keys)


class TaskBatch:
    """What the connector must remember about a submitted batch to translate its completion:
    and, with a retry policy, what to submit again (``todo``: the indices of the keys in
    flight; ``results``: every key's latest outcome).  A load that lands (failing open) may
    be ``abandoned`` at its ``deadline``."""

    __slots__ = (
        "task_id",
        "kind",
        "keys",
        "sizes",
        "buffers",
        "todo",
        "results",
        "delays",
        "start",
        "deadline",
        "abandoned",
    )

    def __init__(
        self,
        task_id: int,
        kind: str,
        keys: list[str],
        sizes: list[int] | None,
        buffers: list[Any] | None = None,
    ) -> None:
        self.task_id = task_id  # the id LMCache sees; never the client's batch id
        self.kind = kind
        self.keys = keys
        self.sizes = sizes
        self.buffers = buffers
        self.todo: list[int] = list(range(len(keys)))
        self.results: list[int] = [0] * len(keys)
        self.delays: Iterator[float] | None = None
        self.start = time.monotonic()
        self.deadline: float | None = None
        self.abandoned = False


class Translation:
    """Completions into LMCache's tuples, with the connector's failure log, its breaker
    (None: not failing open; it observes every failed batch)."""

    def __init__(self, failures: FailureLog, breaker: Breaker | None) -> None:
        self.failures = failures
        self.breaker = breaker

    def __call__(self, info: TaskBatch, c: Completion) -> DrainedCompletion:
        """LMCache's view of one of the client's completions (logs failures once)."""
        results = c.results
        if self.breaker is not None and (c.status < 0 or has_failed(results)):
            self.breaker.observe(info.start, results if c.status >= 0 else c.status)
        if c.status <= SHIM_BASE or len(results) != len(info.keys):
            # failed as a whole: per-key results carry nothing
            name = status_name(c.status)
            self.failures.report(info.kind, name, f"batch of {len(info.keys)} keys: {c.message}")
            bools = None if info.kind == "store" else [False] * len(info.keys)
            return info.task_id, False, f"{name}: {c.message}", bools
        if info.kind == "load":
            return self._load(info, results)
        if info.kind == "lookup":
            bools = [r == 1 for r in results]
        elif info.kind == "delete":
            bools = [r == 0 or r == OBJECT_NOT_FOUND for r in results]
        else:
            bools = None
        failed = [
            (k, r)
            for k, r in zip(info.keys, results)
            if r < 0 and not (info.kind == "delete" and r == OBJECT_NOT_FOUND)
        ]
        if not failed:
            return info.task_id, True, "", bools
        error = self._describe(info, failed)
        return info.task_id, False, error, bools

    def _load(self, info: TaskBatch, results: list[int]) -> DrainedCompletion:
        sizes = info.sizes or []
        hits = [r == s for r, s in zip(results, sizes)]
        if all(hits):
            return info.task_id, True, "", hits
        mismatched = [
            (k, r, s)
            for k, r, s in zip(info.keys, results, sizes)
            if (r >= 0 and r != s) or r == INVALID_PARAMS
        ]
        failed = [
            (k, r)
            for k, r in zip(info.keys, results)
            if r < 0 and r not in (OBJECT_NOT_FOUND, INVALID_PARAMS)
        ]
        missing = sum(1 for r in results if r == OBJECT_NOT_FOUND)
        parts = []
        if missing:
            parts.append(f"{missing} missing")
        if mismatched:
            k, r, s = mismatched[0]
            got = "larger than" if r == INVALID_PARAMS else f"{r} bytes, not"
            parts.append(
                f"{len(mismatched)} stored with another size (e.g. {k!r}: {got} the "
                f"buffer's {s} bytes)"
            )
            self.failures.report(
                "load", "SIZE_MISMATCH", f"batch of {len(info.keys)} keys: {parts[-1]}"
            )
        if failed:
            parts.append(self._describe(info, failed))
        return info.task_id, False, "; ".join(parts), hits

    def _describe(self, info: TaskBatch, failed: list[tuple[str, int]]) -> str:
        """One line about the failed keys of a batch, logged once."""
        key, code = failed[0]
        name = status_name(code)
        detail = f"{len(failed)} of {len(info.keys)} keys failed, first {key!r}: {name}"
        self.failures.report(info.kind, name, detail)
        return detail
