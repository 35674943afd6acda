"""Keeping Mooncake's listening sockets on one address (127.0.0.1 for a local cluster).

Mooncake 0.3.13.post1 binds the transfer engine's listeners (TCP transport, handshake, RPC
port probe) and the master's built-in metadata server to the wildcard address; its
``MC_TCP_BIND_ADDRESS`` has no effect on them.  The package ships ``libmcs_loopback.so``, an
``LD_PRELOAD`` library that rewrites a wildcard ``bind()`` to ``MCS_BIND_ADDRESS``.  The
local cluster starts its Mooncake processes with it; a client process gets the same with the
environment from :func:`env` (it must be set before the process starts)::

    env LD_PRELOAD=$(python -m mooncake_cffi.cluster.loopback) MCS_BIND_ADDRESS=127.0.0.1 \
        MC_TCP_BIND_ADDRESS=127.0.0.1 app

``MC_TCP_BIND_ADDRESS`` only sets the address the transfer engine advertises in its segment
descriptor (by default the first LAN address, so peers connect there); the preload makes it
listen there too.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["MISSING", "env", "library"]

LIBRARY_NAME = "libmcs_loopback.so"
MISSING = (
    f"{LIBRARY_NAME} is not installed with mooncake_cffi (a source checkout?): the cluster's "
    "transfer ports will listen on every interface; install the package to confine them"
)


def library() -> Path | None:
    """Path of the installed ``libmcs_loopback.so``, or None if it was not built."""
    path = Path(__file__).resolve().parent.parent / LIBRARY_NAME
    return path if path.is_file() else None


def env(address: str = "127.0.0.1") -> dict[str, str]:
    """Environment that confines a new process's wildcard binds to ``address`` (IPv4).

    Empty when the library is not installed.
    """
    lib = library()
    if lib is None:
        return {}
    # MC_TCP_BIND_ADDRESS is what the transfer engine ADVERTISES (it listens on the wildcard
    # address whatever it says, and without it advertises the first LAN address it finds).
    return {"LD_PRELOAD": str(lib), "MCS_BIND_ADDRESS": address, "MC_TCP_BIND_ADDRESS": address}


if __name__ == "__main__":
    found = library()
    if found is None:
        print(MISSING, file=sys.stderr)
        sys.exit(1)
    print(found)
