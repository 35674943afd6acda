"""Which LMCache releases the plugins are tested with, and a check of the installed one.

LMCache's plugin interface is young and changes between releases.  The check imports the
pieces our plugins rely on and compares their shape (class names, constructor parameters,
abstract methods) with what the tested release has: a release whose interface differs fails
with a message that says what differs, and an untested release whose interface matches
gets a warning.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "TESTED_LMCACHE_VERSIONS",
    "LMCacheVersionError",
    "UntestedLMCacheWarning",
    "check_lmcache_version",
    "require_lmcache",
]

#: LMCache releases the plugins were tested with (PyPI wheels).
TESTED_LMCACHE_VERSIONS: tuple[str, ...] = ("0.5.6",)

_INSTALL_HINT = (
    f"pip install 'lmcache=={TESTED_LMCACHE_VERSIONS[-1]}' (from a clone of mooncake-cffi: "
    "pip install '.[cpu,lmcache]', or '.[cuda,lmcache]' on a GPU node)"
)

#: The L2 adapter methods LMCache calls (abstract in its L2AdapterInterface).
_INTERFACE_METHODS = frozenset(
    {
        "get_store_event_fd",
        "get_lookup_and_lock_event_fd",
        "get_load_event_fd",
        "submit_store_task",
        "pop_completed_store_tasks",
        "submit_lookup_and_lock_task",
        "query_lookup_and_lock_result",
        "submit_unlock",
        "submit_load_task",
        "query_load_result",
        "close",
    }
)


class LMCacheVersionError(ImportError):
    """The installed LMCache's plugin interface differs from the tested one."""


class UntestedLMCacheWarning(UserWarning):
    """The installed LMCache release was not tested, though its interface matches."""


def require_lmcache(what: str) -> None:
    """Raise ImportError naming ``what`` and the install command if lmcache is missing."""
    try:
        importlib.import_module("lmcache")
    except ImportError as exc:
        raise ImportError(
            f"{what} needs LMCache, which is not installed: {_INSTALL_HINT} "
            f"(tested with lmcache {', '.join(TESTED_LMCACHE_VERSIONS)})"
        ) from exc


def _differences() -> list[str]:
    """How the installed LMCache's plugin interface differs from the tested one."""
    problems: list[str] = []
    base = "lmcache.v1.distributed.l2_adapters"

    def lookup(module: str, name: str) -> Any:
        return getattr(importlib.import_module(module), name)

    try:
        iface = lookup(f"{base}.base", "L2AdapterInterface")
        native = lookup(f"{base}.native_connector_l2_adapter", "NativeConnectorL2Adapter")
        for module, name in (
            (f"{base}.plugin_l2_adapter", "PluginL2AdapterConfig"),
            (f"{base}.native_plugin_l2_adapter", "NativePluginL2AdapterConfig"),
            (base, "create_l2_adapter"),
            ("lmcache.v1.distributed.internal_api", "L1MemoryDesc"),
        ):
            lookup(module, name)
    except (ImportError, AttributeError) as exc:
        return [f"missing {exc}"]
    abstract = set(getattr(iface, "__abstractmethods__", ()))
    if abstract - _INTERFACE_METHODS:
        problems.append(
            "L2AdapterInterface has new abstract methods: "
            + ", ".join(sorted(abstract - _INTERFACE_METHODS))
        )
    if _INTERFACE_METHODS - abstract:
        problems.append(
            "L2AdapterInterface lacks methods: " + ", ".join(sorted(_INTERFACE_METHODS - abstract))
        )
    if getattr(native, "__abstractmethods__", None):
        problems.append("NativeConnectorL2Adapter is abstract")
    if not issubclass(native, iface):
        problems.append("NativeConnectorL2Adapter is not an L2AdapterInterface")
    params = inspect.signature(native.__init__).parameters
    for name in ("native_client", "max_capacity_gb", "type_name", "extra_status"):
        if name not in params:
            problems.append(f"NativeConnectorL2Adapter() takes no {name!r}")
    return problems


@functools.lru_cache(maxsize=1)
def check_lmcache_version() -> str:
    """Check the installed LMCache and return its version.

    Raises:
        ImportError: lmcache is not installed (the message says how to install it).
        LMCacheVersionError: its plugin interface differs from the tested releases'.

    Warns with :class:`UntestedLMCacheWarning` for an untested release whose interface
    matches.
    """
    require_lmcache("mooncake_cffi.lmcache's LMCache plugins")
    try:
        installed = version("lmcache")
    except PackageNotFoundError:
        installed = "unknown"
    problems = _differences()
    tested = ", ".join(TESTED_LMCACHE_VERSIONS)
    if problems:
        raise LMCacheVersionError(
            f"LMCache {installed} has a plugin interface that mooncake_cffi.lmcache does not "
            f"support ({'; '.join(problems)}); it is tested with lmcache {tested}: "
            f"pip install 'lmcache=={TESTED_LMCACHE_VERSIONS[-1]}'"
        )
    if installed not in TESTED_LMCACHE_VERSIONS:
        warnings.warn(
            f"mooncake_cffi.lmcache is tested with lmcache {tested}, not {installed}; its "
            "plugin interface looks the same, so going ahead",
            UntestedLMCacheWarning,
            stacklevel=2,
        )
    return installed
