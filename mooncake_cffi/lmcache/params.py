"""``adapter_params`` for the LMCache plugins: split into a StoreConfig and Client options.

LMCache hands a plugin the ``adapter_params`` object of its ``--l2-adapter`` JSON.  Ours is
exactly the JSON a user gives LMCache's built-in ``"type": "mooncake_store"`` adapter
(``num_workers``, ``per_op_workers``, ``eviction`` and Mooncake's own keys, which
:class:`mooncake_cffi.StoreConfig` passes through untouched), plus a few options of our
:class:`mooncake_cffi.Client` and of the connector itself.  Those extra keys are taken out
here, checked, and never reach Mooncake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import StoreConfig

__all__ = ["CLIENT_OPTIONS", "CONNECTOR_OPTIONS", "AdapterParams", "parse_adapter_params"]

#: Keyword arguments of :class:`mooncake_cffi.Client` accepted in ``adapter_params``.
CLIENT_OPTIONS: frozenset[str] = frozenset(
    {
        "queue_capacity",
        "queue_timeout",
        "tile_bytes",
        "tile_keys",
        "coalesce_keys",
        "connect_timeout",
        "register_l1",
        "l1_block_size",
    }
)

#: Options of the connector itself.
CONNECTOR_OPTIONS: frozenset[str] = frozenset({"key_prefix"})

#: A submit must return at once (LMCache calls it under its own lock): by default a
#: full lane fails the batch instead of waiting for room.
DEFAULT_QUEUE_TIMEOUT = 0.0


@dataclass
class AdapterParams:
    """``adapter_params``, parsed: what goes to Mooncake and what configures us."""

    store: StoreConfig
    client_options: dict[str, Any] = field(default_factory=dict)
    key_prefix: str = ""


def _number(name: str, value: Any, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "a number of seconds or null" if allow_none else "a number of seconds"
        raise ValueError(f"adapter_params[{name!r}] must be {kind}, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"adapter_params[{name!r}] must be >= 0 seconds, got {value}")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"adapter_params[{name!r}] must be a non-negative integer, got {value!r}")
    return value


def parse_adapter_params(params: Mapping[str, Any]) -> AdapterParams:
    """Split ``params`` into the Mooncake store config and our options.

    Raises ValueError naming the key for a bad value.  Keys Mooncake does not read are
    forwarded with an :class:`mooncake_cffi.UnknownConfigKeyWarning`, as for ``Client``.
    """
    if not isinstance(params, Mapping):
        raise ValueError(f"adapter_params must be a dict, got {type(params).__name__}")
    rest = dict(params)
    if "max_capacity_gb" in rest:
        raise ValueError(
            "max_capacity_gb is LMCache's, not the connector's: for 'native_plugin' put it "
            "at the top level of the --l2-adapter JSON, beside adapter_params"
        )
    options: dict[str, Any] = {"queue_timeout": DEFAULT_QUEUE_TIMEOUT}
    for name in sorted(CLIENT_OPTIONS & rest.keys()):
        value = rest.pop(name)
        if name == "queue_timeout":
            options[name] = _number(name, value, allow_none=True)
        elif name == "connect_timeout":
            options[name] = _number(name, value, allow_none=False)
        elif name == "register_l1":
            if value is not None and not isinstance(value, bool):
                raise ValueError(
                    f"adapter_params['register_l1'] must be true, false or null, got {value!r}"
                )
            options[name] = value
        else:
            options[name] = _count(name, value)
    prefix = rest.pop("key_prefix", "")
    if not isinstance(prefix, str) or "\0" in prefix:
        raise ValueError("adapter_params['key_prefix'] must be a string without NUL characters")
    store = StoreConfig.from_dict(rest)
    store.check_connectable()
    return AdapterParams(store=store, client_options=options, key_prefix=prefix)
