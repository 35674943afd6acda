"""Raw cffi binding of the shim (ABI mode): exposes ``ffi`` and ``lib`` only.

The declarations come straight from ``mcs.h`` (the text between its
``MCS_CDEF_BEGIN``/``MCS_CDEF_END`` markers, minus preprocessor lines), so the
header is their single source: the build turns it into cffi's out-of-line module
``_mcs_ffi`` (fast to import), and the installed header is parsed at run time
only if that module cannot be loaded.  Importing this module loads ``libmcs.so`` and
refuses a library whose ABI version differs from the header's.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ._cdef import cdef_from_header, header_abi_version

_HERE = Path(__file__).resolve().parent

#: Installed copy of the shim's public header.
HEADER_PATH = _HERE / "mcs.h"


def _library_path() -> Path:
    override = os.environ.get("MOONCAKE_CFFI_SHIM")
    return Path(override) if override else _HERE / "libmcs.so"


_header_text = HEADER_PATH.read_text()

try:
    # Written from mcs.h by the build (shim/gen_ffi.py): no header parsing at import.
    from ._mcs_ffi import ffi

    PRECOMPILED = True
except ImportError:  # e.g. a cffi runtime older than the one that built the package
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cdef_from_header(_header_text))
    PRECOMPILED = False

try:
    lib = ffi.dlopen(str(_library_path()))
except OSError as exc:  # pragma: no cover - broken installation
    raise ImportError(
        f"cannot load the mooncake-cffi shim {_library_path()}: {exc}; "
        "reinstall the package (pip install --force-reinstall mooncake-cffi)"
    ) from exc

ABI_VERSION = header_abi_version(_header_text)
if lib.mcs_abi_version() != ABI_VERSION:  # pragma: no cover - broken installation
    raise ImportError(
        f"the shim {_library_path()} has ABI version {lib.mcs_abi_version()}, "
        f"but this package's header declares {ABI_VERSION}; reinstall the package"
    )

_load_lock = threading.Lock()


def last_error() -> str:
    """The shim's per-thread message for the last failed call."""
    return ffi.string(lib.mcs_last_error()).decode("utf-8", "replace")


def error_name(code: int) -> str:
    """Symbolic name of a status code ("OBJECT_HAS_LEASE", "MCS_E_CLOSED", ...)."""
    return ffi.string(lib.mcs_error_name(code)).decode()


def strerror(code: int) -> str:
    """One-line description of a status code."""
    return ffi.string(lib.mcs_strerror(code)).decode()


def ensure_mooncake_loaded() -> None:
    """Check the installed Mooncake wheel, import it and hand its ``store.so`` to the shim (once).

    An unsupported wheel (outside the range, or whose ``store.so`` lacks a symbol the shim
    needs) raises :class:`mooncake_cffi.wheel.UnsupportedWheelError`, one message naming the
    version found, the range supported and the install command.  On the wheels that need
    ``libcudart.so.12`` without shipping it, it is preloaded first (see
    :func:`mooncake_cffi.wheel.prepare_runtime`).
    """
    if lib.mcs_loaded():
        return
    with _load_lock:
        if lib.mcs_loaded():
            return
        from . import wheel

        found = wheel.check_supported()
        wheel.prepare_runtime(found)
        try:
            import mooncake.store as store  # noqa: F401  (ReplicateConfig lives there)
        except ImportError as exc:
            raise ImportError(
                f"{found.distribution or 'Mooncake'} {found.version} is installed but "
                f"mooncake.store does not import ({exc}). It needs the system libraries "
                "libibverbs1, libnuma1 and libcurl4; the CUDA wheel (mooncake-transfer-engine) "
                f"also needs libcuda.so.1 (on a CPU-only machine: {wheel.install_command('cpu')})"
            ) from exc
        path = store.__file__
        rc = lib.mcs_load(os.fsencode(path))
        if rc != 0:
            raise wheel.unsupported(found, f"loading it failed: {last_error()}")
