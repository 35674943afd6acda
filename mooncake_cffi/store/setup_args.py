"""``MooncakeDistributedStore.setup`` in both of Mooncake's forms, building the drop-in's Client.

Mooncake 0.3.13.post1's binding has two overloads: the positional one (``local_hostname,
metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices,
master_server_addr``, then optional ``engine, enable_ssd_offload, ssd_offload_path,
tenant_id, enable_client_http_server, client_http_port``) and ``setup(config: dict)``, whose
values become strings (``str(value)``) for Mooncake's own parser (sizes such as
``"32 MB"``).  Arguments of the wrong type raise the TypeError pybind11 raises; a
``local_hostname`` with white space and a bad value of this package's keys raise ValueError
naming the key (Mooncake would take them); everything else comes back as Mooncake's code.
Both forms become one setup dict for the shim.

The dict also takes this package's keys, which Mooncake never sees: ``num_workers`` and
``per_op_workers`` (the lanes), ``op_timeout`` (a deadline for every call), ``connect_timeout``
(the probe of the master and metadata server before setup), ``queue_capacity``,
``queue_timeout``, ``coalesce_keys``, ``tile_bytes``, ``tile_keys``; ``cluster_id`` reaches an
HA master and ``integrity`` (``crc32c``: verified values) the shim, as for
:class:`~mooncake_cffi.Client`.  Keys that only configure a Client's default
replica options (``replica_num``, ``with_soft_pin``...) are ignored, as Mooncake ignores them:
the drop-in's writes take their replica options from each call's ``config``.

Stacks that call the positional form can give this package's keys without changing that
call: ``MOONCAKE_CFFI_STORE_OPTIONS`` holds a JSON object of them (``{"op_timeout": 5}``),
read by every setup of either form; keys in a setup dict win over it.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

from ..config import (
    CLIENT_KEYS,
    MOONCAKE_KEYS,
    StoreConfig,
    UnknownConfigKeyWarning,
    unknown_key_message,
)

__all__ = [
    "CLIENT_OPTIONS",
    "SETUP_DOC",
    "SETUP_SIGNATURE",
    "STORE_OPTIONS",
    "OPTIONS_ENV",
    "SetupConfig",
    "build",
    "env_options",
    "fail_open_option",
    "from_arguments",
    "precheck",
    "setup_failure",
]

#: Keys of the setup dict that configure the drop-in's Client (never sent to Mooncake).
CLIENT_OPTIONS = frozenset(
    {
        "connect_timeout",
        "op_timeout",
        "queue_capacity",
        "queue_timeout",
        "coalesce_keys",
        "tile_bytes",
        "tile_keys",
    }
)
_LANE_KEYS = frozenset({"num_workers", "per_op_workers"})
#: Keys of the setup dict for the drop-in itself: ``admin_url``, the master's admin API
#: (replica descriptors on a wheel that cannot ask the master for them itself; default
#: ``http://<master host>:9003``); ``fail_open`` (default
#: true: a store that stops answering is answered around at once, :mod:`.fail_open`).
STORE_OPTIONS = frozenset({"admin_url", "fail_open"})
#: Keys read by the shim, not Mooncake: the HA cluster id, value verification (``crc32c``).
_SHIM_KEYS = frozenset({"cluster_id", "integrity"})
#: Client keys that would set a default ReplicateConfig, which Mooncake's setup ignores.
_IGNORED = CLIENT_KEYS - _SHIM_KEYS

_POSITIONAL = (
    "local_hostname",
    "metadata_server",
    "global_segment_size",
    "local_buffer_size",
    "protocol",
    "rdma_devices",
    "master_server_addr",
)
_OPTIONAL: tuple[tuple[str, Any], ...] = (
    ("engine", None),
    ("enable_ssd_offload", False),
    ("ssd_offload_path", ""),
    ("tenant_id", "default"),
    ("enable_client_http_server", False),
    ("client_http_port", 9300),
)
_SIGNATURES = (
    "    1. (self: mooncake_cffi.store.MooncakeDistributedStore, local_hostname: str, "
    "metadata_server: str, global_segment_size: int, local_buffer_size: int, protocol: str, "
    "rdma_devices: str, master_server_addr: str, engine: object = None, enable_ssd_offload: "
    "bool = False, ssd_offload_path: str = '', tenant_id: str = 'default', "
    "enable_client_http_server: bool = False, client_http_port: int = 9300) -> int\n"
    "    2. (self: mooncake_cffi.store.MooncakeDistributedStore, config: dict) -> int\n"
)


#: ``inspect.signature(MooncakeDistributedStore.setup)``: Mooncake's positional form, with its
#: names and defaults (stacks probe it: vLLM-Ascend looks for ``enable_ssd_offload``).
SETUP_SIGNATURE = inspect.Signature(
    [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)
        for name, kind in zip(_POSITIONAL, (str, str, int, int, str, str, str))
    ]
    + [
        inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind
        )
        for (name, default), kind in zip(_OPTIONAL, (object, bool, str, str, bool, int))
    ],
    return_annotation=int,
)

#: ``MooncakeDistributedStore.setup.__doc__``: both forms, as pybind11's overload doc lists
#: them, then what the drop-in adds.
SETUP_DOC = (
    "setup(*args, **kwargs)\nOverloaded function.\n\n1. setup"
    + _SIGNATURES.split("\n")[0].split("1. ", 1)[1]
    + "\n\n2. setup"
    + _SIGNATURES.split("\n")[1].split("2. ", 1)[1]
    + "\n\nSetup the store: 0, or Mooncake's code.  The dict takes Mooncake's keys (values as "
    "str(value), sizes such as '32 MB'): local_hostname (required), metadata_server (required), "
    "global_segment_size, local_buffer_size, protocol, rdma_devices, master_server_addr, "
    "ipc_socket_path, enable_ssd_offload, ssd_offload_path, tenant_id, "
    "enable_client_http_server, client_http_port; and this package's (num_workers, "
    "per_op_workers, op_timeout, connect_timeout, ..., admin_url: see "
    "mooncake_cffi.store.setup_args), which $MOONCAKE_CFFI_STORE_OPTIONS (a JSON object) also "
    "gives.  A second setup replaces the first client, as Mooncake's does.  engine (a shared "
    "TransferEngine) is not supported (NotImplementedError).\n"
)


class SetupConfig(StoreConfig):
    """The drop-in's StoreConfig: setup refuses in Python only a ``local_hostname`` with white
    space (ValueError, as :class:`~mooncake_cffi.Client` does; Mooncake's own setup takes it
    and registers a name no peer can reach); a ``host:port`` there is taken, as Mooncake
    takes it.  Mooncake and the shim judge the other keys, and the drop-in returns their
    codes."""

    def check_connectable(self) -> None:
        host = str(self.setup_config.get("local_hostname", ""))
        if any(ch.isspace() or ord(ch) < 0x20 for ch in host):
            raise ValueError(f"local_hostname {host!r} is empty or contains white space")


def _refuse(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> TypeError:
    shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return TypeError(
        "setup(): incompatible function arguments. The following argument types are "
        f"supported:\n{_SIGNATURES}\nInvoked with: {shown}"
    )


def _is_text(v: Any) -> bool:
    return isinstance(v, (str, bytes))


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _flag(v: Any) -> str:
    return "true" if v else "false"


def from_arguments(
    args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[str, dict[str, Any], Any]:
    """``(form, setup dict, engine)`` of a call of setup: ``"dict"`` with the caller's dict
    (values as given), or ``"positional"`` with the dict the arguments stand for; a
    TypeError as pybind11's for arguments that fit neither overload."""
    if len(args) + len(kwargs) == 1:
        config = args[0] if args else kwargs.get("config")
        if isinstance(config, dict):
            return "dict", dict(config), None
    names = _POSITIONAL + tuple(name for name, _ in _OPTIONAL)
    if len(args) > len(names) or any(k not in names for k in kwargs):
        raise _refuse(args, kwargs)
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            raise _refuse(args, kwargs)
        bound[k] = v
    if any(name not in bound for name in _POSITIONAL):
        raise _refuse(args, kwargs)
    for option, value in _OPTIONAL:
        bound.setdefault(option, value)
    texts = ("local_hostname", "metadata_server", "protocol", "rdma_devices")
    if not all(_is_text(bound[k]) for k in (*texts, "master_server_addr", "ssd_offload_path")):
        raise _refuse(args, kwargs)
    if not _is_text(bound["tenant_id"]) or not _is_size(bound["global_segment_size"]):
        raise _refuse(args, kwargs)
    if not _is_size(bound["local_buffer_size"]) or not isinstance(bound["client_http_port"], int):
        raise _refuse(args, kwargs)
    setup = {k: _text(bound[k]) for k in (*texts, "master_server_addr")}
    setup["global_segment_size"] = str(bound["global_segment_size"])
    setup["local_buffer_size"] = str(bound["local_buffer_size"])
    for name, default in _OPTIONAL[1:]:
        value = bound[name]
        if value != default:
            setup[name] = _flag(value) if isinstance(default, bool) else _text(value)
    return "positional", setup, bound["engine"]


