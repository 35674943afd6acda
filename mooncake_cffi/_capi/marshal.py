"""Moving a batch across the C boundary: packed keys, buffers, results, replica options.

Everything here turns Python objects into the shim's ``struct mcs_batch`` with a constant
number of allocations per batch (keys travel as one byte string of NUL-terminated keys:
one ``join`` and one ``encode`` for str keys), and keeps alive what the shim borrows.
Nothing here knows about lanes or plans.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError, error_for
from ..status import MCS_E_INVALID_ARG
from . import binding
from .binding import ffi, lib
from .pointers import address, point_at_address_parts, point_at_addresses
from .replica_options import attach_replica

__all__ = [
    "Packed",
    "ReusedBatch",
    "address",
    "as_list",
    "checked_sizes",
    "encode_key",
    "from_buffer",
    "gather_values",
    "nbytes",
    "pack_keys",
    "refused",
    "results_list",
    "sent_bytes",
]

_BATCH_SIZE = ffi.sizeof("struct mcs_batch")
#: GET_BUFFER values are copied out one by one for few keys or large values (one copy),
#: else gathered into one buffer by the shim and cut (no per-key call into C).
_PER_KEY_COPY_KEYS = 8
_PER_KEY_COPY_BYTES = 32 * 1024
_ffi_from_buffer = ffi.from_buffer
_BUFFER_OPS = (lib.MCS_OP_GET, lib.MCS_OP_PUT, lib.MCS_OP_UPSERT)


def as_list(items: Any, what: str = "keys") -> list[Any]:
    """``items`` as a list; a lone str/bytes is refused (it would be iterated per character)."""
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of keys, not a single {type(items).__name__}")
    return items if type(items) is list else list(items)


def encode_key(key: Any, index: int) -> bytes:
    """One key as bytes, or a TypeError / InvalidArgumentError naming it."""
    if isinstance(key, str):
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                MCS_E_INVALID_ARG, f"key #{index} is not valid Unicode ({exc.reason})"
            ) from None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"key #{index} must be str or bytes, not {type(key).__name__}")


def pack_keys(keys: list[Any]) -> bytes:
    """All keys in one byte string, separated by NUL bytes.

    The shim reads ``len(result) + 1`` bytes: a bytes object always keeps a NUL after its
    last byte (CPython's C API guarantees it), which terminates the last key.  The shim
    refuses empty keys, and a key holding a NUL (it would split into more keys than n).
    """
    try:
        return "\0".join(keys).encode()  # TypeError unless every key is a str
    except TypeError:
        if all(type(k) is bytes for k in keys):
            return b"\0".join(keys)
    except UnicodeEncodeError:
        pass
    return b"\0".join([encode_key(k, i) for i, k in enumerate(keys)])


def point_at_keys(b: Any, op: int, keys: list[Any], flags: int) -> Any:
    """Set a batch's op, flags and packed keys; returns the cdata that must outlive the call."""
    cdata = ffi.from_buffer(pack_keys(keys))  # keeps the packed bytes alive
    b.op = op
    b.flags = flags
    b.n = len(keys)
    b.key_data = cdata
    b.key_bytes = len(cdata) + 1  # with the NUL every bytes object ends with
    return cdata


def _point_at_buffers(
    b: Any,
    op: int,
    n: int,
    buffers: Sequence[Any] | None,
    sizes: Sequence[int] | None,
    writable: bool,
    replicate_config: Any,
    arrays: tuple[Any, Any] | None = None,
) -> list[Any]:
    """Set a batch's buffers, sizes and ReplicateConfig (or clear them); returns what the
    call borrows.  ``arrays`` are reusable (bufs, sizes) arrays of at least n entries;
    without them fresh ones are made."""
    if buffers is None:
        if op in _BUFFER_OPS:
            raise ValueError("this operation needs buffers")
        b.bufs = ffi.NULL
        b.sizes = ffi.NULL
        b.replica = ffi.NULL
        return []
    if op not in _BUFFER_OPS:
        raise ValueError("this operation takes no buffers")
    if len(buffers) != n:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG, f"{n} keys but {len(buffers)} buffers: they must pair up"
        )
    try:
        cbufs = [_ffi_from_buffer(x, require_writable=writable) for x in buffers]
    except (TypeError, BufferError):  # find the culprit, and name it
        cbufs = [from_buffer(x, i, writable) for i, x in enumerate(buffers)]
    lens = list(map(len, cbufs))
    if sizes is not None:
        lens = checked_sizes(sizes, lens)
    if arrays is None:
        barr = ffi.new("void *[]", cbufs)
        csizes = ffi.new("uint64_t[]", lens)
        keep = [buffers, cbufs, barr, csizes]
    else:
        barr, csizes = arrays
        barr[0:n] = cbufs
        csizes[0:n] = lens
        keep = [buffers, cbufs]
    b.bufs = barr
    b.sizes = csizes
    attach_replica(b, op, replicate_config, keep)
    return keep


