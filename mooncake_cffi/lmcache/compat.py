"""Which LMCache releases the plugins are tested with, and what they need of the installed one.

LMCache's plugin interface is young and changes between releases, so the plugins follow it
by its shape, not by its version number.  :func:`check_lmcache_version` imports the pieces
our plugins rely on and names what the installed release lacks: a class that moved, an
abstract method of ``L2AdapterInterface`` that ``NativeConnectorL2Adapter`` (which our
``"plugin"`` adapter extends) does not implement, a constructor argument it requires and we
cannot give.  A release that has all of it works, whatever its number (an untested one gets
an :class:`UntestedLMCacheWarning`); one that lacks something fails, at adapter creation,
with an :class:`LMCacheVersionError` naming what is missing and the release.

What changed between the releases CI runs, and how the plugins meet it:

- Every release: ``NativeConnectorL2Adapter`` calls the native client's ``event_fd``,
  ``submit_batch_set`` / ``_get`` / ``_exists`` / ``_delete``, ``drain_completions`` and
  ``close``; :func:`check_native_client` reads which from its source, so a release that
  calls a method more is named, not met with an ``AttributeError`` mid-run.
- 0.5.4-0.5.6: ``NativeConnectorL2Adapter(native_client, max_capacity_gb=, type_name=,
  extra_status=)``.
- 0.5.7rc2: ``L2AdapterInterface.get_memory_tags()`` is abstract, and
  ``NativeConnectorL2Adapter(native_client, memory_tags, ...)`` takes the answer; LMCache's
  prefetch planner compares it with a request's allowed L2 tags.  Mooncake Store holds the
  bytes on storage nodes shared by every host: ``MemoryTags(STORAGE, REMOTE)``, as LMCache's
  own ``mooncake_store`` factory says (:func:`native_adapter_arguments`).
"""

from __future__ import annotations

import ast
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
    "check_native_client",
    "native_adapter_arguments",
    "require_lmcache",
]

#: LMCache releases CI runs LMCache's own ``mooncake_store`` adapter tests against (PyPI
#: wheels, oldest first; ``scripts/lmcache_releases.py``).  The ``lmcache`` extra's range
#: covers them.
TESTED_LMCACHE_VERSIONS: tuple[str, ...] = ("0.5.4", "0.5.5", "0.5.6", "0.5.7rc2")

_INSTALL_HINT = (
    "pip install 'lmcache>=0.5.4' (from a clone of mooncake-cffi: "
    "pip install '.[cpu,lmcache]', or '.[cuda,lmcache]' on a GPU node)"
)

_BASE = "lmcache.v1.distributed.l2_adapters"

#: What the plugins import from LMCache: (module, name).
_NEEDED = (
    (f"{_BASE}.base", "L2AdapterInterface"),
    (f"{_BASE}.native_connector_l2_adapter", "NativeConnectorL2Adapter"),
    (f"{_BASE}.plugin_l2_adapter", "PluginL2AdapterConfig"),
    (f"{_BASE}.native_plugin_l2_adapter", "NativePluginL2AdapterConfig"),
    (_BASE, "create_l2_adapter"),
    ("lmcache.v1.distributed.internal_api", "L1MemoryDesc"),
)

#: ``NativeConnectorL2Adapter`` arguments the plugins know how to give.
_KNOWN_ARGUMENTS = frozenset(
    {"self", "native_client", "memory_tags", "max_capacity_gb", "type_name", "extra_status"}
)


class LMCacheVersionError(ImportError):
    """The installed LMCache lacks something the plugins need (the message names it)."""


class UntestedLMCacheWarning(UserWarning):
    """The installed LMCache release was not tested, though it has all the plugins need."""


def require_lmcache(what: str) -> None:
    """Raise ImportError naming ``what`` and the install command if lmcache is missing."""
    try:
        importlib.import_module("lmcache")
    except ImportError as exc:
        raise ImportError(
            f"{what} needs LMCache, which is not installed: {_INSTALL_HINT} "
            f"(tested with lmcache {', '.join(TESTED_LMCACHE_VERSIONS)})"
        ) from exc


