"""mcl2: the admin command line for Mooncake Store (``put``, ``get``, ``exists``, ``rm``,
``stat``; ``ls``, ``info``, ``segments``, ``metrics``, ``doctor`` over the master's admin
API; ``top``, a live view; ``bench``; ``shell``; ``completion``; and
``cluster up|down|status|restart|kill`` for a local cluster on 127.0.0.1).
``python -m mooncake_cffi.cli`` runs it too (:mod:`.__main__`).

Exit statuses: 0 success, 1 error, 2 usage, 3 a key not found, 130 / 143 after SIGINT /
SIGTERM, 141 when standard output's reader went away (see :mod:`.errors`).

:func:`main` is the console script.  It runs the click group, then closes the Mooncake
client the fast way (``close_for_exit``) and leaves with ``os._exit``, which skips Mooncake's
0.3-1 s teardown; the master forgets the client when its TTL passes.  Calling the group
itself (as click's ``CliRunner`` does) closes the client normally instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from . import (  # noqa: F401  (they register their commands on `cli`)
    admin_cmd,
    bench_cmd,
    cluster_cmd,
    completion_cmd,
    data,
    doctor_cmd,
    interrupts,
    put_cmd,
    shell,
    top_cmd,
)
from .app import cli
from .errors import EXIT_ERROR, EXIT_OK
from .settings import Settings

__all__ = ["cli", "main"]


# -- entry point -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """The ``mcl2`` console script: run, close Mooncake's client fast, and ``os._exit``."""
    settings = Settings(fast_exit=True)
    code: int = EXIT_OK
    interrupts.install()
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="mcl2", obj=settings)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt as exc:  # outside a command (while parsing, closing...)
        code = interrupts.exit_status(exc)
    finally:
        with interrupts.held_signals():  # the cleanup below is short: let it finish
            try:
                settings.close()  # normally closed already, with the command's context
            except Exception:
                code = code or EXIT_ERROR
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more can be said
            code = code or EXIT_ERROR
    # Always os._exit: the shim loads Mooncake's store.so itself, so its atexit teardown
    # (0.3-1 s, and fatal for a client close_for_exit left behind) would run otherwise.
    os._exit(code)


def _exit_code(value: Any) -> int:
    if value is None:
        return EXIT_OK
    if isinstance(value, int):
        return value
    try:
        sys.stderr.write(f"{value}\n")
    except Exception:
        pass
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    main()