#: The environment variable of this package's setup keys (a JSON object).
OPTIONS_ENV = "MOONCAKE_CFFI_STORE_OPTIONS"


def env_options() -> dict[str, Any]:
    """This package's setup keys from :data:`OPTIONS_ENV` ({} when unset); a ValueError
    naming the variable for text that is not a JSON object of them."""
    text = os.environ.get(OPTIONS_ENV, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{OPTIONS_ENV} is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object, not {text!r}")
    unknown = sorted(set(options) - CLIENT_OPTIONS - _LANE_KEYS - _SHIM_KEYS - STORE_OPTIONS)
    if unknown:
        known = ", ".join(sorted(CLIENT_OPTIONS | _LANE_KEYS | _SHIM_KEYS | STORE_OPTIONS))
        raise ValueError(f"{OPTIONS_ENV}: {unknown} are not this package's keys ({known})")
    return options


def build(setup: dict[str, Any]) -> tuple[SetupConfig, dict[str, Any]]:
    """The StoreConfig and the Client keywords of a setup dict: Mooncake's keys as strings,
    this package's options taken out (ValueError for a bad one, naming it)."""
    options = {k: setup.pop(k) for k in list(setup) if k in CLIENT_OPTIONS}
    lanes = {k: setup.pop(k) for k in list(setup) if k in _LANE_KEYS}
    keys: dict[str, str] = {}
    for key, value in setup.items():
        key = str(key)
        if key in _IGNORED:
            warnings.warn(
                f"setup key {key!r} is ignored, as Mooncake's own setup ignores it: give the "
                "replica options of a write as its config (a ReplicateConfig)",
                UnknownConfigKeyWarning,
                stacklevel=4,
            )
            continue
        if key not in MOONCAKE_KEYS and key not in _SHIM_KEYS:
            warnings.warn(unknown_key_message(key), UnknownConfigKeyWarning, stacklevel=4)
        keys[key] = value if isinstance(value, str) else str(value)
    config = SetupConfig(
        num_workers=lanes.get("num_workers", 4),
        per_op_workers=lanes.get("per_op_workers"),
        setup_config=keys,
    )
    return config, options


def precheck(form: str, setup: Mapping[str, Any]) -> int:
    """Mooncake's code for a setup it refuses before connecting (0: none): the dict form
    needs ``local_hostname`` and ``metadata_server`` (-600); the positional form refuses an
    empty ``local_hostname`` (-600) and, after trying, an empty ``metadata_server`` (-1)."""
    host, meta = str(setup.get("local_hostname", "")), str(setup.get("metadata_server", ""))
    if not host:
        return -600
    if not meta:
        return -600 if form == "dict" else -1
    return 0


def fail_open_option(value: Any) -> bool:
    """The ``fail_open`` key: true or false (JSON's or their strings); a ValueError naming it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"fail_open must be true or false, not {value!r}")


def setup_failure(code: int) -> int:
    """Mooncake's code for a failed setup, from the status the shim or Mooncake gave: its
    own codes pass through; a refusal before setup (a master address or protocol Mooncake
    cannot use, an unreachable master or metadata server) is what Mooncake's setup comes
    to there, INTERNAL_ERROR (-1)."""
    return code if code > -10000 else -1
