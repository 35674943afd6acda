"""Replica options across the C ABI: a replica config as ``struct mcs_replica_options``.

Our :class:`~mooncake_cffi.ReplicateConfig`, or any object with its attributes (Mooncake's
own ``mooncake.store.ReplicateConfig`` included, read by name), becomes the plain struct the
shim copies and turns into Mooncake's C++ ``ReplicateConfig`` itself.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ..replica import ReplicateConfig
from ..status import OP_PUT, OP_UPSERT
from .binding import ffi, lib

__all__ = ["attach_replica", "replica_options"]


def _size_attr(obj: Any, name: str, default: int) -> int:
    value = getattr(obj, name, default)
    if isinstance(value, float) or value is None:
        raise TypeError(f"replicate_config.{name} must be an int, not {type(value).__name__}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(
            f"replicate_config.{name} must be an int, not {type(value).__name__}"
        ) from None
    if not 0 <= n < 1 << 64:
        raise TypeError(f"replicate_config.{name} must be 0 .. 2**64-1, not {n}")
    return n


def _enum_attr(obj: Any, name: str, limit: int) -> int:
    value = getattr(obj, name, 0)
    try:
        n = int(value)  # our enums, Mooncake's pybind11 enums
    except (TypeError, ValueError):
        raise TypeError(
            f"replicate_config.{name} must be a member of its enum, not {value!r}"
        ) from None
    if not 0 <= n <= limit:
        raise TypeError(f"replicate_config.{name} {value!r} is out of range")
    return n


def _encode(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    raise TypeError(f"replicate_config.{what} must hold str, not {type(value).__name__}")


def _strings(field: Any, items: Any, what: str, keep: list[Any]) -> None:
    """Point an mcs_strings at ``items`` packed NUL-terminated (nothing for an empty list)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(
            f"replicate_config.{what} must be a list of str, not {type(items).__name__}"
        )
    if not items:
        field.data, field.bytes, field.n = ffi.NULL, 0, 0
        return
    packed = b"".join(_encode(x, what) + b"\0" for x in items)
    data = ffi.new("char[]", packed)
    keep.append(data)
    field.data, field.bytes, field.n = data, len(packed), len(items)


def _build_options(obj: Any) -> tuple[Any, list[Any]]:
    if not hasattr(obj, "replica_num"):
        raise TypeError(
            "replicate_config must be a mooncake_cffi.ReplicateConfig or an object with its "
            f"attributes (such as mooncake.store.ReplicateConfig), not {type(obj).__name__}"
        )
    opts = ffi.new("struct mcs_replica_options *")
    lib.mcs_replica_options_init(opts)
    keep: list[Any] = [opts]
    opts.replica_num = _size_attr(obj, "replica_num", 1)
    opts.nof_replica_num = _size_attr(obj, "nof_replica_num", 0)
    opts.dfs_replica_num = _size_attr(obj, "dfs_replica_num", 0)
    if hasattr(obj, "soft_pin_action"):
        opts.soft_pin_action = _enum_attr(obj, "soft_pin_action", 2)
    elif getattr(obj, "with_soft_pin", False):  # Mooncake's objects before 0.3.13
        opts.soft_pin_action = lib.MCS_SOFT_PIN_ENABLE
    ttl = getattr(obj, "soft_pin_ttl_ms", None)
    if ttl is not None:
        opts.soft_pin_ttl_ms = _size_attr(obj, "soft_pin_ttl_ms", 0)
        opts.has_soft_pin_ttl = 1
    opts.with_hard_pin = 1 if getattr(obj, "with_hard_pin", False) else 0
    opts.prefer_alloc_in_same_node = 1 if getattr(obj, "prefer_alloc_in_same_node", False) else 0
    opts.data_type = _enum_attr(obj, "data_type", 255)
    _strings(
        opts.preferred_segments, getattr(obj, "preferred_segments", []), "preferred_segments", keep
    )
    segment = _encode(getattr(obj, "preferred_segment", ""), "preferred_segment")
    if segment:
        opts.preferred_segment = cseg = ffi.new("char[]", segment)
        keep.append(cseg)
    _strings(
        opts.preferred_nof_segments,
        getattr(obj, "preferred_nof_segments", []),
        "preferred_nof_segments",
        keep,
    )
    groups = getattr(obj, "group_ids", None)
    if groups is not None:
        _strings(opts.group_ids, groups, "group_ids", keep)
        opts.has_group_ids = 1
    return opts, keep


def replica_options(obj: Any) -> tuple[Any, Any]:
    """``struct mcs_replica_options *`` for ``obj`` and what it points into (alive during the
    call that hands it over; the shim copies it).

    ``obj`` is a :class:`mooncake_cffi.ReplicateConfig`, or any object with its attributes,
    read by name: Mooncake's own ``mooncake.store.ReplicateConfig`` of any wheel (an older one's
    ``with_soft_pin`` becomes ``SoftPinAction.ENABLE``), no pybind11 import needed.  Missing
    attributes take Mooncake's defaults; values of the wrong type raise TypeError naming them.
    Ours is converted once and cached until one of its attributes is set.
    """
    if type(obj) is ReplicateConfig:
        packed = obj._packed
        if packed is None:
            packed = obj._packed = _build_options(obj)
        return packed[0], packed
    built = _build_options(obj)
    return built[0], built


def attach_replica(b: Any, op: int, replicate_config: Any, keep: list[Any]) -> None:
    """Point batch ``b`` at the replica options of ``replicate_config`` when ``op`` is a put
    or an upsert (at none otherwise, or without a config); what they point into joins
    ``keep``, the list of what the call borrows."""
    if replicate_config is not None and (op == OP_PUT or op == OP_UPSERT):
        opts, opts_keep = replica_options(replicate_config)
        b.replica = opts
        keep.append(opts_keep)
    else:
        b.replica = ffi.NULL
