"""PyTorch tensors in Mooncake's own serialized format, for the drop-in's tensor calls.

Mooncake 0.3.13.post1 stores a tensor as one value: a 304-byte ``TensorMetadata`` (its
``_tensor_metadata_size()``) and then the tensor's bytes, C-contiguous.  The metadata, all
little-endian: a header (magic ``0x4d4f4f4e``, version 1, header size 304, dtype, ndim, layout
kind 0 = full / 1 = shard, flags 0, data offset 304, data bytes), the global and the local
shape (8 ``int64`` each, ``-1`` past ``ndim``), the number of layout axes and 4 axes of 32
bytes (zero for a full tensor).  Dtypes are numbered as Mooncake numbers them (float32 0 ...
float8_e5m2 14).  :func:`encode` and :func:`decode` write and read exactly that, so tensors
written by either client read back through the other, and the functions below are the
tensor calls of :class:`mooncake_cffi.store.MooncakeDistributedStore`, over its calls
(:class:`~.calls.StoreCalls`).  torch is imported on first use; without it the tensor
calls raise an ImportError saying what to install.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Sequence
from typing import Any

from ..status import OP_GET

__all__ = [
    "META_BYTES",
    "decode",
    "encode",
    "get_tensors",
    "get_tensors_into",
    "put_tensors",
    "put_tensors_from",
    "put_tensor_from",
    "replica_config_refused",
    "tensor_at",
]

INVALID_PARAMS = -600
META_BYTES = 304
MAGIC = 0x4D4F4F4E
_HEAD = struct.Struct("<IHHiiIIQQ")  # 40 bytes
_SHAPE = struct.Struct("<8q")  # global shape at 40, local shape at 104
_AXES = struct.Struct("<II")  # axis count, reserved, at 168
_AXIS = struct.Struct("<6iq")  # 4 axes of 32 bytes from 176
_DIMS = 8
#: Mooncake's TensorDtype numbering, and the element size of each.
DTYPES = (
    ("float32", 4),
    ("float64", 8),
    ("int8", 1),
    ("uint8", 1),
    ("int16", 2),
    ("uint16", 2),
    ("int32", 4),
    ("uint32", 4),
    ("int64", 8),
    ("uint64", 8),
    ("bool", 1),
    ("float16", 2),
    ("bfloat16", 2),
    ("float8_e4m3fn", 1),
    ("float8_e5m2", 1),
)
_by_dtype: dict[Any, int] = {}


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "the tensor calls of mooncake_cffi.store need PyTorch: pip install torch (a CPU "
            "build: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
        ) from exc
    if not _by_dtype:
        for i, (name, _) in enumerate(DTYPES):
            if hasattr(torch, name):
                _by_dtype[getattr(torch, name)] = i
    return torch


def encode(tensor: Any) -> tuple[bytes, Any] | None:
    """``(metadata, data)`` of a tensor: Mooncake's 304 bytes, and a buffer over its bytes
    (None when it has none); None for what Mooncake refuses (not a tensor, a dtype it has
    no number for, more than 8 dimensions).  A tensor off the CPU is copied to it first."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        return None
    index = _by_dtype.get(tensor.dtype)
    if index is None or tensor.dim() > _DIMS:
        return None
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    shape = list(t.shape) + [-1] * (_DIMS - t.dim())
    meta = (
        _HEAD.pack(MAGIC, 1, META_BYTES, index, t.dim(), 0, 0, META_BYTES, nbytes)
        + _SHAPE.pack(*shape) * 2
        + _AXES.pack(0, 0)
        + bytes(4 * _AXIS.size)
    )
    data = t.reshape(-1).view(torch.uint8).numpy() if nbytes else None
    return meta, data


def _parse(mv: memoryview) -> tuple[int, list[int], int, int] | None:
    """``(dtype index, shape, data offset, data bytes)`` of a stored tensor, validated as
    Mooncake validates it, or None."""
    total = mv.nbytes
    if total < META_BYTES:
        return None
    magic, version, size, dtype, ndim, kind, _, offset, nbytes = _HEAD.unpack_from(mv, 0)
    if (magic, version, size) != (MAGIC, 1, META_BYTES) or not 0 <= dtype < len(DTYPES):
        return None
    axes, _ = _AXES.unpack_from(mv, 168)
    if not 0 <= ndim <= _DIMS or axes > 4 or kind > 1:
        return None
    if not META_BYTES <= offset <= total or nbytes != total - offset:
        return None
    shapes = (_SHAPE.unpack_from(mv, 40), _SHAPE.unpack_from(mv, 104))
    for dims in shapes:
        if any(d < 0 for d in dims[:ndim]) or any(d != -1 for d in dims[ndim:]):
            return None
    local = list(shapes[1][:ndim])
    if math.prod(local) * DTYPES[dtype][1] != nbytes:
        return None
    for i in range(axes):
        kind_, _, rank, count, split, _, _ = _AXIS.unpack_from(mv, 176 + i * _AXIS.size)
        if not 0 <= kind_ <= 4 or count <= 0 or not 0 <= rank < count or not -1 <= split < ndim:
            return None
    return dtype, local, offset, nbytes


