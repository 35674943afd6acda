"""Store configuration: LMCache's ``mooncake_store`` adapter JSON, parsed and checked.

A config is a flat JSON object.  Four keys belong to the adapter itself and are consumed here:
``type`` (must be ``"mooncake_store"`` when present), ``num_workers`` (size of the shared worker
pool, default 4), ``per_op_workers`` (optional dedicated threads per operation lane) and
``eviction`` (accepted and ignored).  Every other key is Mooncake's: it is forwarded untouched
to Mooncake's setup as ``str(value)`` (``True`` becomes ``"True"``); a ``None`` value drops the
key.  No key is translated or defaulted, because Mooncake owns its keys.

Mooncake silently ignores keys it does not read, so a misspelled key (``master_server_address``
for ``master_server_addr``) quietly falls back to a default.  Such keys are still forwarded, but
an :class:`UnknownConfigKeyWarning` is issued, with a suggestion when a known key is close.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .addresses import (
    HA_BACKENDS,
    PROTOCOLS,
    check_local_hostname,
    check_master_addr,
    check_metadata_server,
    check_protocol,
    strip_port,
)
from .integrity import check_integrity
from .replica import ReplicateConfig, replicate_config_from_fields
from .sizes import check_setup_size

__all__ = [
    "ADAPTER_TYPE",
    "CLIENT_KEYS",
    "KEY_ALIASES",
    "HA_BACKENDS",
    "LANES",
    "LMCACHE_ONLY_KEYS",
    "MOONCAKE_KEYS",
    "PROTOCOLS",
    "StoreConfig",
    "UnknownConfigKeyWarning",
    "parse_adapter_specs",
]

#: The only adapter type this package implements.
ADAPTER_TYPE = "mooncake_store"

#: Keys consumed by the adapter, never forwarded to Mooncake.
LMCACHE_ONLY_KEYS: frozenset[str] = frozenset({"type", "num_workers", "eviction", "per_op_workers"})

#: Operation lanes that may get dedicated workers, in their documented order.
LANES: tuple[str, ...] = ("lookup", "retrieve", "store", "delete")

#: Keys that Mooncake's ``setup_internal`` reads (wheel 0.3.13.post1).
MOONCAKE_KEYS: frozenset[str] = frozenset(
    {
        "local_hostname",
        "metadata_server",
        "master_server_addr",
        "protocol",
        "rdma_devices",
        "global_segment_size",
        "local_buffer_size",
        "ipc_socket_path",
        "tenant_id",
        "enable_client_http_server",
        "client_http_port",
        "enable_ssd_offload",
        "ssd_offload_path",
    }
)

#: Keys this package reads itself (they are forwarded too): ``cluster_id`` becomes
#: ``MC_STORE_CLUSTER_ID`` for an HA master, ``integrity`` (``crc32c`` / ``none``) turns value
#: verification on in the shim (:mod:`.integrity`), the others the default ReplicateConfig
#: of writes (:meth:`StoreConfig.replicate_fields`).
CLIENT_KEYS: frozenset[str] = frozenset(
    {
        "cluster_id",
        "integrity",
        "replica_num",
        "with_soft_pin",
        "soft_pin_action",
        "soft_pin_ttl_ms",
        "with_hard_pin",
        "preferred_segment",
    }
)

#: Spellings used elsewhere in Mooncake (its JSON loader, its CLI flags) that setup ignores.
KEY_ALIASES: dict[str, str] = {
    "master_server_address": "master_server_addr",
    "device_name": "rdma_devices",
}

_DEFAULT_NUM_WORKERS = 4


class UnknownConfigKeyWarning(UserWarning):
    """A config key is forwarded to Mooncake, but Mooncake does not read it."""


def _type_name(value: object) -> str:
    return type(value).__name__


#: The most worker threads of the shared pool, or of one lane, that the shim starts.
MAX_WORKERS = 1024


def _check_num_workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("num_workers must be a positive integer")
    if value > MAX_WORKERS:
        raise ValueError(f"num_workers must be at most {MAX_WORKERS}, got {value}")
    return value


def _check_per_op_workers(value: object) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError("per_op_workers must be a dict")
    lanes: dict[str, int] = {}
    for lane, count in value.items():
        if lane not in LANES:
            raise ValueError(
                f"unknown per_op_workers lane {lane!r}; valid lanes are {', '.join(LANES)}"
            )
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(
                f"per_op_workers[{lane!r}] must be an integer, got {_type_name(count)}"
            )
        if count <= 0:
            raise ValueError(f"per_op_workers[{lane!r}] must be a positive integer, got {count}")
        if count > MAX_WORKERS:
            raise ValueError(f"per_op_workers[{lane!r}] must be at most {MAX_WORKERS}, got {count}")
        lanes[lane] = count
    return lanes


def _check_adapter_type(value: object) -> None:
    if value != ADAPTER_TYPE:
        raise ValueError(f"unknown adapter type {value!r}")


def suggest_key(key: str) -> str | None:
    """Return the known key that ``key`` was probably meant to be, or None."""
    if key in KEY_ALIASES:
        return KEY_ALIASES[key]
    candidates = sorted(MOONCAKE_KEYS | LMCACHE_ONLY_KEYS | CLIENT_KEYS)
    lowered = key.lower()
    if lowered in candidates:
        return lowered
    matches = difflib.get_close_matches(lowered, candidates, n=1, cutoff=0.75)
    return matches[0] if matches else None


def unknown_key_message(key: str) -> str:
    """The warning text for a key that Mooncake does not read."""
    message = f"config key {key!r} is not read by Mooncake and will be ignored by it"
    suggestion = suggest_key(key)
    if suggestion is not None:
        message += f"; did you mean {suggestion!r}?"
    return message


def _parse_json_object(text: str | bytes | bytearray) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except TypeError as exc:
        raise ValueError(f"config must be a JSON string, got {_type_name(text)}") from exc


@dataclass
class StoreConfig:
    """A parsed adapter config.

    ``setup_config`` holds exactly the strings handed to Mooncake's setup.  ``per_op_workers``
    maps lane names (``lookup``, ``retrieve``, ``store``, ``delete``) to dedicated thread
    counts; lanes left out share the ``num_workers`` pool.
    """

    num_workers: int = _DEFAULT_NUM_WORKERS
    per_op_workers: dict[str, int] | None = None
    setup_config: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.num_workers = _check_num_workers(self.num_workers)
        self.per_op_workers = _check_per_op_workers(self.per_op_workers)
        if not isinstance(self.setup_config, Mapping):
            raise ValueError(
                f"setup_config must be a dict of strings, got {_type_name(self.setup_config)}"
            )
        for key, value in self.setup_config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(
                    f"setup_config must map strings to strings, got {key!r}: {value!r}"
                )
        self.setup_config = dict(self.setup_config)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def coerce(cls, config: StoreConfig | Mapping[str, Any] | str) -> StoreConfig:
        """``config`` as a StoreConfig: one as it is, a dict (:meth:`from_dict`) or its JSON
        text (:meth:`from_json`); a TypeError for anything else."""
        if isinstance(config, StoreConfig):
            return config
        if isinstance(config, str):
            return cls._build(_parse_json_object(config), stacklevel=4)
        if isinstance(config, Mapping):
            return cls._build(dict(config), stacklevel=4)
        raise TypeError(
            f"config must be a StoreConfig, a dict or JSON text, not {type(config).__name__}"
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StoreConfig:
        """Build a config from a decoded adapter JSON object.

        Raises ValueError for anything LMCache would reject; warns with
        :class:`UnknownConfigKeyWarning` for each forwarded key that Mooncake does not read.
        """
        return cls._build(d, stacklevel=3)

    @classmethod
    def from_json(cls, text: str) -> StoreConfig:
        """Build a config from the text of one JSON object (ValueError if it is not one)."""
        return cls._build(_parse_json_object(text), stacklevel=3)

    @classmethod
    def _build(cls, d: object, stacklevel: int) -> StoreConfig:
        # ``stacklevel`` counts from this function: 2 is our direct caller.
        if not isinstance(d, Mapping):
            raise ValueError(f"config must be a JSON object (a dict), got {_type_name(d)}")
        for key in d:
            if not isinstance(key, str):
                raise ValueError(f"config keys must be strings, got {key!r}")
        if "type" in d:
            _check_adapter_type(d["type"])
        num_workers = _check_num_workers(d.get("num_workers", _DEFAULT_NUM_WORKERS))
        per_op_workers = _check_per_op_workers(d.get("per_op_workers"))

        setup: dict[str, str] = {}
        for key, value in d.items():
            if key in LMCACHE_ONLY_KEYS or value is None:
                continue
            setup[key] = str(value)
            if key not in MOONCAKE_KEYS and key not in CLIENT_KEYS:
                warnings.warn(
                    unknown_key_message(key), UnknownConfigKeyWarning, stacklevel=stacklevel
                )
        return cls(num_workers=num_workers, per_op_workers=per_op_workers, setup_config=setup)

    # -- views ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The adapter JSON object for this config (``from_dict(to_dict())`` round-trips)."""
        out: dict[str, Any] = {"type": ADAPTER_TYPE, "num_workers": self.num_workers}
        if self.per_op_workers is not None:
            out["per_op_workers"] = dict(self.per_op_workers)
        out.update(self.setup_config)
        return out

    @property
    def integrity(self) -> str:
        """The value-verification mode: ``crc32c``, or ``none`` (the default)."""
        return self.setup_config.get("integrity", "") or "none"

    @property
    def protocol(self) -> str:
        """The transfer protocol Mooncake will use (``tcp`` unless configured)."""
        return self.setup_config.get("protocol", "tcp").lower()

    def check_connectable(self) -> None:
        """Raise ValueError if Mooncake's setup is bound to fail or misbehave with this config.

        Mooncake needs ``local_hostname`` and ``metadata_server``.  A ``host:port`` in
        ``local_hostname`` pins the client's port and leads to duplicate registration.
        ``master_server_addr`` must be ``host:port`` or an HA entry (``etcd://`` ...):
        Mooncake's setup crashes on an empty one and spends ~90 s on one without a port.
        ``protocol`` must be a transport Mooncake knows (:data:`PROTOCOLS`), in lower case.
        Each ValueError names the key and the value.
        """
        missing = [
            key for key in ("local_hostname", "metadata_server") if not self.setup_config.get(key)
        ]
        if missing:
            raise ValueError(
                f"config is missing {' and '.join(repr(k) for k in missing)}: "
                "Mooncake needs both 'local_hostname' and 'metadata_server'"
            )
        check_metadata_server(self.setup_config["metadata_server"])
        if "master_server_addr" in self.setup_config:
            check_master_addr(self.setup_config["master_server_addr"])
        if "protocol" in self.setup_config:
            check_protocol(self.setup_config["protocol"])
        check_local_hostname(self.setup_config["local_hostname"])
        for key in ("global_segment_size", "local_buffer_size"):
            if key in self.setup_config:
                check_setup_size(key, self.setup_config[key])
        if "integrity" in self.setup_config:
            check_integrity(self.setup_config["integrity"])

    def replicate_fields(self) -> dict[str, Any]:
        """The ``ReplicateConfig`` fields this config sets, checked, ready for ``setattr``.

        Keys read from the JSON (all optional; values may be JSON numbers/booleans or their
        strings): ``replica_num`` (a positive integer: how many copies each write makes, on
        distinct storage nodes), ``with_soft_pin`` (boolean: keep the object in memory
        preferentially; becomes ``soft_pin_action`` ``"ENABLE"``/``"DISABLE"``) or
        ``soft_pin_action`` itself (``PRESERVE``/``ENABLE``/``DISABLE``), ``soft_pin_ttl_ms``
        (a positive integer), ``with_hard_pin`` (boolean) and ``preferred_segment`` (the
        segment name, ``host:port``, to place the first replica on).  ``soft_pin_action`` is
        returned by name (a :class:`~mooncake_cffi.SoftPinAction` member name);
        :meth:`replicate_config` builds the object.  An empty dict means Mooncake's
        defaults.  Raises ValueError naming the key for a bad value.
        """
        cfg = self.setup_config
        out: dict[str, Any] = {}

        def positive_int(key: str) -> int:
            text = cfg[key].strip()
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{key} must be a positive integer, got {cfg[key]!r}")
            return int(text)

        def boolean(key: str) -> bool:
            text = cfg[key].strip().lower()
            if text in ("true", "1", "yes"):
                return True
            if text in ("false", "0", "no"):
                return False
            raise ValueError(f"{key} must be true or false, got {cfg[key]!r}")

        if "replica_num" in cfg:
            out["replica_num"] = positive_int("replica_num")
        if "with_soft_pin" in cfg and "soft_pin_action" in cfg:
            raise ValueError("give with_soft_pin or soft_pin_action, not both")
        if "with_soft_pin" in cfg:
            out["soft_pin_action"] = "ENABLE" if boolean("with_soft_pin") else "DISABLE"
        if "soft_pin_action" in cfg:
            action = cfg["soft_pin_action"].strip().upper()
            if action not in ("PRESERVE", "ENABLE", "DISABLE"):
                raise ValueError(
                    "soft_pin_action must be PRESERVE, ENABLE or DISABLE, "
                    f"got {cfg['soft_pin_action']!r}"
                )
            out["soft_pin_action"] = action
        if "soft_pin_ttl_ms" in cfg:
            out["soft_pin_ttl_ms"] = positive_int("soft_pin_ttl_ms")
        if "with_hard_pin" in cfg:
            out["with_hard_pin"] = boolean("with_hard_pin")
        if "preferred_segment" in cfg:
            segment = cfg["preferred_segment"].strip()
            if not segment or strip_port(segment) is None:
                raise ValueError(
                    "preferred_segment must name a segment as host:port (see `mcl2 cluster "
                    f"status` or /get_all_segments), got {cfg['preferred_segment']!r}"
                )
            out["preferred_segment"] = segment
        return out

    def replicate_config(self) -> ReplicateConfig:
        """The default :class:`~mooncake_cffi.ReplicateConfig` of a client's writes:
        Mooncake's defaults with :meth:`replicate_fields` set."""
        return replicate_config_from_fields(self.replicate_fields())


def parse_adapter_specs(specs: list[str]) -> list[StoreConfig]:
    """Parse the JSON strings given to repeated ``--l2-adapter`` options, numbered from 1."""
    if isinstance(specs, (str, bytes)):
        raise TypeError("specs must be a list of JSON strings, not a single string")
    configs: list[StoreConfig] = []
    for number, spec in enumerate(specs, start=1):
        where = f"--l2-adapter #{number}"
        try:
            data = json.loads(spec)
        except (json.JSONDecodeError, TypeError) as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ValueError(f"Invalid JSON for {where}: {detail}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{where}: must be a JSON object, got {_type_name(data)}")
        if "type" not in data:
            raise ValueError(f"{where}: missing 'type' field")
        try:
            configs.append(StoreConfig._build(data, stacklevel=3))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
    return configs