def _lookup(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def _memory_tags() -> Any:
    """``MemoryTags(STORAGE, REMOTE)`` of the installed LMCache."""
    api = importlib.import_module("lmcache.v1.distributed.api")
    return api.MemoryTags(api.MemorySegment.STORAGE, api.MemoryResidency.REMOTE)


def _missing() -> list[str]:
    """What the plugins need and the installed LMCache lacks, each named."""
    problems: list[str] = []
    found: dict[str, Any] = {}
    for module, name in _NEEDED:
        try:
            found[name] = _lookup(module, name)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{module}.{name} is missing ({exc})")
    native = found.get("NativeConnectorL2Adapter")
    if native is None:
        return problems
    unimplemented = sorted(getattr(native, "__abstractmethods__", ()))
    if unimplemented:
        problems.append(
            "NativeConnectorL2Adapter does not implement the L2AdapterInterface methods "
            + ", ".join(unimplemented)
        )
    iface = found.get("L2AdapterInterface")
    if iface is not None and not issubclass(native, iface):
        problems.append("NativeConnectorL2Adapter is no L2AdapterInterface")
    params = inspect.signature(native.__init__).parameters
    if "native_client" not in params:
        problems.append("NativeConnectorL2Adapter() takes no 'native_client' argument")
    for name, param in params.items():
        required = param.default is inspect.Parameter.empty and param.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        )
        if required and name not in _KNOWN_ARGUMENTS:
            problems.append(
                f"NativeConnectorL2Adapter() requires the argument {name!r}, which "
                "mooncake_cffi does not know how to give"
            )
    if "memory_tags" in params:
        try:
            _memory_tags()
        except (ImportError, AttributeError) as exc:
            problems.append(
                "NativeConnectorL2Adapter() takes 'memory_tags', but "
                f"lmcache.v1.distributed.api lacks MemoryTags(STORAGE, REMOTE) ({exc})"
            )
    return problems


def _installed() -> str:
    try:
        return version("lmcache")
    except PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def check_lmcache_version() -> str:
    """Check that the installed LMCache has what the plugins need, and return its version.

    Called when an adapter is created (``MooncakeConnector`` inside LMCache,
    ``MooncakeL2Adapter``), so a failure reaches LMCache's own log there.

    Raises:
        ImportError: lmcache is not installed (the message says how to install it).
        LMCacheVersionError: the release lacks a class, method or argument the plugins
            need; the message names each and the release.

    Warns with :class:`UntestedLMCacheWarning` for a release not in
    :data:`TESTED_LMCACHE_VERSIONS` that has all they need.
    """
    require_lmcache("mooncake_cffi.lmcache's LMCache plugins")
    installed = _installed()
    problems = _missing()
    tested = ", ".join(TESTED_LMCACHE_VERSIONS)
    if problems:
        raise LMCacheVersionError(
            f"LMCache {installed} lacks what mooncake_cffi.lmcache needs: "
            f"{'; '.join(problems)} (tested with lmcache {tested})"
        )
    if installed not in TESTED_LMCACHE_VERSIONS:
        warnings.warn(
            f"mooncake_cffi.lmcache is tested with lmcache {tested}, not {installed}; it has "
            "everything the plugins use, so going ahead",
            UntestedLMCacheWarning,
            stacklevel=2,
        )
    return installed


def native_adapter_arguments(**options: Any) -> dict[str, Any]:
    """Keyword arguments for the installed LMCache's ``NativeConnectorL2Adapter`` beyond
    the client: ``memory_tags`` where it takes them (0.5.7 on), and those of ``options``
    (``max_capacity_gb``, ``type_name``, ``extra_status``) that it takes."""
    native = _lookup(f"{_BASE}.native_connector_l2_adapter", "NativeConnectorL2Adapter")
    params = inspect.signature(native.__init__).parameters
    out = {name: value for name, value in options.items() if name in params}
    if "memory_tags" in params:
        out["memory_tags"] = _memory_tags()
    return out


@functools.lru_cache(maxsize=1)
def _client_calls() -> frozenset[str]:
    """The methods LMCache's ``NativeConnectorL2Adapter`` calls on its native client, read
    from its source (``native_client.X`` and ``self._client.X``)."""
    module = importlib.import_module(f"{_BASE}.native_connector_l2_adapter")
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return frozenset()  # no source to read: nothing to say
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "native_client":
            names.add(node.attr)
        elif (
            isinstance(owner, ast.Attribute)
            and owner.attr == "_client"
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "self"
        ):
            names.add(node.attr)
    return frozenset(names)


def check_native_client(client_class: type) -> None:
    """Check that the installed LMCache calls nothing on a native client that
    ``client_class`` lacks (LMCache wraps it in its ``NativeConnectorL2Adapter``).

    Raises:
        LMCacheVersionError: naming the methods and the release.
    """
    lacking = sorted(name for name in _client_calls() if not hasattr(client_class, name))
    if lacking:
        raise LMCacheVersionError(
            f"LMCache {_installed()} calls native-client methods that "
            f"{client_class.__name__} lacks: {', '.join(lacking)} (tested with lmcache "
            f"{', '.join(TESTED_LMCACHE_VERSIONS)})"
        )
