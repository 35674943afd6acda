"""``adapter_params`` for the LMCache plugins: split into a StoreConfig and Client options.

LMCache hands a plugin the ``adapter_params`` object of its ``--l2-adapter`` JSON.  Ours is
exactly the JSON a user gives LMCache's built-in ``"type": "mooncake_store"`` adapter
(``num_workers``, ``per_op_workers`` and Mooncake's own keys, which
:class:`mooncake_cffi.StoreConfig` passes through untouched), plus a few options of our
:class:`mooncake_cffi.Client` and of the connector itself.  Those extra keys are taken out
here, checked, and never reach Mooncake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import StoreConfig
from ..retry import RetryPolicy

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
        "op_timeout",
    }
)

#: Options of the connector itself: ``key_prefix`` (prepended to every key), ``retry``
#: (a :class:`~mooncake_cffi.RetryPolicy` as a JSON object of its fields, or ``true`` for the
#: default policy: keys of a batch that fail with a retryable error are submitted again)
#: and ``fail_open`` (default true: a store that stops answering fails batches at once,
#: :mod:`mooncake_cffi._core.breaker`).
CONNECTOR_OPTIONS: frozenset[str] = frozenset({"key_prefix", "retry", "fail_open"})

#: A submit must return at once (LMCache calls it under its own lock): by default a
#: full lane fails the batch instead of waiting for room.
DEFAULT_QUEUE_TIMEOUT = 0.0


@dataclass
class AdapterParams:
    """``adapter_params``, parsed: what goes to Mooncake and what configures us."""

    store: StoreConfig
    client_options: dict[str, Any] = field(default_factory=dict)
    key_prefix: str = ""
    retry: RetryPolicy | None = None
    fail_open: bool = True


def _number(name: str, value: Any, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "a number of seconds or null" if allow_none else "a number of seconds"
        raise ValueError(f"adapter_params[{name!r}] must be {kind}, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"adapter_params[{name!r}] must be >= 0 seconds, got {value}")
    return float(value)


def _finite(name: str, value: Any, allow_none: bool, positive: bool = False) -> float | None:
    """A number of seconds (finite; > 0 when ``positive``), or a ValueError naming the key."""
    seconds = _number(name, value, allow_none)
    if seconds is None:
        return None
    if seconds != seconds or seconds == float("inf"):  # NaN, infinity
        raise ValueError(f"adapter_params[{name!r}] must be a finite number, got {value!r}")
    if positive and seconds <= 0:
        raise ValueError(f"adapter_params[{name!r}] must be positive seconds or null, got {value}")
    return seconds


def _retry(value: Any) -> RetryPolicy | None:
    if value is None or value is False:
        return None
    if value is True:
        return RetryPolicy()
    if not isinstance(value, Mapping):
        raise ValueError(
            "adapter_params['retry'] must be true, false, null or an object of RetryPolicy "
            f"fields (attempts, backoff, multiplier, max_backoff, jitter, budget), got {value!r}"
        )
    fields = set(RetryPolicy.__dataclass_fields__)
    unknown = sorted(set(value) - fields)
    if unknown:
        raise ValueError(
            f"adapter_params['retry'] has unknown field {unknown[0]!r}; the fields are "
            f"{', '.join(sorted(fields))}"
        )
    try:
        return RetryPolicy(**value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"adapter_params['retry']: {exc}") from None


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
    for lmcache_key in ("max_capacity_gb", "eviction"):
        if rest.get(lmcache_key) is not None:
            # LMCache reads these at the top level only: inside adapter_params they would
            # be silently ignored (all of a 60-chunk run stayed in Mooncake that way).
            raise ValueError(
                f"{lmcache_key} is LMCache's, not the connector's: LMCache reads it only at "
                "the top level of the --l2-adapter JSON, beside adapter_params, and ignores "
                "it here"
            )
    options: dict[str, Any] = {"queue_timeout": DEFAULT_QUEUE_TIMEOUT}
    for name in sorted(CLIENT_OPTIONS & rest.keys()):
        value = rest.pop(name)
        if name == "queue_timeout":
            options[name] = _finite(name, value, allow_none=True)
        elif name == "connect_timeout":
            options[name] = _finite(name, value, allow_none=False)
        elif name == "op_timeout":
            options[name] = _finite(name, value, allow_none=True, positive=True)
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
    retry = _retry(rest.pop("retry", None))
    fail_open = rest.pop("fail_open", True)
    if not isinstance(fail_open, bool):
        raise ValueError(f"adapter_params['fail_open'] must be true or false, got {fail_open!r}")
    store = StoreConfig.from_dict(rest)
    store.check_connectable()
    return AdapterParams(
        store=store, client_options=options, key_prefix=prefix, retry=retry, fail_open=fail_open
    )
