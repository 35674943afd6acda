"""``lmcache.lmcache_mooncake`` for LMCache installs that lack it: LMCache's own
``"type": "mooncake_store"`` adapter over this package.

LMCache's built-in Mooncake adapter imports two names from its C++ extension
``lmcache.lmcache_mooncake``, which PyPI's lmcache wheel does not ship:
``LMCacheMooncakeClient`` (a native client that LMCache wraps in its
``NativeConnectorL2Adapter``) and ``L1RegistrationConfig`` (the L1 region to register).
This module defines both over :class:`~mooncake_cffi.lmcache.MooncakeConnector`, and
the startup hook of this package (``_mooncake_cffi_startup``, run from a ``.pth`` file)
serves it under that name whenever the installed LMCache has no extension of its own. So
LMCache's documented JSON works verbatim::

    lmcache server --l1-size-gb 1 --eviction-policy LRU --l2-adapter '{"type":
      "mooncake_store", "num_workers": 4, "per_op_workers": {"lookup": 1, "retrieve": 1,
      "store": 2}, "preregister_l1_memory": true, "local_hostname": "10.0.0.5",
      "metadata_server": "http://10.0.0.1:8080/metadata", "master_server_addr":
      "10.0.0.1:50051", "protocol": "tcp", "global_segment_size": "0"}'

A real build of LMCache with its extension is found first and always wins; nothing of
LMCache's is changed on disk.

LMCache hands the client its JSON as strings (``str(value)`` of every key but its own), so
this module takes them as strings: Mooncake's keys reach Mooncake as they are, LMCache's
``preregister_l1_memory`` is consumed (the L1 region comes through ``l1_registration`` or
``preregister_l1_base`` / ``_size``), and the options of :class:`MooncakeConnector`
(``op_timeout``, ``queue_timeout``, ``key_prefix``, ...) are parsed from their strings.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..replica import ReplicateConfig
from .compat import check_native_client
from .completions import DrainedCompletion
from .connector import MooncakeConnector
from .params import CLIENT_OPTIONS, CONNECTOR_OPTIONS

__all__ = ["L1RegistrationConfig", "LMCacheMooncakeClient"]

#: Keys of LMCache's own that may reach the client's config and are not Mooncake's.
_LMCACHE_KEYS = frozenset({"preregister_l1_memory"})

#: Options given in seconds, and those that are counts, among the connector's.
_SECONDS = frozenset({"op_timeout", "queue_timeout", "connect_timeout"})
_COUNTS = frozenset({"queue_capacity", "tile_bytes", "tile_keys", "coalesce_keys", "l1_block_size"})


class L1RegistrationConfig:
    """LMCache's description of its L1 region: register ``size`` bytes at address ``base``
    with Mooncake when ``enabled`` (LMCache sets it for ``protocol: rdma``)."""

    def __init__(self, enabled: bool = False, base: int = 0, size: int = 0) -> None:
        self.enabled = enabled
        self.base = base
        self.size = size

    def __repr__(self) -> str:
        return (
            f"L1RegistrationConfig(enabled={self.enabled}, base={self.base:#x}, size={self.size})"
        )


def _flag(name: str, text: str) -> bool | None:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    if lowered in ("none", "null", ""):
        return None
    raise ValueError(f"{name} must be true or false, got {text!r}")


def _option(name: str, value: Any) -> Any:
    """An option of the connector from the string LMCache made of it (values that are not
    strings, from a caller in Python, are taken as they are)."""
    if not isinstance(value, str):
        return value
    if name in _SECONDS:
        if value.strip().lower() in ("none", "null"):
            return None
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if name in _COUNTS:
        text = value.strip()
        if not text.isdigit():
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        return int(text)
    if name in ("register_l1", "retry", "fail_open"):
        return _flag(name, value)
    return value  # key_prefix


def _l1_region(base: int, size: int) -> Any:
    if not isinstance(base, int) or not isinstance(size, int) or base <= 0 or size <= 0:
        raise ValueError(
            f"the L1 region to register is invalid (base={base!r}, size={size!r}): it needs a "
            "non-zero address and a positive size"
        )
    return (ctypes.c_ubyte * size).from_address(base)


class LMCacheMooncakeClient:
    """LMCache's native Mooncake client, over :class:`MooncakeConnector`.

    Built by LMCache's ``mooncake_store`` adapter factory, in every form LMCache uses:
    ``LMCacheMooncakeClient(config=..., num_workers=..., l1_registration=...,
    per_op_workers=...)`` (lmcache 0.5.4 to 0.5.7) and ``LMCacheMooncakeClient(config,
    num_workers, preregister_l1_base, preregister_l1_size)`` (LMCache's newer native
    binding); a ``replicate_config`` (a ReplicateConfig, or a dict of its fields, the form
    LMCache's proposed replica fix passes) sets the replication of every write, as the
    config's own ``replica_num`` / ``soft_pin_ttl_ms`` / ... keys do.

    Args:
        config: Mooncake's setup keys and this package's connector options, as strings.
        num_workers: the shared worker pool (lanes not in ``per_op_workers`` use it).
        preregister_l1_base, preregister_l1_size: an L1 region to register with Mooncake
            (0, 0: none).
        l1_registration: the same as an :class:`L1RegistrationConfig`, taken when enabled.
        per_op_workers: dedicated workers per lane (``lookup``, ``retrieve``, ``store``,
            ``delete``).
        replicate_config: the replica options of every write (None: from ``config``).

    Raises:
        ValueError: a bad key or value, named; ``protocol: rdma`` without an L1 region.
        LMCacheVersionError: the LMCache that builds it calls a client method this class
            lacks (named, with the release).
        MooncakeError: Mooncake's setup failed; the message names the address and reason.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        num_workers: int = 4,
        preregister_l1_base: int = 0,
        preregister_l1_size: int = 0,
        *,
        l1_registration: L1RegistrationConfig | None = None,
        per_op_workers: Mapping[str, int] | None = None,
        replicate_config: ReplicateConfig | Mapping[str, Any] | None = None,
    ) -> None:
        if "lmcache" in sys.modules:  # built by LMCache: check that it calls only what we have
            check_native_client(type(self))
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        if isinstance(replicate_config, Mapping):
            try:
                replicate_config = ReplicateConfig(**replicate_config)
            except (TypeError, AttributeError) as exc:
                raise ValueError(f"replicate_config: {exc}") from None
        params: dict[str, Any] = {"num_workers": num_workers}
        if per_op_workers:
            params["per_op_workers"] = dict(per_op_workers)
        for key, value in config.items():
            if key in _LMCACHE_KEYS:
                continue
            if key in CLIENT_OPTIONS or key in CONNECTOR_OPTIONS:
                params[key] = _option(key, value)
            else:
                params[key] = value
        base, size = preregister_l1_base, preregister_l1_size
        if l1_registration is not None and l1_registration.enabled:
            base, size = l1_registration.base, l1_registration.size
        l1 = _l1_region(base, size) if (base or size) else None
        rdma = str(params.get("protocol", "tcp")).lower() == "rdma"
        if l1 is not None and not rdma and params.get("register_l1") is not True:
            l1 = None  # tcp moves bytes from any memory: registered only when asked
        self.connector = MooncakeConnector(l1=l1, replicate_config=replicate_config, **params)

    def event_fd(self) -> int:
        """The descriptor LMCache polls: readable exactly while completions wait."""
        return self.connector.event_fd()

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        """Store each buffer under its key (first writer wins); returns the batch id."""
        return self.connector.submit_batch_set(keys, memoryviews)

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        """Read each key into its buffer (a hit only when the sizes match); the batch id."""
        return self.connector.submit_batch_get(keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        """Look keys up; returns the batch id."""
        return self.connector.submit_batch_exists(keys)

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        """Remove keys (past read leases; a missing key counts as deleted); the batch id."""
        return self.connector.submit_batch_delete(keys)

    def drain_completions(self) -> list[DrainedCompletion]:
        """Finished batches as ``(id, ok, error, per_key_bools or None)``; never blocks."""
        return self.connector.drain_completions()

    def close(self) -> None:
        """Let accepted batches finish and tear the client down.  Idempotent."""
        self.connector.close()

    def __repr__(self) -> str:
        return (
            f"<lmcache.lmcache_mooncake.LMCacheMooncakeClient (mooncake_cffi) {self.connector!r}>"
        )
