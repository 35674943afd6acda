"""The installed package works wherever Python starts, including the checkout's root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_from_the_checkout_root_uses_the_installed_package():
    script = (
        "import mooncake_cffi, mooncake_cffi.client as c; "
        "from mooncake_cffi import LocalCluster, Client; "
        "print(mooncake_cffi.__version__); print(c.__file__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    version, client_file = proc.stdout.split()
    assert version.count(".") == 2
    assert not Path(client_file).resolve().is_relative_to(REPO / "mooncake_cffi")
