"""The shape of the code that its readers rely on, checked on the source tree.

* The public classes are faces that hold what they use: none inherits a private class, and
  ``Client`` inherits nothing at all.
* One way in to the native library: ``lib`` is touched only by the binding and the
  execution modules.
* Nothing outside the package imports a private module of it, and no subpackage reaches
  into another's private module.
* Every file of the package and of the CLI stays under 500 lines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import mooncake_cffi

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mooncake_cffi"
MAX_LINES = 500

#: The modules that may call ``lib.mcs_*``: the binding and the execution modules.
LIB_MODULES = {
    "_binding.py",
    "_marshal.py",
    "_replica_abi.py",
    "_native.py",
    "_blocking.py",
    "_direct.py",
    "batches.py",
    "_stats.py",
    "capi.py",
}


def _python_files(where: Path) -> list[Path]:
    return sorted(p for p in where.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in a file of the source tree."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "cli":  # installed as mooncake_cffi.cli
        parts = ["mooncake_cffi", *parts]
    package = parts[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
            out += [(f"{name}.{alias.name}", node.lineno) for alias in node.names]
    return out


def _private_part(module: str) -> str | None:
    """The first private component of a mooncake_cffi module path (None if all public)."""
    parts = module.split(".")
    if parts[0] != "mooncake_cffi":
        return None
    for part in parts[1:]:
        if part.startswith("_") and not part.startswith("__"):
            return part
    return None


def test_client_inherits_nothing_and_no_public_class_inherits_a_private_one() -> None:
    assert len(mooncake_cffi.Client.__mro__) <= 3
    offenders = []
    for info in pkgutil.walk_packages(mooncake_cffi.__path__, "mooncake_cffi."):
        if _private_part(info.name) or info.name.endswith("._mcs_ffi"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (lmcache, prometheus_client)
            continue
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if name.startswith("_") or cls.__module__ != module.__name__:
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.startswith("mooncake_cffi") and (
                    base.__name__.startswith("_") or _private_part(base.__module__)
                ):
                    offenders.append(
                        f"{info.name}.{name} inherits {base.__module__}.{base.__name__}"
                    )
    assert not offenders, offenders


def test_only_the_binding_and_execution_modules_touch_lib() -> None:
    offenders = []
    for path in (
        _python_files(PACKAGE) + _python_files(ROOT / "cli") + _python_files(ROOT / "bench")
    ):
        if path.parent == PACKAGE and path.name in LIB_MODULES:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "lib"
                and node.attr.startswith(("mcs_", "MCS_"))
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} lib.{node.attr}")
    assert not offenders, offenders


#: Tests that look at a private module on purpose: that a duplicate helper is gone from the
#: binding, and unit tests of the local cluster's state directory and status reader and of a
#: plan's deadline.
PRIVATE_ON_PURPOSE = {
    "tests/test_status.py",
    "tests/test_structure.py",
    "tests/test_cluster.py",
    "tests/test_plans.py",
}


def test_nothing_outside_the_package_imports_its_private_modules() -> None:
    offenders = []
    for where in ("cli", "bench", "scripts", "tests", "docs"):
        for path in _python_files(ROOT / where):
            if str(path.relative_to(ROOT)) in PRIVATE_ON_PURPOSE:
                continue
            for module, line in _imports(path):
                if _private_part(module):
                    offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offenders, offenders


def test_no_subpackage_reaches_into_another_subpackages_private_module() -> None:
    offenders = []
    for path in _python_files(PACKAGE):
        rel = path.relative_to(PACKAGE).parts
        mine = rel[0] if len(rel) > 1 else None  # the subpackage this file is in
        for module, line in _imports(path):
            parts = module.split(".")
            if parts[0] != "mooncake_cffi" or len(parts) < 3:
                continue
            theirs, private = parts[1], _private_part(".".join(parts[:3]))
            if theirs != mine and private and private != theirs:
                offenders.append(f"mooncake_cffi/{'/'.join(rel)}:{line} imports {module}")
    assert not offenders, offenders


def test_every_file_of_the_package_and_the_cli_stays_under_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _python_files(PACKAGE) + _python_files(ROOT / "cli")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long
