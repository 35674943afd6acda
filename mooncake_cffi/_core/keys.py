"""Operations on keys alone: exists, size, remove, and the leading-prefix lookup.

:class:`Keys` is what :class:`mooncake_cffi.Client`'s key calls run: one key through the
single-key fast path of :class:`~_core.blocking.BlockingCalls`, many through one keys-only batch,
retried per the client's policy, with the per-key codes turned into answers (a missing key
is False / None, never an error) or into the error of the first key that failed.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import InvalidArgumentError, error_for
from ..status import (
    FLAG_FORCE,
    MCS_E_INVALID_ARG,
    OBJECT_NOT_FOUND,
    OP_EXISTS,
    OP_REMOVE,
    OP_SIZE,
    describe,
    is_retryable,
)
from .blocking import BlockingCalls
from .plans import Step, lookup_prefix_plan, raise_key_errors
from .types import Timeout

__all__ = ["Keys"]


class Keys:
    """Key lookups and removals of a client."""

    def __init__(self, calls: BlockingCalls) -> None:
        self.calls = calls
        self._prefix_all_hit = False  # lookup_prefix: the last lookup found every key

    def exists(self, key: Any, timeout: Timeout) -> bool:
        r = self.calls.one(OP_EXISTS, key, timeout)
        if r == 1:
            return True
        if r < 0:
            if self.calls.retry is not None and is_retryable(r):
                return self.exists_many([key], timeout)[0]
            raise error_for(r, f"key {key!r}: {describe(r)}")
        return False

    def exists_many(self, keys: list[Any], timeout: Timeout) -> list[bool]:
        calls = self.calls
        start = time.monotonic() if calls.retry is not None else 0.0
        found: list[bool] | None
        codes: list[int] | None
        if len(keys) == 1:
            # One key takes the single-key call: no packing, no conversion of an array
            # (each a few us right after a round trip, as much as the shim's own cost).
            r = calls.one(OP_EXISTS, keys[0], timeout)
            found, codes = ([r == 1], None) if r >= 0 else (None, [r])
        else:
            codes = calls.keys_call(OP_EXISTS, _given(keys), 0, timeout)
            found = _found(codes)
        if found is None:  # some key failed: retry per the policy, else raise its error
            assert codes is not None
            results = calls.retried(Step(OP_EXISTS, keys), codes, start, timeout)
            raise_key_errors(keys, results)
            found = list(map(bool, results))
        return found

    def size(self, key: Any, timeout: Timeout) -> int | None:
        r = self.calls.one(OP_SIZE, key, timeout)
        if r < 0 and self.calls.retry is not None and is_retryable(r):
            r = self.calls.keys_list(OP_SIZE, [key], 0, timeout)[0]
        raise_key_errors([key], [r], (OBJECT_NOT_FOUND,))
        return None if r == OBJECT_NOT_FOUND else r

    def size_many(self, keys: list[Any], timeout: Timeout) -> list[int | None]:
        results = self.calls.keys_list(OP_SIZE, _given(keys), 0, timeout)
        raise_key_errors(keys, results, (OBJECT_NOT_FOUND,))
        return [None if r == OBJECT_NOT_FOUND else r for r in results]

    def remove(self, key: Any, force: bool, timeout: Timeout) -> bool:
        flags = FLAG_FORCE if force else 0
        r = self.calls.one(OP_REMOVE, key, timeout, flags)
        if r < 0 and self.calls.retry is not None and is_retryable(r):
            r = self.calls.keys_list(OP_REMOVE, [key], flags, timeout)[0]
        if r == OBJECT_NOT_FOUND:
            return False
        raise_key_errors([key], [r])
        return True

    def remove_many(self, keys: list[Any], force: bool, timeout: Timeout) -> list[int]:
        return self.calls.keys_list(OP_REMOVE, _given(keys), FLAG_FORCE if force else 0, timeout)

    def lookup_prefix(self, keys: list[Any], timeout: Timeout) -> int:
        count, self._prefix_all_hit = self.calls.drive(
            lookup_prefix_plan(keys, self._prefix_all_hit), timeout
        )
        return count  # type: ignore[no-any-return]


def _given(keys: list[Any]) -> list[Any]:
    """``keys``, refused when empty: a batch call asks about at least one key, as every
    batch call of both clients does."""
    if not keys:
        raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
    return keys


def _found(results: list[int]) -> list[bool] | None:
    """Existence answers as bools (1 present, 0 absent), or None when a key failed. All
    present and none present, a KV-cache lookup's usual answers, are one count each."""
    n = len(results)
    if results.count(1) == n:
        return [True] * n
    if min(results) < 0:
        return None
    return [r != 0 for r in results]
