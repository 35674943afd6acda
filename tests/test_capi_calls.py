"""The shim's C ABI calls beyond a plain batch, through cffi: multi-part values, the
cluster-wide calls, registered memory and byte ranges, background teardowns, each with its
misuse refused by code.
"""

from __future__ import annotations

import os
import time

import pytest
from capi_helpers import (
    E_CLOSED,
    E_INVALID_ARG,
    E_INVALID_HANDLE,
    KEEP,
    NULL,
    make_batch,
    run_batch,
)

from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib

# ------------------------------------------------------------ multi-part values


def _run_parts(handle, op, keys, parts, sizes=None, flags=0):
    """Run a multi-part batch through the raw ABI; (rc, per-key results)."""
    from mooncake_cffi.capi import Batch as Packed

    packed = Packed(op, keys, parts, sizes, flags=flags, writable=op == lib.MCS_OP_GET, parts=True)
    rc = lib.mcs_client_run(handle, NULL, packed.batch)
    return rc, packed.unpack()


def test_multi_part_values_round_trip(raw):
    PUT, GET = lib.MCS_OP_PUT, lib.MCS_OP_GET
    tag = f"parts-{os.getpid()}-{time.monotonic_ns()}"
    k1, k2, k3 = f"{tag}-1", f"{tag}-2", f"{tag}-3"
    rc, res = _run_parts(raw, PUT, [k1, k2], [[b"abc" * 100, b"de"], [b"fgh"]])
    assert (rc, res) == (0, [0, 0]), capi.last_error()
    one = ffi.new("int64_t *")
    plain = ffi.new("char[]", 302)
    assert lib.mcs_client_run_one(raw, one, GET, 0, k1.encode(), len(k1), plain, 302) == 0
    assert one[0] == 302 and ffi.buffer(plain, 302)[:] == b"abc" * 100 + b"de"

    exact = [bytearray(300), bytearray(2)]
    bigger = [bytearray(100), bytearray(500)]
    assert _run_parts(raw, GET, [k1, k2], [exact, bigger]) == (0, [302, 3])
    assert bytes(exact[0] + exact[1]) == b"abc" * 100 + b"de"
    assert bytes(bigger[0][:3]) == b"fgh" and bytes(bigger[0][3:]) == bytes(97)
    assert bytes(bigger[1]) == bytes(500)  # later parts untouched

    # [a buffer of the largest value, a trailer]: the trailer gets the last bytes.
    big, trailer = bytearray(4096), bytearray(2)
    tail = lib.MCS_FLAG_TAIL_PART
    assert _run_parts(raw, GET, [k1], [[big, trailer]], flags=tail) == (0, [302])
    assert bytes(big[:300]) == b"abc" * 100 and bytes(trailer) == b"de"
    assert bytes(big[300:]) == bytes(4096 - 300)
    # Too small, a tail longer than the value, a missing key: per-key results.
    assert _run_parts(raw, GET, [k1], [[bytearray(10), bytearray(2)]]) == (0, [-600])
    assert _run_parts(raw, GET, [k2], [[bytearray(8), bytearray(4)]], flags=tail) == (0, [-600])
    assert _run_parts(raw, GET, [k3], [[bytearray(8)]]) == (0, [-704])

    # UPSERT with parts: wheels with batch_upsert_from_multi_buffers (0.3.13 on).
    rc, res = _run_parts(raw, lib.MCS_OP_UPSERT, [k2], [[b"xy", b"z"]])
    if rc == lib.MCS_E_UNSUPPORTED:
        assert "0.3.13" in capi.last_error()
    else:
        assert (rc, res) == (0, [0])
        out = [bytearray(3)]
        assert _run_parts(raw, GET, [k2], [out]) == (0, [3]) and bytes(out[0]) == b"xyz"


