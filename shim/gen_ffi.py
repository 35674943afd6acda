"""Build step: turn mcs.h into cffi's out-of-line ABI module (no header parsing at import).

Usage: gen_ffi.py HEADER OUTPUT.py
"""

import re
import sys

import cffi


def cdef_from_header(text: str) -> str:
    body = text.split("/* MCS_CDEF_BEGIN */", 1)[1].split("/* MCS_CDEF_END */", 1)[0]
    lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\bMCS_API\s+", "", "\n".join(lines))


def main() -> None:
    header, output = sys.argv[1], sys.argv[2]
    with open(header) as f:
        text = f.read()
    builder = cffi.FFI()
    builder.cdef(cdef_from_header(text))
    builder.set_source("mooncake_cffi._mcs_ffi", None)
    builder.emit_python_code(output)


if __name__ == "__main__":
    main()