def decode(value: Any) -> Any:
    """The tensor a stored value holds (a copy of its bytes), or None if it holds none."""
    torch = _torch()
    mv = memoryview(value).cast("B")
    parsed = _parse(mv)
    if parsed is None:
        return None
    dtype, shape, offset, nbytes = parsed
    kind = getattr(torch, DTYPES[dtype][0])
    if not nbytes:
        return torch.empty(shape, dtype=kind)
    raw = bytearray(mv[offset : offset + nbytes])
    flat = torch.frombuffer(raw, dtype=torch.uint8).view(kind)
    return flat.reshape(shape) if shape else flat  # a 0-d tensor reads back 1-d, as Mooncake's


def tensor_at(ptr: int, total: int) -> Any:
    """The tensor stored at ``ptr`` (``total`` bytes), over that memory (not a copy), as
    Mooncake's get_tensor_into gives it; None if it holds none."""
    torch = _torch()
    parsed = _parse(memoryview((ctypes.c_byte * total).from_address(ptr)).cast("B"))
    if parsed is None:
        return None
    dtype, shape, offset, nbytes = parsed
    kind = getattr(torch, DTYPES[dtype][0])
    if not nbytes:
        return torch.empty(shape, dtype=kind)
    data = (ctypes.c_byte * nbytes).from_address(ptr + offset)
    flat = torch.frombuffer(data, dtype=torch.uint8).view(kind)
    return flat.reshape(shape) if shape else flat


def replica_config_refused(config: Any) -> bool:
    """Mooncake's check of the pub_* calls: preferred segments, when given, one per replica."""
    segments = getattr(config, "preferred_segments", None) or []
    return bool(segments) and len(segments) != getattr(config, "replica_num", 1)


def put_tensors(
    calls: Any, op: int, keys: list[Any], tensors: Sequence[Any], config: Any
) -> list[int]:
    """Store tensors (``op``: PUT or UPSERT); per-key codes (-600 for what is no tensor)."""
    if len(tensors) != len(keys) or not keys:
        return [INVALID_PARAMS] * len(keys)
    encoded = [encode(t) for t in tensors]
    good = [i for i, e in enumerate(encoded) if e is not None]
    out = [INVALID_PARAMS] * len(keys)
    if good:
        parts = []
        for i in good:
            meta, data = encoded[i]  # type: ignore[misc]
            parts.append([meta] if data is None else [meta, data])
        results = calls.put_parts_many(op, [keys[i] for i in good], parts, config)
        for i, r in zip(good, results):
            out[i] = r
    return out


def get_tensors(calls: Any, keys: list[Any]) -> list[Any]:
    """The tensors stored under ``keys``; None where none can be read."""
    _torch()
    return [None if h is None else decode(h) for h in calls.get_handles(keys)]


def get_tensors_into(
    calls: Any, keys: list[Any], ptrs: Sequence[int], sizes: Sequence[int]
) -> list[Any]:
    """Mooncake's batch_get_tensor_into: each value read into its buffer and a tensor over
    that memory (None where none); a list of -600 for buffers that do not pair up."""
    _torch()
    if len(ptrs) != len(keys) or len(sizes) != len(keys) or 0 in ptrs:
        return [INVALID_PARAMS] * len(keys)
    read = calls.addresses(OP_GET, keys, ptrs, sizes, None)
    if len(read) != len(keys):
        return [INVALID_PARAMS] * len(keys)
    return [tensor_at(p, n) if n >= 0 else None for p, n in zip(ptrs, read)]


def put_tensors_from(
    calls: Any, op: int, keys: list[Any], ptrs: Sequence[int], sizes: Sequence[int]
) -> list[int]:
    """Mooncake's batch_put_tensor_from: buffers already holding metadata and data, stored
    as they are once every one of them is checked (any bad one fails the batch)."""
    if not keys:
        return []
    if len(ptrs) != len(keys) or len(sizes) != len(keys):
        return [INVALID_PARAMS] * len(keys)
    for p, n in zip(ptrs, sizes):
        if not p or n < META_BYTES:
            return [INVALID_PARAMS] * len(keys)
        if _parse(memoryview((ctypes.c_byte * n).from_address(p)).cast("B")) is None:
            return [INVALID_PARAMS] * len(keys)
    return calls.addresses(op, keys, ptrs, sizes, None)  # type: ignore[no-any-return]


def put_tensor_from(calls: Any, op: int, key: Any, ptr: int, size: int) -> int:
    """One buffer holding metadata and data, checked, stored as it is."""
    if not ptr or size < META_BYTES:
        return INVALID_PARAMS
    if _parse(memoryview((ctypes.c_byte * size).from_address(ptr)).cast("B")) is None:
        return INVALID_PARAMS
    return calls.put_from(op, key, ptr, size, None)  # type: ignore[no-any-return]