def test_multi_part_misuse_is_refused(raw):
    from mooncake_cffi.capi import Batch as Packed

    PUT, GET = lib.MCS_OP_PUT, lib.MCS_OP_GET
    buf = ffi.new("char[]", 8)
    bufs = ffi.new("void *[]", [buf, buf])
    nulls = ffi.new("void *[]", [buf, NULL])
    sizes = ffi.new("uint64_t[]", [8, 8])
    zero_size = ffi.new("uint64_t[]", [8, 0])
    two, zero = ffi.new("uint32_t[]", [2]), ffi.new("uint32_t[]", [0])

    def batch(op, part_counts, b=bufs, s=sizes, flags=0):
        x = make_batch(op, "parts-misuse", bufs=b, sizes=s, flags=flags)
        x.part_counts = part_counts
        return x

    cases = [
        ("zero parts", batch(PUT, zero)),
        ("a NULL part", batch(PUT, two, b=nulls)),
        ("a zero-sized part", batch(GET, two, s=zero_size)),
        ("parts on exists", batch(lib.MCS_OP_EXISTS, two, b=NULL, s=NULL)),
        ("parts on get_buffer", batch(lib.MCS_OP_GET_BUFFER, two, b=NULL, s=NULL)),
        ("tail flag on put", batch(PUT, two, flags=lib.MCS_FLAG_TAIL_PART)),
        ("tail flag without parts", batch(GET, NULL, flags=lib.MCS_FLAG_TAIL_PART)),
    ]
    for name, b in cases:
        KEEP.append(b)
        assert run_batch(raw, b, ffi.new("uint64_t *")) == E_INVALID_ARG, name
        assert capi.last_error(), name
    # Counts that do not add up, caught before the shim sees them.
    from mooncake_cffi.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="2 keys but 1 lists of parts"):
        Packed(PUT, ["a", "b"], [[b"x"]], parts=True)
    with pytest.raises(InvalidArgumentError, match="key #0 has no parts"):
        Packed(PUT, ["a"], [[]], parts=True)
    with pytest.raises(InvalidArgumentError, match="1 keys but 2 sizes"):
        Packed(PUT, ["a"], [[b"xy"]], [[1, 1]], parts=True)
    with pytest.raises(TypeError, match="not one buffer"):
        Packed(PUT, ["a"], [b"xy"], parts=True)
    assert run_batch(raw, make_batch(lib.MCS_OP_EXISTS, "parts-misuse")) == 0  # the handle is fine


# ------------------------------------------------------------ cluster-wide calls


def test_remove_by_regex_health_check_and_their_misuse(raw):
    tag = f"rx{os.getpid()}x{time.monotonic_ns()}"
    keys = [f"{tag}-a", f"{tag}-b", f"other-{tag}"]
    rc, res = _run_parts(raw, lib.MCS_OP_PUT, keys, [[b"v"]] * 3)
    assert (rc, res) == (0, [0, 0, 0])
    removed = ffi.new("int64_t *")
    assert lib.mcs_client_remove_by_regex(raw, removed, f"^{tag}-".encode(), 1) == 0
    assert removed[0] == 2
    res2 = ffi.new("int64_t[3]")
    packed = b"\0".join(k.encode() for k in keys)
    assert lib.mcs_client_run_keys(raw, res2, lib.MCS_OP_EXISTS, 0, packed, len(packed) + 1, 3) == 0
    assert list(res2) == [0, 0, 1]
    assert lib.mcs_client_remove_by_regex(raw, removed, b"([", 1) == -600
    assert "regex" in capi.last_error()
    status = ffi.new("int *")
    assert lib.mcs_client_health_check(raw, status) == 0 and status[0] == 0
    bad = [
        ("regex NULL out", lambda: lib.mcs_client_remove_by_regex(raw, NULL, b"x", 0)),
        ("regex NULL pattern", lambda: lib.mcs_client_remove_by_regex(raw, removed, NULL, 0)),
        ("regex empty pattern", lambda: lib.mcs_client_remove_by_regex(raw, removed, b"", 0)),
        ("remove_all NULL out", lambda: lib.mcs_client_remove_all(raw, NULL, 0)),
        ("health NULL out", lambda: lib.mcs_client_health_check(raw, NULL)),
    ]
    for name, call in bad:
        assert call() == E_INVALID_ARG, name
    for call in (
        lambda: lib.mcs_client_remove_by_regex(NULL, removed, b"x", 0),
        lambda: lib.mcs_client_remove_all(NULL, removed, 0),
        lambda: lib.mcs_client_health_check(NULL, status),
    ):
        assert call() == E_INVALID_HANDLE


