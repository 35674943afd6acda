"""Which Mooncake wheel is installed, whether this package supports it, and how it differs.

Mooncake reaches this package as a PyPI wheel, ``mooncake-transfer-engine-non-cuda`` (CPU),
``mooncake-transfer-engine`` (CUDA 12) or ``mooncake-transfer-engine-cuda13`` (CUDA 13, the
only one of 0.3.14), and users often have the version another stack pinned.  Everything that
depends on that version is decided here, once per process, from the wheel's metadata (its
version) and by probing its files (where its store binding is, the libraries it needs, the
flags ``mooncake_master`` knows), never by guessing:

* :func:`detect` finds the wheel; :func:`check_supported` refuses one outside
  :data:`OLDEST` .. :data:`NEWEST` with one message (:class:`UnsupportedWheelError`);
* :func:`prepare_runtime` makes the store binding loadable on the wheels that link a CUDA
  runtime without shipping it: ``libcudart.so.12`` (the 0.3.12 / 0.3.13 "non-cuda" wheels,
  from ``nvidia-cuda-runtime-cu12``), ``libcudart.so.13`` (the cuda13 wheel, from
  ``nvidia-cuda-runtime``);
* :func:`adapt_setup_config` rewrites the setup keys the older wheels read differently
  (sizes with units);
* :func:`store_so_path` is the store binding the shim loads, ``mooncake/store.so`` up to
  0.3.13.post1 and ``mooncake/_store.cpython-*.so`` from 0.3.14 on (with the wheel's version,
  which tells it the layout of Mooncake's ReplicateConfig);
* :func:`master_flags` and :func:`binary_env` tell the local cluster how to start the
  wheel's binaries.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import struct
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .sizes import parse_size

__all__ = [
    "DEFAULT_VERSION",
    "NEWEST",
    "OLDEST",
    "TESTED",
    "UnsupportedWheelError",
    "Wheel",
    "adapt_setup_config",
    "binary_env",
    "check_supported",
    "describe",
    "detect",
    "master_flags",
    "missing_runtime",
    "mooncake_version",
    "prepare_runtime",
    "store_so_path",
    "unsupported",
]

#: The supported range, both ends included (scripts/wheel_venvs.sh reads these lines).
OLDEST = "0.3.10.post2"
NEWEST = "0.3.14"
#: The version the ``cpu`` / ``cuda`` extras pin (the one the full test suite runs on).
DEFAULT_VERSION = "0.3.13.post1"
#: Versions whose client and CLI integration tests have passed (docs/reference/wheels.md).
TESTED = (
    "0.3.10.post2",
    "0.3.11",
    "0.3.11.post1",
    "0.3.12",
    "0.3.12.post1",
    "0.3.13",
    "0.3.13.post1",
    "0.3.14",
)

_OLDEST = (0, 3, 10, 2)
_NEWEST = (0, 3, 14, -1)
#: Distribution name -> variant.  All install the same ``mooncake`` package.
DISTRIBUTIONS = {
    "mooncake-transfer-engine-non-cuda": "cpu",
    "mooncake-transfer-engine": "cuda",
    "mooncake-transfer-engine-cuda13": "cuda13",
}
_DIST_OF = {variant: dist for dist, variant in DISTRIBUTIONS.items()}
#: Versions released only as ``mooncake-transfer-engine-cuda13`` (scripts/wheel_venvs.sh reads
#: this line): no CPU wheel of them exists.
CUDA13_ONLY = ("0.3.14",)
#: The variants the extras install (the others have no release of :data:`DEFAULT_VERSION`).
_EXTRAS = ("cpu", "cuda")
#: The names of the store binding in the ``mooncake`` package, newest layout first.
_BINDINGS = ("_store", "store")

#: Before this version, setup refuses global_segment_size 0 and reads sizes as plain integers.
_ZERO_SEGMENT_FROM = (0, 3, 12, -1)
_SIZE_KEYS = ("global_segment_size", "local_buffer_size")
#: CUDA runtimes a wheel may link without shipping them -> (the pip package that ships one,
#: the module path of its directory, the directory of the library in it).
_CUDARTS = {
    "libcudart.so.12": ("nvidia-cuda-runtime-cu12", "nvidia.cuda_runtime", "lib"),
    "libcudart.so.13": ("nvidia-cuda-runtime", "nvidia.cu13", "lib"),
}
_CUDA_DRIVER = "libcuda.so.1"
_PROBE_TIMEOUT = 10.0
#: Set to 1 to use a wheel outside the supported range (or without a version) anyway.
ALLOW_ENV = "MOONCAKE_CFFI_ALLOW_ANY_WHEEL"


class UnsupportedWheelError(ImportError):
    """The installed Mooncake wheel cannot be used: the message says which one, and what to do."""


def parse_version(text: str) -> tuple[int, int, int, int] | None:
    """``"0.3.10.post2"`` -> ``(0, 3, 10, 2)``; no post release is -1; None if not X.Y.Z[.postN]."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", text.strip())
    if m is None:
        return None
    major, minor, micro, post = m.groups()
    return int(major), int(minor), int(micro), -1 if post is None else int(post)


