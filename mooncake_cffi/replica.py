"""Replica options of a write: ``ReplicateConfig``, ``SoftPinAction`` and ``ObjectDataType``.

Pure Python, no native library: they behave as the classes of the same names in Mooncake
0.3.13.post1's ``mooncake.store`` (its pybind11 module) do, so code written against those
keeps working with these: the same attributes with the same defaults, the same conversions
on assignment (``TypeError`` for what pybind11 refuses, e.g. a negative ``replica_num`` or a
float), ``soft_pin_ttl_ms`` of ``None`` for the master's default, lists read back as copies,
and the same ``str()``.  The only addition: ``ReplicateConfig(**fields)`` sets attributes by
keyword (Mooncake's takes no arguments).

Every call that takes a ``replicate_config`` also takes any object with these attributes,
Mooncake's own included (read by attribute; see :func:`_capi.replica_options.replica_options`).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex, cast

__all__ = [
    "MooncakeEnum",
    "ObjectDataType",
    "ReplicateConfig",
    "SoftPinAction",
    "replicate_config_from_fields",
]

_U64_MAX = (1 << 64) - 1


class MooncakeEnum(enum.Enum):
    """The base of this module's enums (:class:`SoftPinAction`, :class:`ObjectDataType`):
    members convert to int, as the values of Mooncake's pybind11 enums do, and compare equal
    only to themselves, as those do."""

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        return int(self.value)

    @classmethod
    def _coerce(cls, value: object) -> Any:
        """A member of this enum for ``value`` (ours, or a same-named one of another module,
        such as Mooncake's own), or None."""
        if isinstance(value, cls):
            return value
        name = getattr(value, "name", None)
        if type(value).__name__ == cls.__name__ and isinstance(name, str):
            return cls.__members__.get(name)
        return None


class SoftPinAction(MooncakeEnum):
    """The soft-pin transition a write asks for (Mooncake's ``SoftPinAction``)."""

    PRESERVE = 0  #: keep the key's soft pin as it is (a new key: none)
    ENABLE = 1  #: soft-pin: evicted only after unpinned keys
    DISABLE = 2  #: remove the soft pin


class ObjectDataType(MooncakeEnum):
    """What kind of data an object holds (Mooncake's ``ObjectDataType``)."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class _Refused(Exception):
    """A value the attribute's conversion does not take."""


def _size(value: object) -> int:
    if isinstance(value, (float, str, bytes, bytearray)) or value is None:
        raise _Refused
    try:
        n = operator.index(cast(SupportsIndex, value))  # int, bool, numpy integers
    except TypeError:
        raise _Refused from None
    if not 0 <= n <= _U64_MAX:
        raise _Refused
    return n


def _optional_size(value: object) -> int | None:
    return None if value is None else _size(value)


def _flag(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if getattr(type(value), "__bool__", None) is None:  # pybind11 takes numbers only
        raise _Refused
    return bool(value)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    raise _Refused


def _texts(value: object) -> list[str]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes, bytearray)):
        raise _Refused
    return [_text(v) for v in value]


def _optional_texts(value: object) -> list[str] | None:
    return None if value is None else _texts(value)


def _member(enum_type: type[MooncakeEnum]) -> Any:
    def convert(value: object) -> Any:
        member = enum_type._coerce(value)
        if member is None:
            raise _Refused
        return member

    return convert


#: attribute -> (default, conversion, the argument type pybind11's error names).
_FIELDS: dict[str, tuple[Any, Any, str]] = {
    "replica_num": (1, _size, "int"),
    "nof_replica_num": (0, _size, "int"),
    "dfs_replica_num": (0, _size, "int"),
    "soft_pin_action": (SoftPinAction.PRESERVE, _member(SoftPinAction), ""),
    "soft_pin_ttl_ms": (None, _optional_size, "Optional[int]"),
    "with_hard_pin": (False, _flag, "bool"),
    "preferred_segments": ([], _texts, "list[str]"),
    "preferred_nof_segments": ([], _texts, "list[str]"),
    "preferred_segment": ("", _text, "str"),
    "prefer_alloc_in_same_node": (False, _flag, "bool"),
    "data_type": (ObjectDataType.UNKNOWN, _member(ObjectDataType), ""),
    "group_ids": (None, _optional_texts, "Optional[list[str]]"),
}
_ENUM_TYPES = {"soft_pin_action": SoftPinAction, "data_type": ObjectDataType}


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _field(name: str) -> property:
    _, convert, arg_type = _FIELDS[name]
    if name in _ENUM_TYPES:
        enum_type = _ENUM_TYPES[name]
        arg_type = f"{enum_type.__module__}.{enum_type.__qualname__}"

    def get(self: ReplicateConfig) -> Any:
        return _copy(self._values[name])  # lists read back as copies, as pybind11's do

    def set_(self: ReplicateConfig, value: Any) -> None:
        try:
            converted = convert(value)
        except (_Refused, UnicodeDecodeError):
            cls = type(self)
            raise TypeError(
                "(): incompatible function arguments. The following argument types are "
                f"supported:\n    1. (self: {cls.__module__}.{cls.__qualname__}, arg0: "
                f"{arg_type}) -> None\n\nInvoked with: {self!r}, {value!r}"
            ) from None
        self._values[name] = converted
        self._packed = None

    return property(get, set_, doc=f"Mooncake's ReplicateConfig.{name}.")