def test_replica_desc_lists_each_keys_replicas_as_json_and_refuses_misuse(raw):
    import json

    tag = f"rd{os.getpid()}x{time.monotonic_ns()}"
    keys = [f"{tag}-a", f"{tag}-missing", f"{tag}-b"]
    rc, res = _run_parts(raw, lib.MCS_OP_PUT, [keys[0], keys[2]], [[b"v" * 100], [b"w" * 7]])
    assert (rc, res) == (0, [0, 0])
    out = ffi.new("char **")
    size = ffi.new("uint64_t *")
    packed = b"".join(k.encode() + b"\0" for k in keys)
    assert lib.mcs_client_replica_desc(raw, out, size, packed, len(packed), 3) == 0
    try:
        text = ffi.string(out[0]).decode()
        assert len(text) == size[0]
    finally:
        lib.mcs_replica_desc_free(out[0])
    lists = json.loads(text)
    assert len(lists) == 3 and lists[1] is None
    for got, nbytes in ((lists[0], 100), (lists[2], 7)):
        assert len(got) == 1 and got[0]["status"] == 3  # COMPLETE
        buf = got[0]["descriptor_variant"]["buffer_descriptor"]
        assert buf["size_"] == nbytes and buf["transport_endpoint_"].startswith("127.0.0.1:")
    assert lib.mcs_client_replica_desc(raw, out, NULL, b"", 0, 0) == 0
    assert ffi.string(out[0]) == b"[]"
    lib.mcs_replica_desc_free(out[0])
    lib.mcs_replica_desc_free(NULL)
    bad = [
        ("NULL out", lambda: lib.mcs_client_replica_desc(raw, NULL, size, packed, len(packed), 3)),
        ("NULL keys", lambda: lib.mcs_client_replica_desc(raw, out, size, NULL, 10, 1)),
        ("overrun", lambda: lib.mcs_client_replica_desc(raw, out, size, packed, 5, 3)),
        ("empty key", lambda: lib.mcs_client_replica_desc(raw, out, size, b"\0", 1, 1)),
    ]
    for name, call in bad:
        out[0] = ffi.cast("char *", 1)  # the call sets it to NULL when it fails
        assert call() == E_INVALID_ARG, name
        assert name == "NULL out" or out[0] == NULL, name
    assert lib.mcs_client_replica_desc(NULL, out, size, packed, len(packed), 3) == E_INVALID_HANDLE
    done = ffi.new("int64_t[2]")
    gone = (keys[0] + "\0" + keys[2] + "\0").encode()
    assert lib.mcs_client_run_keys(raw, done, lib.MCS_OP_REMOVE, 0, gone, len(gone), 2) == 0


def test_remove_all_empties_the_cluster_and_a_closed_client_is_unhealthy(make_cluster):
    local = make_cluster("64 MB").start()
    capi.ensure_mooncake_loaded()
    cfg = local.client_config()
    ks = [ffi.new("char[]", k.encode()) for k in cfg]
    vs = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, ks, vs, len(cfg), NULL, 0) == 0, capi.last_error()
    h = out[0]
    try:
        assert _run_parts(h, lib.MCS_OP_PUT, ["all-1", "all-2"], [[b"1"], [b"2"]])[1] == [0, 0]
        removed = ffi.new("int64_t *")
        assert lib.mcs_client_remove_all(h, removed, 1) == 0 and removed[0] == 2
        assert lib.mcs_client_remove_all(h, removed, 1) == 0 and removed[0] == 0
        assert lib.mcs_client_close(h) == 0
        status = ffi.new("int *")
        assert lib.mcs_client_health_check(h, status) == 0 and status[0] == 1
        assert lib.mcs_client_remove_all(h, removed, 1) == E_CLOSED
    finally:
        lib.mcs_client_free(h)


