"""The Python integration tests once more, with the shim built under ASan + UBSan.

Marked ``asan`` (deselected by default; ``pytest -m asan`` runs it).  It builds
build/asan with scripts/sanitize.sh, preloads the sanitizer runtimes into a child
pytest and points the package at the instrumented libmcs.so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.asan


def _runtime(name: str) -> str:
    out = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert os.path.isabs(out), f"{name} not found (install gcc's sanitizer runtimes)"
    return out


@pytest.mark.timeout(1500)  # the build, then the child pytest (its own limit: 1200 s)
def test_integration_suite_under_address_sanitizer():
    subprocess.run([str(REPO / "scripts" / "sanitize.sh"), "asan"], check=True, cwd=REPO)
    shim = REPO / "build" / "asan" / "shim" / "libmcs.so"
    symbols = subprocess.run(["nm", "-D", str(shim)], capture_output=True, text=True).stdout
    assert "__asan_init" in symbols  # really instrumented
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}",
        ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        MOONCAKE_CFFI_SHIM=str(shim),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "test_client.py"),
            str(REPO / "tests" / "test_capi.py"),
            str(REPO / "tests" / "test_capi_misuse.py"),
            str(REPO / "tests" / "test_capi_calls.py"),
        ],
        cwd="/",  # keep the source tree off sys.path: test the installed package
        env=env | {"PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert "AddressSanitizer" not in proc.stderr, tail