def _point_at_parts(
    b: Any,
    op: int,
    n: int,
    parts: Sequence[Sequence[Any]],
    part_sizes: Sequence[Sequence[int]] | None,
    writable: bool,
    replicate_config: Any,
) -> list[Any]:
    """Set a batch's multi-part buffers (key i's value in ``parts[i]``, see "Multi-part
    values" in mcs.h), their sizes, part counts and replica options; returns what the call
    borrows."""
    if op not in _BUFFER_OPS:
        raise ValueError("multi-part values are for get, put and upsert")
    if isinstance(parts, (str, bytes)) or len(parts) != n:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG, f"{n} keys but {len(parts)} lists of parts: they must pair up"
        )
    if part_sizes is not None and len(part_sizes) != n:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG, f"{n} keys but {len(part_sizes)} lists of part sizes"
        )
    flat: list[Any] = []
    lens: list[int] = []
    counts: list[int] = []
    for i, key_parts in enumerate(parts):
        if isinstance(key_parts, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"parts of key #{i} must be a sequence of buffers, not one buffer")
        if not key_parts:
            raise InvalidArgumentError(MCS_E_INVALID_ARG, f"key #{i} has no parts")
        cparts = [from_buffer(x, len(flat) + j, writable) for j, x in enumerate(key_parts)]
        part_lens = list(map(len, cparts))
        if part_sizes is not None:
            part_lens = checked_sizes(part_sizes[i], part_lens)
        flat.extend(cparts)
        lens.extend(part_lens)
        counts.append(len(cparts))
    barr = ffi.new("void *[]", flat)
    csizes = ffi.new("uint64_t[]", lens)
    ccounts = ffi.new("uint32_t[]", counts)
    b.bufs, b.sizes, b.part_counts = barr, csizes, ccounts
    keep = [parts, flat, barr, csizes, ccounts]
    attach_replica(b, op, replicate_config, keep)
    return keep


class Packed:
    """A ``struct mcs_batch`` and everything it points to, kept alive together.

    ``results`` (and ``values`` for GET_BUFFER) are filled by the shim.  Keep the object
    alive until the shim is done with the batch: for a submitted batch (or a run that
    timed out) that is when its completion has been drained.  With ``parts=True``,
    ``buffers[i]`` is key i's list of parts and ``sizes[i]`` (optional) their sizes: a
    multi-part value (see "Multi-part values" in mcs.h).  With ``addresses=True`` the
    buffers are integer addresses (lists of them with ``parts``) and ``sizes`` is required.
    """

    __slots__ = ("batch", "results", "values", "n", "keys", "_keep")

    def __init__(
        self,
        op: int,
        keys: list[Any],
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        flags: int = 0,
        writable: bool = False,
        replicate_config: Any = None,
        parts: bool = False,
        addresses: bool = False,
    ) -> None:
        n = len(keys)
        if n == 0:
            raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
        b = ffi.new("struct mcs_batch *")
        b.struct_size = _BATCH_SIZE
        if addresses:
            if buffers is None or sizes is None:
                raise ValueError("addresses=True needs buffer addresses and their sizes")
            point = point_at_address_parts if parts else point_at_addresses
            keep = point(b, op, n, buffers, sizes, replicate_config)  # type: ignore[arg-type]
        elif parts:
            if buffers is None:
                raise ValueError("parts=True needs buffers: one list of parts per key")
            keep = _point_at_parts(b, op, n, buffers, sizes, writable, replicate_config)  # type: ignore[arg-type]
        else:
            keep = _point_at_buffers(b, op, n, buffers, sizes, writable, replicate_config)
        keep.append(point_at_keys(b, op, keys, flags))
        self.results = ffi.new("int64_t[]", n)
        b.results = self.results
        if op == lib.MCS_OP_GET_BUFFER:
            self.values = ffi.new("void *[]", n)
            b.values = ffi.cast("const void **", self.values)
        else:
            self.values = None
        self.batch = b
        self.n = n
        self.keys = keys
        self._keep = keep

    @classmethod
    def over(cls, batch: Any, results: Any, keys: list[Any], keep: list[Any]) -> Packed:
        """A Packed over a struct filled elsewhere (a thread's reused batch whose call timed
        out: the shim keeps using it), keeping ``keep`` alive with it."""
        packed = cls.__new__(cls)
        packed.batch = batch
        packed.results = results
        packed.values = None
        packed.n = len(keys)
        packed.keys = keys
        packed._keep = keep
        return packed

    def hold(self, obj: Any) -> None:
        """Keep ``obj`` (memory the batch points into) alive as long as the batch: until
        its completion is drained, or its timed-out call's orphan is reaped."""
        self._keep.append(obj)

    def unpack(self) -> list[int]:
        """The per-key results as a list of ints."""
        return results_list(self.results, self.n)

    def payload(self) -> int:
        """The bytes the batch moves: the sum of its buffers' sizes (0 without buffers)."""
        b = self.batch
        if b.sizes == ffi.NULL:
            return 0
        counts = b.part_counts
        parts = self.n if counts == ffi.NULL else sum(counts[0 : self.n])
        return sum(b.sizes[0:parts])


