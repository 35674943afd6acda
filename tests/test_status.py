"""The pure status-code table agrees with the shim and loads no native library."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mooncake_cffi import status
from mooncake_cffi.capi import ffi, lib

REPO = Path(__file__).resolve().parents[1]


def test_status_table_matches_the_shim():
    for code, name, text in status.CODES:
        assert ffi.string(lib.mcs_error_name(code)).decode() == name
        assert ffi.string(lib.mcs_strerror(code)).decode() == text
    assert status.name(-99999) == "UNKNOWN_ERROR"


def test_shim_codes_match_the_header_enum():
    for code, name, _ in status.CODES:
        if name.startswith("MCS_"):
            assert getattr(lib, name) == code
            assert code <= status.SHIM_BASE


def test_operation_lane_and_session_codes_match_the_header_enums():
    """status.py's op, lane, flag and session codes are the header's, both ways."""
    for code, op in enumerate(status.OPS):
        assert getattr(lib, f"MCS_OP_{op.upper()}") == code
    for code, lane in enumerate(status.LANES):
        assert getattr(lib, f"MCS_LANE_{lane.upper()}") == code
    assert lib.MCS_LANE_COUNT == len(status.LANES)
    for code, op in enumerate(status.SESSION_OPS):
        assert getattr(lib, f"MCS_SESSION_{op.upper()}") == code
    header = (REPO / "shim" / "mcs.h").read_text()
    for prefix, names in (
        ("MCS_OP_", status.OPS),
        ("MCS_LANE_", (*status.LANES, "count")),
        ("MCS_SESSION_", status.SESSION_OPS),
    ):
        declared = set(re.findall(rf"\b{prefix}([A-Z_]+) =", header))
        assert declared == {n.upper() for n in names}, prefix
    assert (lib.MCS_FLAG_FORCE, lib.MCS_FLAG_SKIP_EXISTING, lib.MCS_FLAG_LAND) == (
        status.FLAG_FORCE,
        status.FLAG_SKIP_EXISTING,
        status.FLAG_LAND,
    )
    assert (lib.MCS_PUT_EXISTED, lib.MCS_GET_UNREAD) == (status.PUT_EXISTED, status.GET_UNREAD)


_ENTRY = re.compile(r'\{\s*(-?\d+|MCS_\w+),\s*"([^"]+)",\s*"([^"]*)"\s*\}')


def _shim_table() -> list[tuple[int, str, str]]:
    """The (code, name, text) entries of errors.cpp's table, as the shim compiles them."""
    source = (REPO / "shim" / "src" / "engine" / "errors.cpp").read_text()
    table = source[source.index("kCodes[] = {") : source.index("};", source.index("kCodes[]"))]
    entries = []
    for code, name, text in _ENTRY.findall(table):
        value = int(code) if code.lstrip("-").isdigit() else getattr(lib, code)
        entries.append((value, name, text))
    return entries


def _header_codes() -> dict[int, str]:
    """Every status-like value the header's enums define (codes and per-key results)."""
    out: dict[int, str] = {}
    for enum in ("enum mcs_status", "enum mcs_get_result"):
        out.update(ffi.typeof(enum).elements)
    return out


def test_every_code_the_shim_knows_is_in_the_status_table():
    entries = _shim_table()
    assert len(entries) > 80  # the whole table was parsed
    table = {code: (name, text) for code, name, text in status.CODES}
    for code, name, text in entries:
        assert table.get(code) == (name, text), f"errors.cpp's {name} ({code}) differs"
    for code, name in _header_codes().items():
        expected = "OK" if name == "MCS_OK" else name  # the table names 0 as Mooncake does
        assert table.get(code, ("?",))[0] == expected, f"mcs.h's {name} ({code}) is not in status"


def test_every_code_in_the_status_table_is_known_to_the_shim():
    known = {code for code, _, _ in _shim_table()}
    for code, name, _ in status.CODES:
        assert code in known, f"status.{name} ({code}) is not in errors.cpp's table"
        assert ffi.string(lib.mcs_error_name(code)).decode() == name


def test_one_public_error_name():
    import mooncake_cffi
    from mooncake_cffi import errors
    from mooncake_cffi._capi import binding as _binding

    assert mooncake_cffi.error_name is status.name
    assert mooncake_cffi.error_name(-706) == "OBJECT_HAS_LEASE"
    assert mooncake_cffi.error_name(status.MCS_GET_UNREAD) == "MCS_GET_UNREAD"
    for module in (_binding, errors):
        assert not hasattr(module, "error_name")
    assert not hasattr(_binding, "strerror")


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


def test_an_upserts_racing_writer_codes_raise_concurrent_write_error():
    from mooncake_cffi import ConcurrentWriteError, MooncakeError
    from mooncake_cffi._core.plans import raise_key_errors
    from mooncake_cffi.errors import write_error_for

    for code in (-601, -703):
        err = write_error_for(code, "x", [code], upsert=True)
        assert type(err) is ConcurrentWriteError and isinstance(err, MooncakeError)
        assert err.code == code and err.retryable and err.results == [code]
        assert type(write_error_for(code, "x")) is not ConcurrentWriteError  # a put's, a get's
    assert type(write_error_for(-800, "x", upsert=True)) is not ConcurrentWriteError
    try:
        raise_key_errors(["k"], [-601], upsert=True)
    except ConcurrentWriteError as exc:
        assert "another writer upserted it at the same time" in str(exc) and exc.code == -601
    else:
        raise AssertionError("no ConcurrentWriteError")
