"""``python -m mooncake_cffi.cli``: the ``mcl2`` console script, for an environment whose
``bin/`` is not on ``PATH``."""

from .main import main

if __name__ == "__main__":
    main()