class ReusedBatch:
    """One thread's reusable batch for its blocking calls without a deadline.

    The shim is done with a batch when such an ``mcs_client_run`` returns, so the struct and its
    arrays (grown as needed, never shrunk) serve the thread's next call: a call allocates
    no cdata but its packed keys and one view per buffer.  Keys-only and one-key calls use
    just its ``results`` (``mcs_client_run_keys`` / ``mcs_client_run_one`` need no struct).
    Not for GET_BUFFER (its values outlive the call) nor for calls with a deadline (the
    shim may keep a timed-out batch).
    """

    __slots__ = ("batch", "results", "bufs", "addrs", "sizes", "cap", "busy")

    def __init__(self, cap: int = 64) -> None:
        self.batch = ffi.new("struct mcs_batch *")
        self.batch.struct_size = _BATCH_SIZE
        self.busy = False  # between filling and reading back (re-entry takes a Packed)
        self._alloc(cap)

    def grow(self, n: int) -> None:
        """Room for at least n keys (the arrays at least double)."""
        self._alloc(max(n, 2 * self.cap))

    def _alloc(self, cap: int) -> None:
        self.cap = cap
        self.results = ffi.new("int64_t[]", cap)
        self.bufs = ffi.new("void *[]", cap)
        self.addrs = ffi.cast("uintptr_t *", self.bufs)  # the same array, filled with ints
        self.sizes = ffi.new("uint64_t[]", cap)
        self.batch.results = self.results

    def fill(
        self,
        op: int,
        keys: list[Any],
        flags: int,
        buffers: Sequence[Any] | None = None,
        sizes: Sequence[int] | None = None,
        writable: bool = False,
        replicate_config: Any = None,
    ) -> Any:
        """Point the batch at ``keys`` (and buffers); returns what must stay alive during
        the call.  The results are valid until the thread's next call."""
        n = len(keys)
        if n > self.cap or n == 0:
            if n == 0:
                raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
            self.grow(n)
        keep = _point_at_buffers(
            self.batch, op, n, buffers, sizes, writable, replicate_config, (self.bufs, self.sizes)
        )
        keep.append(point_at_keys(self.batch, op, keys, flags))
        return keep

    def fill_addresses(
        self,
        op: int,
        keys: list[Any],
        flags: int,
        addrs: Sequence[int],
        sizes: Sequence[int],
        replicate_config: Any = None,
    ) -> Any:
        """:meth:`fill` with buffers given as integer addresses and their sizes."""
        n = len(keys)
        if n > self.cap or n == 0:
            if n == 0:
                raise InvalidArgumentError(MCS_E_INVALID_ARG, "empty batch: give at least one key")
            self.grow(n)
        keep = point_at_addresses(
            self.batch, op, n, addrs, sizes, replicate_config, (self.addrs, self.sizes)
        )
        keep.append(point_at_keys(self.batch, op, keys, flags))
        return keep


def results_list(results: Any, n: int) -> list[int]:
    """The first n int64 results as a list of ints.

    Up to :data:`_UNPACK_KEYS` results, ``ffi.unpack``.  Above, all zeros and all ones (a
    batch stored or removed whole, every key present) are one byte comparison and one
    list repetition, and anything else is one C loop through a memoryview; measured warm
    at 1,024 keys: 1.6 us and 17 us, against ``ffi.unpack``'s 11 us and 23 us.
    """
    if n <= _UNPACK_KEYS:
        small: list[int] = ffi.unpack(results, n)
        return small
    buf = ffi.buffer(results, 8 * n)
    if _ones(n).startswith(buf):
        return [1] * n
    if _ZEROS[0].startswith(buf):
        return [0] * n
    return memoryview(buf).cast("q").tolist()