@dataclass(frozen=True)
class Wheel:
    """The installed Mooncake wheel, as found on disk."""

    #: Distribution name, or "" for a ``mooncake`` package without wheel metadata.
    distribution: str
    #: Its version ("" when unknown).
    version: str
    #: ``cpu`` or ``cuda`` ("" when unknown).
    variant: str
    #: The ``mooncake`` package directory (None when it is not installed at all).
    package_dir: Path | None

    @property
    def store_path(self) -> Path | None:
        """The store binding (Mooncake's pybind11 module, where the shim finds RealClient):
        ``mooncake/_store.cpython-*.so`` (0.3.14 on) or ``mooncake/store.so``; None if the
        package has neither."""
        return None if self.package_dir is None else find_binding(self.package_dir)

    @property
    def version_tuple(self) -> tuple[int, int, int, int] | None:
        return parse_version(self.version) if self.version else None

    @property
    def supported(self) -> bool:
        """True when the version lies in :data:`OLDEST` .. :data:`NEWEST`."""
        v = self.version_tuple
        return v is not None and _OLDEST <= v <= _NEWEST

    @property
    def accepts_zero_segment(self) -> bool:
        """Whether setup takes ``global_segment_size`` 0 (a client that contributes nothing)."""
        v = self.version_tuple
        return v is None or v >= _ZERO_SEGMENT_FROM

    @property
    def sizes_with_units(self) -> bool:
        """Whether setup reads sizes such as ``"32 MB"`` (older ones read the leading digits)."""
        return self.accepts_zero_segment


def find_binding(package_dir: Path) -> Path | None:
    """The store extension module in ``package_dir``: the first of ``_store`` and ``store``
    with a suffix this interpreter imports extension modules with (``store`` is a Python
    package from 0.3.14 on, which is not it)."""
    for name in _BINDINGS:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = package_dir / f"{name}{suffix}"
            if path.is_file():
                return path
    return None


_lock = threading.Lock()
_wheel: Wheel | None = None
_cudart_dirs: dict[str, Path] = {}
_runtime_ready = False
_master_flags: dict[str, frozenset[str]] = {}


def detect() -> Wheel:
    """The installed Mooncake wheel (looked up once per process)."""
    global _wheel
    with _lock:
        if _wheel is None:
            _wheel = _detect()
        return _wheel


def _detect() -> Wheel:
    spec = importlib.util.find_spec("mooncake")
    pkg = None
    if spec is not None and spec.submodule_search_locations:
        pkg = Path(next(iter(spec.submodule_search_locations))).resolve()
    found = []
    for dist_name, variant in DISTRIBUTIONS.items():
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append((dist, dist_name, variant))
    if not found:
        return Wheel("", "", "", pkg)
    # Both installed (they overwrite each other's files): the one whose files are there.
    for dist, dist_name, variant in found:
        root = Path(str(dist.locate_file(""))).resolve()
        if pkg is None or pkg.parent == root:
            return Wheel(dist_name, dist.version, variant, pkg)
    dist, dist_name, variant = found[0]
    return Wheel(dist_name, dist.version, variant, pkg)


def install_command(variant: str = "") -> str:
    """The pip command that installs the tested default wheel of ``variant`` (cpu by default)."""
    extra = variant if variant in _EXTRAS else "cpu"
    return f"pip install '{_DIST_OF[extra]}=={DEFAULT_VERSION}'"


def unsupported(wheel: Wheel, problem: str) -> UnsupportedWheelError:
    """The single error for a wheel this package cannot use: what was found, the range
    supported, and the command that installs a supported one."""
    found = (
        f"{wheel.distribution} {wheel.version}"
        if wheel.distribution
        else f"a mooncake package without wheel metadata at {wheel.package_dir}"
    )
    return UnsupportedWheelError(
        f"unsupported Mooncake wheel: found {found} ({problem}); mooncake-cffi supports "
        f"mooncake-transfer-engine(-non-cuda, -cuda13) {OLDEST} to {NEWEST}; install one with: "
        f"{install_command(wheel.variant)}"
    )


