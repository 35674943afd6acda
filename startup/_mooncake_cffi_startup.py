"""mooncake-cffi's import hooks, installed at interpreter start by ``mooncake_cffi_startup.pth``.

Two hooks, each answering one module name and nothing else:

- ``lmcache.lmcache_mooncake``: LMCache's built-in ``"type": "mooncake_store"`` adapter
  imports its native client from that C++ extension, which PyPI's lmcache wheel lacks.
  The hook sits at the end of ``sys.meta_path``: an LMCache that has the extension finds
  its own first; otherwise ``mooncake_cffi.lmcache.extension`` answers under that name.
- ``mooncake.store``, only when ``MOONCAKE_CFFI_DROP_IN=1`` is in the environment: the
  module is Mooncake's own, loaded as usual, except that its ``MooncakeDistributedStore``
  is ``mooncake_cffi.store.MooncakeDistributedStore``, the drop-in. So a stack (vLLM,
  SGLang, LMCache) uses the drop-in with no change to its code, in every process it starts
  that inherits the environment. The shim is loaded before Mooncake's binding, as the
  drop-in's read failover needs, whichever module the stack imports first. A drop-in that
  cannot load fails the import of ``mooncake.store`` with an ImportError saying why (the
  user asked for it: the stack must not run Mooncake's class unknowingly);
  ``MOONCAKE_CFFI_DROP_IN=fallback`` asks for the drop-in where it loads and Mooncake's
  class, with a warning logged through ``logging`` (logger ``mooncake_cffi``), where not.

An interpreter that imports neither name pays for this module's import and one or two
entries in ``sys.meta_path``; nothing of ``mooncake_cffi`` is imported until then.
Uninstalling mooncake-cffi removes the ``.pth`` file and with it both hooks.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # nothing more is imported at interpreter start
    from collections.abc import Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The environment variable that switches ``mooncake.store`` to the drop-in.
DROP_IN_ENV = "MOONCAKE_CFFI_DROP_IN"
_ON = ("1", "true", "yes", "on")
_FALLBACK = "fallback"
_OFF = ("", "0", "false", "no", "off")


def _warn(message: str) -> None:
    sys.stderr.write(f"mooncake_cffi: {message}\n")


class _LMCacheExtensionLoader:
    """Makes ``lmcache.lmcache_mooncake`` from ``mooncake_cffi.lmcache.extension``."""

    @staticmethod
    def create_module(spec: ModuleSpec) -> None:
        return None

    @staticmethod
    def exec_module(module: ModuleType) -> None:
        from mooncake_cffi.lmcache import extension

        module.__doc__ = extension.__doc__
        for name in extension.__all__:
            setattr(module, name, getattr(extension, name))
        setattr(module, "__all__", list(extension.__all__))  # noqa: B010


class LMCacheExtensionFinder:
    """Answers ``lmcache.lmcache_mooncake`` when no finder before it did."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "lmcache.lmcache_mooncake":
            return None
        from importlib.machinery import ModuleSpec

        loader: Any = _LMCacheExtensionLoader()
        return ModuleSpec(fullname, loader, origin="mooncake_cffi")


class _DropInLoader:
    """Loads Mooncake's ``mooncake.store`` with its own loader, the shim first, then puts the
    drop-in in place of its ``MooncakeDistributedStore``."""

    def __init__(self, loader: Any, fallback: bool) -> None:
        self.loader = loader
        self.fallback = fallback
        self.ready = False

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        try:
            # libmcs.so, RTLD_GLOBAL, before store.so: the shim then answers store.so's
            # replica choice (read failover).
            import mooncake_cffi._capi.binding  # noqa: F401

            self.ready = True
        except Exception as exc:
            if not self.fallback:  # asked for and not there: the stack must know
                raise ImportError(
                    f"{DROP_IN_ENV}=1 asks for mooncake-cffi's drop-in, but it cannot load "
                    f"({type(exc).__name__}: {exc}); fix that, unset {DROP_IN_ENV} to run "
                    f"Mooncake's own class, or set {DROP_IN_ENV}=fallback to fall back to "
                    "it with a warning",
                    name="mooncake.store",
                ) from exc
            import logging

            logging.getLogger("mooncake_cffi").warning(
                "%s=fallback: the drop-in cannot load (%s: %s); mooncake.store keeps "
                "Mooncake's own MooncakeDistributedStore",
                DROP_IN_ENV,
                type(exc).__name__,
                exc,
            )
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        if not self.ready:
            return
        from mooncake_cffi.store import MooncakeDistributedStore

        setattr(module, "MooncakeDistributedStore", MooncakeDistributedStore)  # noqa: B010


class DropInFinder:
    """Finds ``mooncake.store`` as the path finder does, with :class:`_DropInLoader`."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "mooncake.store":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        fallback = drop_in_requested() == _FALLBACK
        wrapped: Any = _DropInLoader(spec.loader, fallback)
        spec.loader = wrapped
        return spec


def drop_in_requested(environ: Mapping[str, str] | None = None) -> str:
    """How the environment asks for the drop-in: ``"1"`` (required), ``"fallback"``
    (where it loads), or ``""`` (not at all; a value it cannot read is reported)."""
    environ = os.environ if environ is None else environ
    value = environ.get(DROP_IN_ENV, "").strip().lower()
    if value in _ON:
        return "1"
    if value == _FALLBACK:
        return _FALLBACK
    if value not in _OFF:
        _warn(
            f"{DROP_IN_ENV}={environ[DROP_IN_ENV]!r} is neither 1, fallback nor 0: "
            "the drop-in is off"
        )
    return ""


def install() -> None:
    """Put the hooks in ``sys.meta_path`` (once)."""
    if LMCacheExtensionFinder not in sys.meta_path:
        sys.meta_path.append(LMCacheExtensionFinder)
    if drop_in_requested() and DropInFinder not in sys.meta_path:
        if "mooncake.store" in sys.modules:
            _warn(f"{DROP_IN_ENV} is set, but mooncake.store was imported before the hook")
        sys.meta_path.insert(0, DropInFinder)


install()