# Below this many results ffi.unpack is the quickest (measured: 0.35 against 0.45 us at 16,
# 0.81 against 0.54 us at 64).
_UNPACK_KEYS = 32


_ONE = (1).to_bytes(8, sys.byteorder)
_ONES = [_ONE * 1024]
_ZEROS = [bytes(8 * 1024)]


def _ones(n: int) -> bytes:
    """At least n int64 ones as the shim writes them (cached); the cached zeros of
    ``_ZEROS[0]`` are then at least as long."""
    ones = _ONES[0]
    if len(ones) < 8 * n:
        ones = _ONES[0] = _ONE * max(n, len(ones) // 4)
        _ZEROS[0] = bytes(len(ones))
    return ones


def refused(rc: int, keys: Sequence[Any]) -> Exception:
    """The error for a batch the shim refused, naming a key that holds a NUL byte.

    Keys travel NUL-separated, so the shim sees such a key as an empty one or as one too
    many; it is looked for here, only once the shim has refused the batch.
    """
    msg = binding.last_error()
    if rc == MCS_E_INVALID_ARG and ("NUL" in msg or "empty" in msg):
        for i, k in enumerate(keys):
            if (isinstance(k, str) and "\0" in k) or (
                isinstance(k, (bytes, bytearray)) and b"\0" in k
            ):
                msg = f"key #{i} contains a NUL byte"
                break
    return error_for(rc, msg)


def gather_values(packed: Packed, results: list[int]) -> list[bytes | None]:
    """The values a GET_BUFFER batch read, as bytes; None where it read none (unread).

    Call before the batch's values are released.
    """
    n = packed.n
    total = 0
    for r in results:
        if r > 0:
            total += r
    if n <= _PER_KEY_COPY_KEYS or total >= _PER_KEY_COPY_BYTES * n:
        ptrs = ffi.cast("char **", packed.values)
        return [
            ffi.unpack(ptrs[i], r) if r > 0 else (b"" if r == 0 else None)
            for i, r in enumerate(results)
        ]
    blob = bytes(total)  # fresh and private (total > 0): the shim fills it in place
    written = ffi.new("uint64_t *")
    rc = lib.mcs_gather(written, ffi.from_buffer(blob), total, packed.values, packed.results, n)
    if rc != 0:  # pragma: no cover - the sizes come from the same results
        raise error_for(rc, "gathering values failed")
    out: list[bytes | None] = []
    pos = 0
    for r in results:
        if r >= 0:
            end = pos + r
            out.append(blob[pos:end])
            pos = end
        else:
            out.append(None)
    return out


def nbytes(value: Any) -> int:
    """Length in bytes of a bytes-like value (-1 if it is not one), for error messages."""
    try:
        return memoryview(value).nbytes
    except TypeError:
        return -1


def from_buffer(buf: Any, index: int, writable: bool) -> Any:
    """cdata over a buffer-protocol object, or a TypeError naming the buffer."""
    try:
        return ffi.from_buffer(buf, require_writable=writable)
    except (TypeError, BufferError):
        what = "a writable buffer" if writable else "a bytes-like object"
        raise TypeError(f"buffer #{index} must be {what}, not {type(buf).__name__}") from None


def checked_sizes(sizes: Sequence[int], capacities: list[int]) -> list[int]:
    if len(sizes) != len(capacities):
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG, f"{len(capacities)} keys but {len(sizes)} sizes"
        )
    out = []
    for i, (s, cap) in enumerate(zip(sizes, capacities)):
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"size #{i} must be an int, not {type(s).__name__}")
        if s < 0:
            raise InvalidArgumentError(MCS_E_INVALID_ARG, f"size #{i} ({s}) is negative")
        if s > cap:
            raise InvalidArgumentError(
                MCS_E_INVALID_ARG, f"size #{i} ({s}) exceeds its buffer ({cap} bytes)"
            )
        out.append(s)
    return out


def sent_bytes(packed: Any, i: int) -> bytes | None:
    """The bytes key ``i`` of a packed PUT / UPSERT batch sends (its parts joined), read
    from the batch's buffers; None when it has none."""
    b = packed.batch
    if b.bufs == ffi.NULL:
        return None
    if b.part_counts == ffi.NULL:
        return bytes(ffi.buffer(b.bufs[i], b.sizes[i]))
    first = sum(int(b.part_counts[k]) for k in range(i))
    count = int(b.part_counts[i])
    return b"".join(bytes(ffi.buffer(b.bufs[j], b.sizes[j])) for j in range(first, first + count))