class ReplicateConfig:
    """How a write stores its value: replica counts, pins, placement (Mooncake's
    ``ReplicateConfig``, 0.3.13.post1).

    Attributes: ``replica_num`` (1: memory replicas, each on its own segment),
    ``nof_replica_num`` (0), ``dfs_replica_num`` (0), ``soft_pin_action``
    (:attr:`SoftPinAction.PRESERVE`), ``soft_pin_ttl_ms`` (None: the master's default),
    ``with_hard_pin`` (False: never evicted when True), ``preferred_segments`` ([]: segment
    names, ``host:port``, to place replicas on first), ``preferred_nof_segments`` ([]),
    ``preferred_segment`` ("": deprecated single segment), ``prefer_alloc_in_same_node``
    (False), ``data_type`` (:attr:`ObjectDataType.UNKNOWN`) and ``group_ids`` (None, or one
    routing group per key of a batch, "" for none).  A field the installed Mooncake wheel
    lacks is refused when a write uses it, never dropped.
    """

    __slots__ = ("_values", "_packed")

    def __init__(self, **fields: Any) -> None:
        self._values: dict[str, Any] = {
            name: _copy(default) for name, (default, _, _) in _FIELDS.items()
        }
        self._packed: Any = None  # the C struct _marshal built from these values
        for name, value in fields.items():
            if name not in _FIELDS:
                raise TypeError(f"ReplicateConfig has no attribute {name!r}")
            setattr(self, name, value)

    replica_num = _field("replica_num")
    nof_replica_num = _field("nof_replica_num")
    dfs_replica_num = _field("dfs_replica_num")
    soft_pin_action = _field("soft_pin_action")
    soft_pin_ttl_ms = _field("soft_pin_ttl_ms")
    with_hard_pin = _field("with_hard_pin")
    preferred_segments = _field("preferred_segments")
    preferred_nof_segments = _field("preferred_nof_segments")
    preferred_segment = _field("preferred_segment")
    prefer_alloc_in_same_node = _field("prefer_alloc_in_same_node")
    data_type = _field("data_type")
    group_ids = _field("group_ids")

    def __str__(self) -> str:
        """As Mooncake's ``operator<<`` prints it (bools as 0/1)."""
        v = self._values
        ttl = "default" if v["soft_pin_ttl_ms"] is None else str(v["soft_pin_ttl_ms"])
        out = (
            f"ReplicateConfig: {{ replica_num: {v['replica_num']}, "
            f"nof_replica_num: {v['nof_replica_num']}, "
            f"dfs_replica_num: {v['dfs_replica_num']}, "
            f"soft_pin_action: {v['soft_pin_action'].name}, soft_pin_ttl_ms: {ttl}, "
            f"with_hard_pin: {int(v['with_hard_pin'])}, "
            f"preferred_segments: [{', '.join(v['preferred_segments'])}]"
        )
        if v["preferred_segment"]:
            out += f", preferred_segment (deprecated): {v['preferred_segment']}"
        out += (
            f", preferred_nof_segments: [{', '.join(v['preferred_nof_segments'])}]"
            f", prefer_alloc_in_same_node: {int(v['prefer_alloc_in_same_node'])}"
            f", data_type: {v['data_type'].name}"
        )
        if v["group_ids"] is not None:
            out += f", group_ids: [{', '.join(v['group_ids'])}]"
        return out + " }"


#: The attribute names, in Mooncake's order.
FIELDS: tuple[str, ...] = tuple(_FIELDS)


def replicate_config_from_fields(fields: Mapping[str, Any]) -> ReplicateConfig:
    """A ReplicateConfig with ``fields`` set, as :meth:`StoreConfig.replicate_fields
    <mooncake_cffi.StoreConfig.replicate_fields>` returns them (``soft_pin_action`` by name)."""
    values = dict(fields)
    action = values.get("soft_pin_action")
    if isinstance(action, str):
        values["soft_pin_action"] = SoftPinAction.__members__[action]
    return ReplicateConfig(**values)
