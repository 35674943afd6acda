"""Build step: turn mcs.h into the package's cffi modules (no header parsing at import).

Usage: gen_ffi.py HEADER OUTPUT.py OUTPUT.c

* ``OUTPUT.py``: cffi's out-of-line ABI module ``mooncake_cffi._mcs_ffi`` (calls through
  libffi; the fallback when the compiled module cannot be imported).
* ``OUTPUT.c``: the C source of the out-of-line API module ``mooncake_cffi._mcs_api``,
  compiled against mcs.h and linked with libmcs.so by meson: each call a direct C call, and
  every struct layout checked by the compiler against the header.
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


def _builder(cdef: str) -> cffi.FFI:
    builder = cffi.FFI()
    builder.cdef(cdef)
    return builder


def main() -> None:
    header, output_py, output_c = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(header) as f:
        cdef = _load_cdef_module().cdef_from_header(f.read())
    abi = _builder(cdef)
    abi.set_source("mooncake_cffi._mcs_ffi", None)
    abi.emit_python_code(output_py)
    api = _builder(cdef)
    api.set_source("mooncake_cffi._mcs_api", '#include "mcs.h"')
    api.emit_c_code(output_c)


if __name__ == "__main__":
    main()
