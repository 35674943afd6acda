"""Answering, key by key, the drop-in calls the shim refuses as a whole, as Mooncake would.

The shim refuses a batch with an empty key, a key holding a NUL byte, a key given twice, a
NULL or empty buffer; Mooncake's own client answers such a batch per key (an empty key is
simply absent, a key twice is read twice, an empty buffer fails alone).  The drop-in's calls
(:mod:`.calls`) run the well-formed batch first, and only when the shim refuses it come
here: keys that cannot go to the shim get Mooncake's answer for them, the others run again
in rounds in which no key repeats (the r-th round holds every key's r-th occurrence, or
counting from the last occurrence with ``reverse``: which occurrence's value a put keeps
depends on it).  Also the shape checks of ``get_into_ranges``.  Pure: no native calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..status import (
    MCS_E_DUPLICATE_KEY,
    MCS_E_FORKED,
    MCS_E_INTERNAL,
    MCS_E_INVALID_ARG,
    MCS_E_NOMEM,
    MCS_E_QUEUE_FULL,
    MCS_E_TIMEOUT,
    MCS_E_UNREACHABLE,
    OBJECT_NOT_FOUND,
    OP_EXISTS,
    OP_PUT,
    OP_UPSERT,
)

__all__ = [
    "Failed",
    "REPAIRABLE",
    "batch_refused",
    "code_of",
    "key_answer",
    "key_bytes",
    "one_refused",
    "ranges_failed",
    "ranges_nest",
    "ranges_shape",
    "values_by_key",
]

INVALID_PARAMS = -600
INTERNAL_ERROR = -1
RPC_TIMEOUT = -901

#: Refusals that mean "some key or buffer of this batch is malformed": answered per key.
REPAIRABLE = (MCS_E_INVALID_ARG, MCS_E_DUPLICATE_KEY)


class Failed(Exception):
    """A shim call that did not run, with its status."""

    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


def code_of(rc: int) -> int:
    """Mooncake's code for a status of the shim: Mooncake's own pass through; a deadline that
    passed is RPC_TIMEOUT (-901); a fork, a lack of memory or an unreachable server
    INTERNAL_ERROR (-1); any other refusal (bad input, a closed client) INVALID_PARAMS (-600),
    what Mooncake answers for a call it cannot make."""
    if rc > -10000:
        return rc
    if rc == MCS_E_TIMEOUT:
        return RPC_TIMEOUT
    if rc in (MCS_E_FORKED, MCS_E_NOMEM, MCS_E_INTERNAL, MCS_E_QUEUE_FULL, MCS_E_UNREACHABLE):
        return INTERNAL_ERROR
    return INVALID_PARAMS


def key_bytes(key: Any) -> bytes:
    """A key as the shim reads it: str as UTF-8, bytes as they are; a TypeError otherwise
    (Mooncake's binding takes str and bytes)."""
    if type(key) is str:
        try:
            return key.encode()
        except UnicodeEncodeError:
            raise TypeError(f"key {key!r} is not valid Unicode") from None
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"a key must be str or bytes, not {type(key).__name__}")


def _missing(op: int) -> int:
    """What Mooncake answers for an empty key (a key that cannot exist), by operation."""
    if op == OP_EXISTS:
        return 0
    if op in (OP_PUT, OP_UPSERT):
        return INVALID_PARAMS
    return OBJECT_NOT_FOUND


def one_refused(rc: int, op: int, kb: bytes) -> int:
    """The answer to a one-key call the shim returned ``rc`` for."""
    if rc == MCS_E_INVALID_ARG and kb == b"":
        return _missing(op)
    return code_of(rc)


def key_answer(op: int) -> Callable[[bytes], int | None]:
    """Mooncake's answer for a key of a batch of ``op`` that cannot go to the shim (empty:
    absent; holding a NUL byte: INVALID_PARAMS), None for a key that can."""
    missing = _missing(op)

    def answer(kb: bytes) -> int | None:
        if not kb:
            return missing
        if b"\0" in kb:
            return INVALID_PARAMS
        return None

    return answer


def _rounds(wire: list[bytes], idx: list[int], reverse: bool) -> list[list[int]]:
    """``idx`` in rounds without a repeated key: round r holds each key's r-th occurrence
    (counted from its last one with ``reverse``)."""
    seen: dict[bytes, int] = {}
    rounds: list[list[int]] = []
    for i in reversed(idx) if reverse else idx:
        r = seen.get(wire[i], 0)
        seen[wire[i]] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(i)
    return rounds