def check_supported(wheel: Wheel | None = None) -> Wheel:
    """The wheel, or :class:`UnsupportedWheelError` if its version is outside the range.

    ``MOONCAKE_CFFI_ALLOW_ANY_WHEEL=1`` lets any version through (the symbols are still
    checked when the shim loads ``store.so``).
    """
    wheel = wheel or detect()
    if wheel.package_dir is None:
        raise ImportError(
            "Mooncake's wheel is not installed. Install exactly one of: "
            f"{install_command('cpu')} (CPU-only machines) or {install_command('cuda')} "
            "(needs libcuda.so.1); from a clone of mooncake-cffi, pip install '.[cpu]' or "
            "'.[cuda]' installs the same. It also needs the system libraries libibverbs1, "
            "libnuma1 and libcurl4 (scripts/install.sh installs them)."
        )
    if wheel.supported or os.environ.get(ALLOW_ENV) == "1":
        return wheel
    if not wheel.version:
        problem = "its version is unknown"
    elif wheel.version_tuple is None:
        problem = f"version {wheel.version} is not a release this package knows"
    else:
        problem = f"version {wheel.version} is outside the supported range"
    raise unsupported(wheel, problem + f"; set {ALLOW_ENV}=1 to try it anyway")


# ------------------------------------------------------------------ ELF probing


def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF64 little-endian file ([] if it is not one).

    Reads only the ELF header, the section headers, the dynamic section and its strings.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return []
            (shoff,) = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            sections = [
                struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)
            ]
            out: list[str] = []
            for sh in sections:
                if sh[1] != 6:  # SHT_DYNAMIC
                    continue
                fh.seek(sh[4])
                dynamic = fh.read(sh[5])
                strtab = sections[sh[6]]
                fh.seek(strtab[4])
                strings = fh.read(strtab[5])
                for pos in range(0, len(dynamic) - 15, 16):
                    tag, val = struct.unpack_from("<qQ", dynamic, pos)
                    if tag == 0:
                        break
                    if tag == 1:  # DT_NEEDED
                        out.append(strings[val : strings.index(b"\0", val)].decode())
            return out
    except (OSError, struct.error, ValueError, IndexError):
        return []


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


def _find_cudart(name: str) -> Path | None:
    """The directory of the pip package's copy of the CUDA runtime ``name``, if installed."""
    _, module, sub = _CUDARTS[name]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        lib = Path(d) / sub / name
        if lib.is_file():
            return lib.parent
    return None


def _missing_cudarts(path: Path) -> list[str]:
    """The CUDA runtimes ``path`` links that the system loader cannot find."""
    return [n for n in needed_libraries(path) if n in _CUDARTS and not _loadable(n)]


def prepare_runtime(wheel: Wheel | None = None) -> None:
    """Make the store binding loadable: preload the CUDA runtime where the wheel needs it.

    The 0.3.12, 0.3.12.post1 and 0.3.13 "non-cuda" wheels link ``libcudart.so.12``, the
    cuda13 wheel ``libcudart.so.13``, without bundling it.  When the system loader cannot
    find it, the copy from its pip package (``nvidia-cuda-runtime-cu12``,
    ``nvidia-cuda-runtime``) is loaded (RTLD_GLOBAL), so the binding's dlopen finds it; its
    directory is also what :func:`binary_env` adds for the wheel's binaries.  Raises
    ImportError with the command to run when neither is there.  The NVIDIA driver's
    ``libcuda.so.1``, which the CUDA wheels link, is never stood in for: without it the
    binding does not load, and the error says so.
    """
    global _runtime_ready
    wheel = wheel or detect()
    with _lock:
        if _runtime_ready or wheel.store_path is None:
            return
        for name in _missing_cudarts(wheel.store_path):
            found = _find_cudart(name)
            if found is None:
                raise ImportError(
                    f"{wheel.distribution or 'Mooncake'} {wheel.version}: its "
                    f"{wheel.store_path.name} needs {name}, which the wheel does not ship; "
                    f"install it with: pip install {_CUDARTS[name][0]}; or install the "
                    f"default wheel, which does not need it: {install_command(wheel.variant)}"
                )
            ctypes.CDLL(str(found / name), mode=ctypes.RTLD_GLOBAL)
            _cudart_dirs[name] = found
        _runtime_ready = True


