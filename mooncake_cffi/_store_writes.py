"""The drop-in's bytes writes that are not one key: Mooncake's ``put_batch`` /
``upsert_batch`` (one code for the batch), ``put_parts`` / ``upsert_parts`` and the values of
the tensor calls (several parts per value), and the staged writes of protocols that move data
only from registered memory.  Functions of the :class:`~._direct.StoreCalls` they serve
(``calls``), which its methods of the same names call; each runs one private batch, or the
repair of :mod:`._store_repair` when the shim refuses it as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _store_repair as repair
from ._marshal import Packed
from ._pointers import staging_area
from ._store_repair import Failed
from .status import OP_UPSERT

if TYPE_CHECKING:
    from ._direct import StoreCalls

__all__ = ["put_parts", "put_parts_many", "put_values"]

INVALID_PARAMS = -600


def put_values(
    calls: StoreCalls, op: int, keys: list[Any], values: Sequence[Any], config: Any
) -> int:
    """Mooncake's put_batch / upsert_batch (and put / upsert with a config): one code,
    0 or the first failing key's."""
    if not calls.copies:
        return INVALID_PARAMS
    n = len(keys)
    if len(values) != n:
        return INVALID_PARAMS
    if not n:
        return 0
    if calls.staged:
        results = _put_staged(calls, op, keys, values, config)
        worst = min(results)
        return worst if worst < 0 else 0
    if n == 1 and config is None:
        return calls.put(op, keys[0], values[0], None)
    try:
        results = calls._private(lambda: Packed(op, keys, values, replicate_config=config))
    except Failed as f:
        if any(not memoryview(v).nbytes for v in values):
            return INVALID_PARAMS  # as Mooncake's: the batch fails whole, nothing stored

        def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
            sub, vals = [keys[i] for i in idx], [values[i] for i in idx]
            return calls._private(lambda: Packed(op, sub, vals, replicate_config=config))

        answer = repair.key_answer(op)
        results = repair.batch_refused(f.rc, keys, answer, run, reverse=op == OP_UPSERT)
    worst = min(results)
    return worst if worst < 0 else 0


def _put_staged(
    calls: StoreCalls, op: int, keys: list[Any], values: Sequence[Any], config: Any
) -> list[int]:
    """Copy the values into one buffer registered for the call and store them from it;
    per-key results."""
    staged = staging_area(values)
    if staged is None:
        return [INVALID_PARAMS] * len(keys)
    area, base, addrs, sizes = staged
    rc = calls.register(base, len(area))
    if rc:
        return [rc] * len(keys)
    try:
        return calls.addresses(op, keys, addrs, sizes, config)
    finally:
        calls.unregister(base)
        del area


def put_parts_many(
    calls: StoreCalls, op: int, keys: list[Any], parts: Sequence[Sequence[Any]], config: Any
) -> list[int]:
    """Values made of several bytes-like parts each, stored one after another (a
    tensor: its metadata, then its data); per-key results."""
    n = len(keys)
    if len(parts) != n:
        return [INVALID_PARAMS] * n
    if not n:
        return []
    if calls.staged:
        joined = [b"".join(memoryview(x).cast("B").tobytes() for x in p) for p in parts]
        return _put_staged(calls, op, keys, joined, config)

    def run(idx: list[int], keys: Sequence[Any]) -> list[int]:
        sub, vals = [keys[i] for i in idx], [list(parts[i]) for i in idx]
        return calls._private(lambda: Packed(op, sub, vals, replicate_config=config, parts=True))

    def bad(i: int) -> int | None:
        return INVALID_PARAMS if not parts[i] else None

    try:
        return run(list(range(n)), keys)
    except Failed as f:
        answer = repair.key_answer(op)
        return repair.batch_refused(f.rc, keys, answer, run, bad, reverse=op == OP_UPSERT)


def put_parts(calls: StoreCalls, op: int, key: Any, parts: Sequence[Any], config: Any) -> int:
    """One value from several bytes-like parts, stored one after another.  As Mooncake's:
    empty parts add nothing, and a value with no bytes at all (no parts, or only empty
    ones) answers 0 and stores nothing (an existing value stays)."""
    if not calls.copies:
        return INVALID_PARAMS
    kept = [p for p in parts if memoryview(p).nbytes]
    if not kept:
        return 0
    return put_parts_many(calls, op, [key], [kept], config)[0]
