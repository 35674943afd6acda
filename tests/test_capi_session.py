"""mcs_client_session (Mooncake's session API through the C ABI): misuse is refused with
MCS_E_INVALID_ARG and a message, before Mooncake is called; a good call answers per key."""

from __future__ import annotations

from typing import Any

from capi_helpers import E_INVALID_ARG, E_INVALID_HANDLE, NULL

from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib

KEEP: list[Any] = []


def _session(op: int, keys: list[bytes], **arrays: Any) -> Any:
    s = ffi.new("struct mcs_session *")
    s.struct_size = ffi.sizeof("struct mcs_session")
    s.op = op
    s.n = len(keys)
    data = ffi.new("char[]", b"\0".join(keys) + b"\0")
    s.key_data, s.key_bytes = data, len(data)
    results = ffi.new("int64_t[]", max(len(keys), 1))
    s.results = results
    KEEP.extend([s, data, results])
    for name, (ctype, values) in arrays.items():
        arr = ffi.new(ctype, values)
        KEEP.append(arr)
        setattr(s, name, arr)
    return s


def test_a_put_session_through_the_c_abi(raw: Any) -> None:
    key = f"capi-session-{id(raw)}".encode()
    buf = ffi.new("char[]", b"abcdefgh")
    start = _session(lib.MCS_SESSION_PUT_START, [key], sizes=("uint64_t[]", [8]))
    assert lib.mcs_client_session(raw, start) == 0, capi.last_error()
    assert start.results[0] == 0
    ranges = _session(
        lib.MCS_SESSION_PUT_RANGES,
        [key],
        ranges_per_key=("uint64_t[]", [2]),
        bufs=("void *[]", [buf + 4, buf]),
        range_sizes=("uint64_t[]", [4, 4]),
        offsets=("uint64_t[]", [4, 0]),
    )
    assert lib.mcs_client_session(raw, ranges) == 0 and ranges.results[0] == 8
    end = _session(lib.MCS_SESSION_PUT_END, [key])
    assert lib.mcs_client_session(raw, end) == 0 and end.results[0] == 0
    again = _session(lib.MCS_SESSION_PUT_END, [key])
    assert lib.mcs_client_session(raw, again) == 0 and again.results[0] == -600
    get_end = _session(lib.MCS_SESSION_GET_END, [])
    assert lib.mcs_client_session(raw, get_end) == 0 and get_end.results[0] == 0


def test_session_misuse_is_refused(raw: Any) -> None:
    def good() -> Any:
        return _session(
            lib.MCS_SESSION_PUT_RANGES,
            [b"k"],
            ranges_per_key=("uint64_t[]", [1]),
            bufs=("void *[]", [ffi.cast("void *", 1)]),
            range_sizes=("uint64_t[]", [1]),
            offsets=("uint64_t[]", [0]),
        )

    assert lib.mcs_client_session(raw, NULL) == E_INVALID_ARG
    assert lib.mcs_client_session(NULL, good()) == E_INVALID_HANDLE
    cases = {
        "an unknown op": lambda s: setattr(s, "op", 99),
        "keys overrun key_bytes": lambda s: setattr(s, "key_bytes", 1),
        "NULL key_data": lambda s: setattr(s, "key_data", NULL),
        "NULL ranges_per_key": lambda s: setattr(s, "ranges_per_key", NULL),
        "NULL bufs": lambda s: setattr(s, "bufs", NULL),
        "NULL range_sizes": lambda s: setattr(s, "range_sizes", NULL),
        "NULL offsets": lambda s: setattr(s, "offsets", NULL),
        "NULL results": lambda s: setattr(s, "results", NULL),
    }
    for name, spoil in cases.items():
        s = good()
        spoil(s)
        assert lib.mcs_client_session(raw, s) == E_INVALID_ARG, name
        assert capi.last_error(), name
    start = _session(lib.MCS_SESSION_PUT_START, [b"k"])
    assert lib.mcs_client_session(raw, start) == E_INVALID_ARG  # NULL sizes
    unsized = good()
    unsized.struct_size = 0
    assert lib.mcs_client_session(raw, unsized) == E_INVALID_ARG
