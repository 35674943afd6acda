"""Raw cffi binding of the shim: exposes ``ffi`` and ``lib`` only.

The declarations come straight from ``mcs.h`` (the text between its
``MCS_CDEF_BEGIN``/``MCS_CDEF_END`` markers, minus preprocessor lines), so the
header is their single source.  The build turns it into two of cffi's out-of-line
modules: ``_mcs_api`` (API mode: compiled against the header and linked with
``libmcs.so``, so each call is a direct C call) and ``_mcs_ffi`` (ABI mode: calls
through libffi, about 0.3 us more per call).  The package uses the first; the second
only if the compiled module cannot be imported, and the installed header is parsed at
run time only if neither can.  Importing this module loads ``libmcs.so`` and refuses a
library whose ABI version differs from the header's.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import error_for
from .cdef import cdef_from_header, header_abi_version

__all__ = [
    "ABI_VERSION",
    "API_MODE",
    "HEADER_PATH",
    "PRECOMPILED",
    "check",
    "ensure_mooncake_loaded",
    "ffi",
    "last_error",
    "lib",
    "set_log_level",
    "shim_abi_version",
    "shim_version",
]

# The package directory (the shim and its header are installed beside __init__.py).
_HERE = Path(__file__).resolve().parent.parent

#: Installed copy of the shim's public header.
HEADER_PATH = _HERE / "mcs.h"


def _library_path() -> Path:
    override = os.environ.get("MOONCAKE_CFFI_SHIM")
    return Path(override) if override else _HERE / "libmcs.so"


_header_text = HEADER_PATH.read_text()

try:
    # Loaded first, RTLD_GLOBAL: store.so, loaded after it, takes the shim's replica choice
    # (shim/src/mooncake/replica_choice.hpp); the shim exports nothing else but mcs_* names.
    # The compiled module's own link to libmcs.so then resolves to this very library (by
    # its soname), so MOONCAKE_CFFI_SHIM chooses the library both modes call.
    _loaded = ctypes.CDLL(str(_library_path()), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
except OSError as exc:  # pragma: no cover - broken installation
    raise ImportError(
        f"cannot load the mooncake-cffi shim {_library_path()}: {exc}; "
        "reinstall the package (from its clone: pip install --force-reinstall --no-deps .)"
    ) from exc

ffi: Any
lib: Any
try:
    import mooncake_cffi._mcs_api as _api

    ffi, lib = _api.ffi, _api.lib

    #: True when calls go through the compiled module (``_mcs_api``), not libffi.
    API_MODE = True
    #: True when the declarations were built from the header, not parsed at import.
    PRECOMPILED = True
except ImportError:  # e.g. a Python the package was not built for
    API_MODE = False
    try:
        import mooncake_cffi._mcs_ffi as _abi

        ffi = _abi.ffi
    except ImportError:  # e.g. a cffi runtime older than the one that built the package
        import cffi

        ffi = cffi.FFI()
        ffi.cdef(cdef_from_header(_header_text))
        PRECOMPILED = False
    else:
        PRECOMPILED = True
    lib = ffi.dlopen(str(_library_path()), ffi.RTLD_NOW | ffi.RTLD_GLOBAL)

ABI_VERSION = header_abi_version(_header_text)
if lib.mcs_abi_version() != ABI_VERSION:  # pragma: no cover - broken installation
    raise ImportError(
        f"the shim {_library_path()} has ABI version {lib.mcs_abi_version()}, "
        f"but this package's header declares {ABI_VERSION}; reinstall the package"
    )

_load_lock = threading.Lock()


def shim_version() -> str:
    """The loaded shim's version, ``"MAJOR.MINOR.PATCH"`` (the package's own version)."""
    return str(ffi.string(lib.mcs_version_string()).decode())


def shim_abi_version() -> int:
    """The loaded shim's ABI version (:data:`ABI_VERSION` is the header's: they match)."""
    return int(lib.mcs_abi_version())


def last_error() -> str:
    """The shim's per-thread message for the last failed call."""
    return str(ffi.string(lib.mcs_last_error()).decode("utf-8", "replace"))


def check(rc: int) -> int:
    """Raise the exception for a negative shim status, with the shim's message."""
    if rc < 0:
        raise error_for(rc, last_error())
    return rc


def set_log_level(level: int) -> None:
    """Set Mooncake's log threshold, process-wide: 0 INFO, 1 WARNING, 2 ERROR, 3 silent.

    Mooncake is silent (3) by default.
    """
    ensure_mooncake_loaded()
    rc = lib.mcs_set_log_level(int(level))
    if rc != 0:
        raise error_for(rc, last_error())


def ensure_mooncake_loaded() -> None:
    """Check the installed Mooncake wheel and hand its ``store.so`` to the shim (once).

    ``store.so`` is found by the import system's path finder (:func:`wheel.store_so_path
    <mooncake_cffi.wheel.store_so_path>`) and loaded by the shim itself,
    with the wheel's version (which tells the shim the layout of Mooncake's ReplicateConfig):
    ``mooncake.store`` is not imported.  An unsupported wheel (outside the range, or whose
    ``store.so`` lacks a symbol the shim needs) raises
    :class:`mooncake_cffi.wheel.UnsupportedWheelError`, one message naming the version found,
    the range supported and the install command.  On the wheels that need ``libcudart.so.12``
    without shipping it, it is preloaded first (see :func:`mooncake_cffi.wheel.prepare_runtime`).
    """
    if lib.mcs_loaded():
        return
    with _load_lock:
        if lib.mcs_loaded():
            return
        from .. import wheel

        found = wheel.check_supported()
        wheel.prepare_runtime(found)
        path = wheel.store_so_path()
        version = found.version.encode() if found.version else ffi.NULL
        rc = lib.mcs_load(os.fsencode(path), version)
        if rc != 0:
            message = last_error()
            if "dlopen" in message:
                raise ImportError(
                    f"{found.distribution or 'Mooncake'} {found.version}: {path} does not load "
                    f"({message}). It needs the system libraries libibverbs1, libnuma1 and "
                    "libcurl4 (0.3.14 also libmlx5.so.1, from ibverbs-providers); the CUDA "
                    "wheels (mooncake-transfer-engine, mooncake-transfer-engine-cuda13) also "
                    "need the NVIDIA driver's libcuda.so.1 (on a CPU-only machine: "
                    f"{wheel.install_command('cpu')})"
                )
            raise wheel.unsupported(found, f"loading it failed: {message}")
