"""The ``mcl2`` command line (installed as ``mooncake_cffi.cli``).

``cli`` is the click group (use it with click's ``CliRunner``); ``main`` is the console
script, which also closes Mooncake's client the fast way before exiting.
"""

from .main import cli, main

__all__ = ["cli", "main"]