def batch_refused(
    rc: int,
    keys: Sequence[Any],
    answer: Callable[[bytes], int | None],
    run: Callable[[list[int], Sequence[Any]], list[int]],
    bad: Callable[[int], int | None] | None = None,
    reverse: bool = False,
) -> list[int]:
    """Per-key results of a batch the shim returned ``rc`` for.

    A refusal of the batch's shape (:data:`REPAIRABLE`) is answered per key: ``answer(key)``
    or ``bad(index)`` (a bad buffer) for the keys that cannot go to the shim, ``run(indices,
    keys)`` for the others, in rounds without a repeated key; any other failure fails every
    key with Mooncake's code for it.
    """
    n = len(keys)
    if rc not in REPAIRABLE:
        return [code_of(rc)] * n
    wire = [key_bytes(k) for k in keys]
    out: list[int] = [INVALID_PARAMS] * n
    good = []
    for i, kb in enumerate(wire):
        a = answer(kb)
        if a is None and bad is not None:
            a = bad(i)
        if a is None:
            good.append(i)
        else:
            out[i] = a
    for group in _rounds(wire, good, reverse):
        try:
            results = run(group, keys)
        except Failed as f:
            results = [code_of(f.rc)] * len(group)
        for i, r in zip(group, results):
            out[i] = r
    return out


def values_by_key(
    fetch: Callable[[list[Any]], list[Any]], keys: list[Any], missing: Any
) -> list[Any]:
    """The values of ``keys`` (GET_BUFFER) when the batch was refused: each distinct
    well-formed key read once, ``missing`` for the others."""
    wire = [key_bytes(k) for k in keys]
    distinct: dict[bytes, int] = {}
    for kb in wire:
        if kb and b"\0" not in kb and kb not in distinct:
            distinct[kb] = len(distinct)
    got = fetch(list(distinct)) if distinct else []
    return [got[distinct[kb]] if kb in distinct else missing for kb in wire]


# ------------------------------------------------------------------ get_into_ranges


def _fragments(
    n_bufs: int, all_keys: Sequence[Sequence[Any]], dst: Sequence[Sequence[Sequence[int]]]
) -> list[list[int]]:
    """The shape of Mooncake's answer, as its own error results have it: per buffer, the
    number of ranges of each of its keys (one key and one range where the lists lack them)."""
    shape = []
    for b in range(n_bufs):
        keys = len(all_keys[b]) if b < len(all_keys) else 1
        groups = dst[b] if b < len(dst) else []
        shape.append([len(groups[j]) if j < len(groups) else 1 for j in range(keys)])
    return shape


def ranges_failed(
    n_bufs: int,
    all_keys: Sequence[Sequence[Any]],
    dst: Sequence[Sequence[Sequence[int]]],
    code: int,
) -> list[list[list[int]]]:
    """Every range failed with ``code``, in Mooncake's shape (per buffer, key, range)."""
    return [[[code] * n for n in per_buf] for per_buf in _fragments(n_bufs, all_keys, dst)]


def ranges_shape(
    addrs: Sequence[int],
    all_keys: Sequence[Sequence[Any]],
    dst: Sequence[Sequence[Sequence[int]]],
    src: Sequence[Sequence[Sequence[int]]],
    sizes: Sequence[Sequence[Sequence[int]]],
) -> tuple[list[list[Any]], dict[tuple[int, int], int]] | None:
    """The flattened arrays of ``struct mcs_ranges`` (keys per buffer, keys, ranges per key,
    destination and source offsets, sizes) and the keys left out of them, by (buffer, key),
    with their answer, as Mooncake answers them: the keys of a buffer whose lists differ in
    length, and a key whose range lists do, fail (INVALID_PARAMS); an empty key is absent.
    None when the lists of buffers do not pair up (Mooncake then fails every range)."""
    nb = len(addrs)
    if not (len(all_keys) == len(dst) == len(src) == len(sizes) == nb):
        return None
    flat: list[list[Any]] = [[], [], [], [], [], []]
    keys_per_buf, flat_keys, per_key, flat_dst, flat_src, flat_sizes = flat
    skipped: dict[tuple[int, int], int] = {}
    for b in range(nb):
        keys = all_keys[b]
        count = 0
        whole = len(keys) == len(dst[b]) == len(src[b]) == len(sizes[b])
        for j, key in enumerate(keys):
            kb = key_bytes(key)
            if not whole or not len(dst[b][j]) == len(src[b][j]) == len(sizes[b][j]):
                skipped[b, j] = INVALID_PARAMS
            elif b"\0" in kb:
                skipped[b, j] = INVALID_PARAMS
            elif not kb:
                skipped[b, j] = OBJECT_NOT_FOUND
            else:
                count += 1
                flat_keys.append(kb)
                per_key.append(len(dst[b][j]))
                flat_dst.extend(dst[b][j])
                flat_src.extend(src[b][j])
                flat_sizes.extend(sizes[b][j])
        keys_per_buf.append(count)
    return flat, skipped


def ranges_nest(
    flat: list[int],
    all_keys: Sequence[Sequence[Any]],
    dst: Sequence[Sequence[Sequence[int]]],
    skipped: dict[tuple[int, int], int],
) -> list[list[list[int]]]:
    """Flat per-range results in Mooncake's nested shape, with the answers of the keys left
    out (:func:`ranges_shape`)."""
    out, q = [], 0
    for b, per_buf in enumerate(_fragments(len(all_keys), all_keys, dst)):
        rows = []
        for j, n in enumerate(per_buf):
            code = skipped.get((b, j))
            if code is not None:
                rows.append([code] * n)
            else:
                rows.append(flat[q : q + n])
                q += n
        out.append(rows)
    return out