# ------------------------------------------------ registered memory, byte ranges


def test_register_buffer_passes_mooncakes_codes_through(raw):
    a, b = ffi.new("char[]", 1 << 16), ffi.new("char[]", 1 << 16)
    assert lib.mcs_client_register_buffer(raw, a, 1 << 16) == 0, capi.last_error()
    assert lib.mcs_client_register_buffer(raw, b, 1 << 16) == 0  # several regions at once
    assert lib.mcs_client_register_buffer(raw, a, 1 << 16) == -600  # registered already
    assert "INVALID_PARAMS" in capi.last_error()
    assert lib.mcs_client_unregister_buffer(raw, a) == 0
    assert lib.mcs_client_unregister_buffer(raw, a) == -600  # no longer known
    assert lib.mcs_client_unregister_buffer(raw, b) == 0
    # A buffer elsewhere still transfers: registration restricts nothing (unlike L1).
    key = f"reg-{os.getpid()}-{time.monotonic_ns()}".encode()
    one = ffi.new("int64_t *")
    plain = ffi.new("char[]", b"value")
    assert lib.mcs_client_run_one(raw, one, lib.MCS_OP_PUT, 0, key, len(key), plain, 5) == 0
    assert one[0] == 0
    assert lib.mcs_client_register_buffer(NULL, a, 16) == E_INVALID_HANDLE
    assert lib.mcs_client_unregister_buffer(NULL, a) == E_INVALID_HANDLE


def _ranges(bufs, keys_per_buf, keys, ranges_per_key, dst, src, sizes):
    r = ffi.new("struct mcs_ranges *")
    r.struct_size = ffi.sizeof("struct mcs_ranges")
    packed = b"".join(k + b"\0" for k in keys)
    arrays = [
        ffi.new("void *[]", bufs),
        ffi.new("uint64_t[]", keys_per_buf),
        ffi.new("char[]", packed) if packed else NULL,
        ffi.new("uint64_t[]", ranges_per_key),
        ffi.new("uint64_t[]", dst),
        ffi.new("uint64_t[]", src),
        ffi.new("uint64_t[]", sizes),
        ffi.new("int64_t[]", max(1, len(sizes))),
    ]
    r.n_bufs = len(bufs)
    r.bufs, r.keys_per_buf, r.key_data, r.ranges_per_key = arrays[:4]
    r.key_bytes = len(packed)
    r.dst_offsets, r.src_offsets, r.sizes, r.results = arrays[4:]
    KEEP.extend(arrays)
    return r


