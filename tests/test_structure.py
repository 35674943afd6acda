"""The shape of the code that its readers rely on, checked on the source tree.

* The public classes are faces that hold what they use: none inherits a private class, and
  ``Client`` inherits nothing at all.
* The folders are the layers: ``_capi`` (the C boundary) is the only code that touches the
  shim's ``lib``; ``_core`` (what the faces share) sits on it; the faces (``Client``,
  ``AsyncClient``, the drop-in ``store``, the CLI, the LMCache tier) sit on the core.  No
  import runs back up a layer, and no module imports itself round a circle.
* Nothing outside the package imports a private module of it, no subpackage reaches
  into another's private module, and no module reads another's objects' private
  attributes (a face uses what a client declares for it: ``client.parts``).
* The pure modules (status codes, errors, config) load without the native library.
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

#: The folder of the C boundary: its modules may call ``lib.mcs_*``, and so may the public
#: raw C ABI (``capi.py``).
CAPI = PACKAGE / "_capi"
LIB_MODULES = {PACKAGE / "capi.py"}

#: Layers, lowest first: a module may import its own layer and those below, never above.
#: The pure modules are the bottom; the faces the top (everything not named here).
PURE = {
    "status",
    "errors",
    "retry",
    "sizes",
    "addresses",
    "replica",
    "config",
    "integrity",
    "wheel",
    "metadata",
    "outcome",
    "topology",
    "_source_tree",
    "_version",
    "_mcs_ffi",
    "_mcs_api",
}
LAYERS = {"pure": 0, "_capi": 1, "_core": 2, "faces": 3}


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
        if _private_part(info.name) or info.name.endswith(("._mcs_ffi", "._mcs_api")):
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


def test_only_the_c_boundary_touches_lib() -> None:
    offenders = []
    for path in (
        _python_files(PACKAGE) + _python_files(ROOT / "cli") + _python_files(ROOT / "bench")
    ):
        if path.parent == CAPI or path in LIB_MODULES:
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
#: binding, and unit tests of the local cluster's state directory and status reader, of a
#: plan's deadline, of how concurrent setups share MC_RPC_TIMEOUT_MS (what each setup
#: reads is not observable from outside the client).
PRIVATE_ON_PURPOSE = {
    "tests/test_status.py",
    "tests/test_structure.py",
    "tests/test_cluster.py",
    "tests/test_plans.py",
    "tests/test_rpc_wait_env.py",
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


#: Private attributes a file may use of objects it did not make, each with its reason: the
#: cluster's start-up steps are split from LocalCluster by subject and drive its own steps.
FRIENDS = {
    "cluster/_startup.py": {"_assign_ports", "_spawn", "_launch"},
}
#: Private names of the standard library's own public API (``namedtuple._replace``,
#: ``os._exit``).
STDLIB_PRIVATE = {"_replace", "_exit", "_asdict", "_fields", "_getframe"}


def _reach_ins(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each private attribute used of an object other than ``self``
    or ``cls`` whose name the source itself never defines (as an attribute it assigns, a
    function, a class or a ``__slots__`` entry): a reach into another object's inside."""
    tree = ast.parse(source)
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            own.update(
                e.value
                for e in getattr(node.value, "elts", [])
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        name = node.attr
        if name.startswith("__") or name in own or name in STDLIB_PRIVATE:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_module_reaches_into_the_private_attributes_of_another_ones_objects() -> None:
    """A face drives a client through what the client declares for it (``client.parts``,
    ``client.batches``), never through its private attributes: the mix-ups of two things
    both called "id" start where one module reads another's insides."""
    offenders = []
    for path in _python_files(PACKAGE):
        rel = "/".join(path.relative_to(PACKAGE).parts)
        allowed = FRIENDS.get(rel, set())
        for line, expr in _reach_ins(path.read_text()):
            if expr.rpartition(".")[2] not in allowed:
                offenders.append(f"mooncake_cffi/{rel}:{line}: {expr}")
    assert not offenders, offenders


def test_a_reach_in_would_be_found() -> None:
    source = (
        "class A:\n"
        "    def f(self, c):\n"
        "        self._mine = c._theirs\n"
        "        return self._mine, c._mine\n"
    )
    assert _reach_ins(source) == [(3, "c._theirs")]


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "cli":
        parts = ["mooncake_cffi", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in the file, typing-only and
    function-level imports included: a circle is a circle to its reader)."""
    files = _python_files(PACKAGE) + _python_files(ROOT / "cli")
    modules = {_module_of(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for target, _ in _imports(path):
            if target in modules:
                deps.add(target)
            elif target.rpartition(".")[0] in modules:  # from module import name
                deps.add(target.rpartition(".")[0])
        # ``from . import x`` also names the package itself: not an import of it.
        deps.discard(name)
        deps -= {m for m in deps if name.startswith(m + ".") and modules[m].name == "__init__.py"}
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert not _circles(_graph())


def test_a_circle_would_be_found() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # the package's __init__: the public names, a face
        return LAYERS["faces"]
    if parts[1] in ("_capi", "_core"):
        return LAYERS[parts[1]]
    if len(parts) == 2 and parts[1] in PURE:
        return LAYERS["pure"]
    return LAYERS["faces"]


def test_no_import_runs_back_up_a_layer() -> None:
    offenders = [
        f"{module} imports {target}"
        for module, deps in _graph().items()
        for target in deps
        if _layer(target) > _layer(module)
    ]
    assert not offenders, offenders


def test_the_c_boundary_the_core_and_the_drop_in_are_subpackages() -> None:
    for sub in ("_capi", "_core", "store"):
        assert (PACKAGE / sub / "__init__.py").is_file()
    import mooncake_cffi.store

    assert mooncake_cffi.store.MooncakeDistributedStore.__name__ == "MooncakeDistributedStore"


def test_the_pure_modules_load_without_the_native_library() -> None:
    import subprocess
    import sys

    script = (
        "import sys; import mooncake_cffi.errors, mooncake_cffi.status, mooncake_cffi.config; "
        "loaded = [m for m in sys.modules if m.startswith('mooncake_cffi._capi')]; "
        "assert not loaded, loaded"
    )
    # Imported by path from the installed package, bypassing its __init__ (which loads
    # the faces): the pure modules must not pull the binding in by themselves.
    done = subprocess.run(
        [sys.executable, "-c", _bare_import(script)], capture_output=True, text=True, cwd="/"
    )
    assert done.returncode == 0, done.stderr


def _bare_import(script: str) -> str:
    """``script`` preceded by a stub ``mooncake_cffi`` package over the installed directory,
    so importing a submodule runs that submodule alone (and what it imports)."""
    where = str(Path(mooncake_cffi.__file__).parent)
    return (
        "import sys, types; pkg = types.ModuleType('mooncake_cffi'); "
        f"pkg.__path__ = [{where!r}]; sys.modules['mooncake_cffi'] = pkg; " + script
    )
