"""The pure status-code table agrees with the shim and loads no native library."""

from __future__ import annotations

import subprocess
import sys

from mooncake_cffi import status
from mooncake_cffi._binding import ffi, lib


def test_status_table_matches_the_shim():
    for code, name, text in status.CODES:
        assert ffi.string(lib.mcs_error_name(code)).decode() == name
        assert ffi.string(lib.mcs_strerror(code)).decode() == text
    assert status.name(-99999) == "UNKNOWN_ERROR"


def test_shim_codes_match_the_header_enum():
    for code, name, _ in status.CODES:
        if name.startswith("MCS_E_"):
            assert getattr(lib, name) == code
            assert code <= status.SHIM_BASE


def test_status_module_is_pure():
    """The module loads on its own, without the package's native binding."""
    script = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('status', {status.__file__!r}); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "assert m.OBJECT_NOT_FOUND == -704 and m.name(-706) == 'OBJECT_HAS_LEASE'; "
        "assert not [n for n in sys.modules if n.startswith(('mooncake', '_cffi'))]"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_retryable_codes():
    assert status.is_retryable(status.TRANSFER_FAIL)
    assert status.is_retryable(status.NO_AVAILABLE_HANDLE)
    assert not status.is_retryable(status.INVALID_PARAMS)
    assert not status.is_retryable(status.MCS_E_CLOSED)