def test_get_into_ranges_reads_byte_ranges_into_registered_buffers(raw):
    tag = f"rng-{os.getpid()}-{time.monotonic_ns()}"
    k1, k2 = f"{tag}-1".encode(), f"{tag}-2".encode()
    one = ffi.new("int64_t *")
    for key, value in ((k1, b"0123456789"), (k2, b"abcdefghij")):
        src = ffi.new("char[]", value)
        assert lib.mcs_client_run_one(raw, one, lib.MCS_OP_PUT, 0, key, len(key), src, 10) == 0
    a, b = ffi.new("char[]", 64), ffi.new("char[]", 64)
    assert lib.mcs_client_register_buffer(raw, a, 64) == 0
    assert lib.mcs_client_register_buffer(raw, b, 64) == 0
    try:
        # a <- k1[2:5] at 0, k2[0:2] at 10 and k2[8:10] at 20; b <- k1[0:4] at 1, a missing key.
        r = _ranges(
            [a, b],
            [2, 2],
            [k1, k2, k1, f"{tag}-missing".encode()],
            [1, 2, 1, 1],
            [0, 10, 20, 1, 0],
            [2, 0, 8, 0, 0],
            [3, 2, 2, 4, 4],
        )
        assert lib.mcs_client_get_into_ranges(raw, r) == 0, capi.last_error()
        assert list(r.results[0:5]) == [3, 2, 2, 4, -704]
        assert ffi.buffer(a, 22)[:] == b"234" + bytes(7) + b"ab" + bytes(8) + b"ij"
        assert ffi.buffer(b, 5)[:] == b"\x000123"
        # Out of the value, out of the buffer, an unregistered buffer: per range, -600.
        c = ffi.new("char[]", 64)
        r = _ranges([a, c], [1, 1], [k1, k1], [2, 1], [0, 60, 0], [8, 0, 0], [5, 8, 2])
        assert lib.mcs_client_get_into_ranges(raw, r) == 0
        assert list(r.results[0:3]) == [-600, -600, -600]
        # Nothing to read: ran, nothing written.
        assert lib.mcs_client_get_into_ranges(raw, _ranges([], [], [], [], [], [], [])) == 0
    finally:
        assert lib.mcs_client_unregister_buffer(raw, a) == 0
        assert lib.mcs_client_unregister_buffer(raw, b) == 0


def test_get_into_ranges_misuse_is_refused(raw):
    a = ffi.new("char[]", 16)
    good = lambda: _ranges([a], [1], [b"k"], [1], [0], [0], [1])  # noqa: E731
    assert lib.mcs_client_get_into_ranges(raw, NULL) == E_INVALID_ARG
    assert lib.mcs_client_get_into_ranges(NULL, good()) == E_INVALID_HANDLE

    def kept(cdata):  # a struct field holds a bare pointer: its owner must outlive the call
        KEEP.append(cdata)
        return cdata

    cases = {
        "keys overrun key_bytes": lambda r: setattr(r, "key_bytes", 1),
        "an empty key": lambda r: setattr(r, "key_data", kept(ffi.new("char[]", b"\0"))),
        "NULL bufs": lambda r: setattr(r, "bufs", NULL),
        "NULL keys_per_buf": lambda r: setattr(r, "keys_per_buf", NULL),
        "NULL ranges_per_key": lambda r: setattr(r, "ranges_per_key", NULL),
        "NULL sizes": lambda r: setattr(r, "sizes", NULL),
        "NULL results": lambda r: setattr(r, "results", NULL),
        "a key too many": lambda r: setattr(r, "keys_per_buf", kept(ffi.new("uint64_t[]", [2]))),
    }
    for name, spoil in cases.items():
        r = good()
        spoil(r)
        KEEP.append(r)
        assert lib.mcs_client_get_into_ranges(raw, r) == E_INVALID_ARG, name
        assert capi.last_error(), name
    unsized = good()
    unsized.struct_size = 0
    assert lib.mcs_client_get_into_ranges(raw, unsized) == E_INVALID_ARG


# ------------------------------------------------------------ background teardowns


def test_teardown_queries_and_their_misuse(raw):
    assert lib.mcs_teardowns_pending() >= 0
    assert lib.mcs_teardowns_wait(-2) == lib.MCS_E_INVALID_ARG
    assert "timeout_ms" in capi.last_error()
    assert lib.mcs_teardowns_wait(-1000000) == lib.MCS_E_INVALID_ARG
    # A single-master client tears down on the closing thread: nothing is left behind.
    before = lib.mcs_teardowns_pending()
    assert lib.mcs_client_close(raw) == 0
    assert lib.mcs_teardowns_pending() == before
    rc = lib.mcs_teardowns_wait(0)
    assert rc in (0, lib.MCS_E_TIMEOUT)  # another test's HA client may still be tearing down
    assert lib.mcs_client_close(raw) == 0  # idempotent
