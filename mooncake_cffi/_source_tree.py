"""Finding the installed package when ``mooncake_cffi`` is imported from a source checkout.

Python puts the current directory first on ``sys.path``, so ``python -c "import mooncake_cffi"``
run in the checkout's root finds the source tree, which has neither the built shim nor
``_version.py``.  The package's ``__init__`` then points its ``__path__`` at the installed copy
found here, so every submodule (and the shim) comes from the installation.
"""

from __future__ import annotations

import os
import sys

__all__ = ["installed_package_dir"]


def installed_package_dir(source_init: str) -> str:
    """The directory of an installed, built ``mooncake_cffi`` other than this source tree."""
    source = os.path.realpath(os.path.dirname(source_init))
    for entry in sys.path:
        candidate = os.path.realpath(os.path.join(entry or os.getcwd(), "mooncake_cffi"))
        if candidate != source and os.path.exists(os.path.join(candidate, "_version.py")):
            return candidate
    raise ImportError(
        f"{source} is mooncake-cffi's source tree, which has no built shim, and no installed "
        "mooncake_cffi was found on sys.path: install it (./scripts/install.sh, or "
        "pip install .) and use that environment's python, or run from another directory"
    )
