"""Reading mcs.h: the cffi declarations between its CDEF markers, and its ABI version.

Standard library only: the build (shim/gen_ffi.py) loads this file by path, and the
package uses it to check the header at import and to parse it as a fallback.
"""

from __future__ import annotations

import re


def cdef_from_header(text: str) -> str:
    """Return the cffi declarations found between the header's CDEF markers."""
    try:
        body = text.split("/* MCS_CDEF_BEGIN */", 1)[1].split("/* MCS_CDEF_END */", 1)[0]
    except IndexError:
        raise ImportError("mcs.h lacks its MCS_CDEF_BEGIN/END markers") from None
    lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\bMCS_API\s+", "", "\n".join(lines))


def header_abi_version(text: str) -> int:
    """The MCS_ABI_VERSION the header declares."""
    m = re.search(r"#define\s+MCS_ABI_VERSION\s+(\d+)", text)
    if not m:
        raise ImportError("mcs.h does not define MCS_ABI_VERSION")
    return int(m.group(1))