def binary_env(binary: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment additions a Mooncake binary needs to start ({} for most wheels).

    For a binary linking a CUDA runtime that the loader cannot find, ``LD_LIBRARY_PATH``
    gains the directory of its pip package's copy.
    """
    found = []
    for name in needed_libraries(binary):
        if name not in _CUDARTS or name not in _cudart_dirs and _loadable(name):
            continue
        where = _cudart_dirs.get(name) or _find_cudart(name)
        if where is not None:  # else it fails to start and its log names the library
            found.append(str(where))
    if not found:
        return {}
    base = os.environ if base is None else base
    old = base.get("LD_LIBRARY_PATH", "")
    parts = found + [p for p in old.split(":") if p and p not in found]
    return {"LD_LIBRARY_PATH": ":".join(parts)}


def missing_runtime(binary: Path) -> str | None:
    """Why ``binary`` cannot start (a message with the fix), or None when it can."""
    w = detect()
    for name in _missing_cudarts(binary):
        if _find_cudart(name) is None:
            return (
                f"{binary.name} of {w.distribution or 'Mooncake'} {w.version} needs {name}, "
                f"which the wheel does not ship; install it with: pip install {_CUDARTS[name][0]}"
            )
    if _CUDA_DRIVER in needed_libraries(binary) and not _loadable(_CUDA_DRIVER):
        return (
            f"{binary.name} of {w.distribution or 'Mooncake'} {w.version} needs the NVIDIA "
            f"driver's {_CUDA_DRIVER}, which this machine lacks; on a CPU-only machine install "
            f"the non-CUDA wheel: {install_command('cpu')}"
        )
    return None


def master_flags(binary: Path) -> frozenset[str]:
    """The command-line flags ``binary`` knows (from its ``--helpfull``, once per binary)."""
    key = str(binary)
    with _lock:
        if key in _master_flags:
            return _master_flags[key]
    env = {**os.environ, **binary_env(binary)}
    try:
        out = subprocess.run(
            [str(binary), "--helpfull"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            env=env,
            stdin=subprocess.DEVNULL,
        ).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    flags = frozenset(re.findall(r"^\s+-(\w+) \(", out, re.M))
    with _lock:
        _master_flags[key] = flags
    return flags


# --------------------------------------------------------------- setup config


def _plain_bytes(value: str) -> str:
    try:
        return str(parse_size(value))
    except ValueError:
        return value  # let Mooncake refuse it


def adapt_setup_config(setup: Mapping[str, str], wheel: Wheel | None = None) -> dict[str, str]:
    """The setup keys as the installed wheel reads them (a copy; ``setup`` is not changed).

    Before 0.3.12, setup reads ``"32 MB"`` as 32 (the leading digits): sizes with units
    become bytes.  Those wheels also refuse ``global_segment_size`` 0; the shim sets such a
    client up through the overload they forward to, which skips the mount (see
    ``shim/src/mooncake/mooncake_backend.cpp``), so ``"0"`` is kept as ``"0"``.
    """
    wheel = wheel or detect()
    out = dict(setup)
    if wheel.sizes_with_units:
        return out
    for key in _SIZE_KEYS:
        if key in out:
            out[key] = _plain_bytes(out[key])
    return out


# -------------------------------------------------------------------- store.so


def store_so_path() -> str:
    """The file of Mooncake's store binding, found without importing anything.

    ``mooncake/store.so`` up to 0.3.13.post1; from 0.3.14 on ``mooncake.store`` is a Python
    package choosing an implementation, and the binding is ``mooncake/_store.cpython-*.so``.
    Importing either would import the ``mooncake`` package (and, on the wheels that need a
    preloaded CUDA runtime, fail); the package's directory comes from :func:`detect` (a
    top-level ``find_spec``, which imports nothing) and the binding is looked up in it by
    the extension suffixes the import system uses (:func:`find_binding`).
    """
    w = detect()
    path = w.store_path
    if path is None:
        raise ImportError(
            f"{w.distribution or 'Mooncake'} {w.version} is installed but has no store "
            f"binding (mooncake/_store.*.so or mooncake/store.so); reinstall it: "
            f"{install_command(w.variant)}"
        )
    return str(path)


# ------------------------------------------------------------------- reporting


def mooncake_version() -> str:
    """The installed Mooncake wheel's version ("" if none is installed or it has none)."""
    return detect().version


def describe() -> str:
    """One line naming the wheel in use: distribution, version, variant and support."""
    w = detect()
    if w.package_dir is None:
        return "Mooncake: not installed"
    if not w.distribution:
        return f"Mooncake: unknown version at {w.package_dir} (unsupported)"
    state = "supported" if w.supported else f"UNSUPPORTED: supported {OLDEST} to {NEWEST}"
    return f"Mooncake: {w.distribution} {w.version} ({w.variant}, {state})"
