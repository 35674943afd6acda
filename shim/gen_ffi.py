"""Build step: turn mcs.h into cffi's out-of-line ABI module (no header parsing at import).

Usage: gen_ffi.py HEADER OUTPUT.py
"""

import importlib.util
import sys
from pathlib import Path

import cffi


def _load_cdef_module():
    """mooncake_cffi/_capi/cdef.py, the package's own header reader, loaded by path."""
    path = Path(__file__).resolve().parent.parent / "mooncake_cffi" / "_capi" / "cdef.py"
    spec = importlib.util.spec_from_file_location("_mcs_cdef", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    header, output = sys.argv[1], sys.argv[2]
    with open(header) as f:
        text = f.read()
    builder = cffi.FFI()
    builder.cdef(_load_cdef_module().cdef_from_header(text))
    builder.set_source("mooncake_cffi._mcs_ffi", None)
    builder.emit_python_code(output)


if __name__ == "__main__":
    main()
