"""Misuse of the shim's C ABI through cffi: every malformed batch, handle or completion
array comes back as its documented status code with a message, and none crashes the process.
"""

from __future__ import annotations

import time

from capi_helpers import (
    E_DUPLICATE_KEY,
    E_INVALID_ARG,
    E_INVALID_HANDLE,
    KEEP,
    NULL,
    make_batch,
    replica_defaults,
    results_array,
    run_batch,
    with_replica,
)

from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib


def test_misuse_table(raw):
    E = lib.MCS_OP_EXISTS
    buf = ffi.new("char[]", 16)
    bufs = ffi.new("void *[]", [buf])
    nullbufs = ffi.new("void *[]", [NULL])
    sizes = ffi.new("uint64_t[]", [16])
    zero = ffi.new("uint64_t[]", [0])
    values = ffi.new("void *[]", 1)
    idp = ffi.new("uint64_t *")
    comp = ffi.new("struct mcs_completion[]", 4)
    csize = ffi.sizeof("struct mcs_completion")
    comp[0].struct_size = csize
    unsized_comp = ffi.new("struct mcs_completion[]", 4)  # struct_size left 0
    tiny_comp = ffi.new("struct mcs_completion[]", 4)
    tiny_comp[0].struct_size = 8
    st = ffi.new("struct mcs_lane_stats *")
    st.struct_size = ffi.sizeof("struct mcs_lane_stats")
    ost = ffi.new("struct mcs_op_stats *")
    ost.struct_size = ffi.sizeof("struct mcs_op_stats")
    unsized = ffi.new("struct mcs_lane_stats *")  # struct_size left 0
    fdp = ffi.new("int *")
    written = ffi.new("uint64_t *")
    OP = lib
    bogus = ffi.cast("mcs_client *", 0x1234)
    one = ffi.new("int64_t *")
    GET, BAD, BAD_H, DUP = lib.MCS_OP_GET, E_INVALID_ARG, E_INVALID_HANDLE, E_DUPLICATE_KEY
    res2 = ffi.new("int64_t[2]")

    run_one, run_keys = lib.mcs_client_run_one, lib.mcs_client_run_keys
    PUT = lib.MCS_OP_PUT
    ro = replica_defaults()
    unsized_ro = replica_defaults()
    unsized_ro.struct_size = 0
    torn_ro = replica_defaults()
    torn_data = ffi.new("char[]", b"a:1")  # one string, but n says 2
    torn_ro.preferred_segments.data, torn_ro.preferred_segments.bytes = torn_data, 4
    torn_ro.preferred_segments.n = 2
    groups2 = replica_defaults()
    group_data = ffi.new("char[]", b"g1\0g2\0")
    groups2.group_ids.data, groups2.group_ids.bytes, groups2.group_ids.n = group_data, 6, 2
    groups2.has_group_ids = 1
    pin7 = replica_defaults()
    pin7.soft_pin_action = 7
    flag2 = replica_defaults()
    flag2.with_hard_pin = 2
    cases = [
        ("run NULL handle", lambda: run_batch(NULL, make_batch(E, "misuse-a")), E_INVALID_HANDLE),
        ("run bogus handle", lambda: run_batch(bogus, make_batch(E, "misuse-a")), E_INVALID_HANDLE),
        ("run NULL batch", lambda: lib.mcs_client_run(raw, NULL, NULL), E_INVALID_ARG),
        ("struct_size 0", lambda: run_batch(raw, make_batch(E, "k", struct_size=0)), E_INVALID_ARG),
        ("n == 0", lambda: run_batch(raw, make_batch(E, "misuse-a", n=0)), E_INVALID_ARG),
        (
            "NUL form short of n keys",
            lambda: run_batch(raw, _nulloffs(raw)),
            E_INVALID_ARG,
        ),
        (
            "offsets decrease",
            lambda: run_batch(raw, make_batch(E, "ab", "c", offsets=[0, 2, 1])),
            E_INVALID_ARG,
        ),
        ("empty key", lambda: run_batch(raw, make_batch(E, "")), E_INVALID_ARG),
        ("NUL in a key", lambda: run_batch(raw, make_batch(E, "a\0b")), E_INVALID_ARG),
        ("offsets past key_bytes", lambda: run_batch(raw, _offsets_past(raw)), E_INVALID_ARG),
        ("duplicate keys", lambda: run_batch(raw, make_batch(E, "same", "same")), E_DUPLICATE_KEY),
        ("results NULL", lambda: run_batch(raw, make_batch(E, "k", res=NULL)), E_INVALID_ARG),
        ("unknown op", lambda: run_batch(raw, make_batch(99, "k")), E_INVALID_ARG),
        ("negative op", lambda: run_batch(raw, make_batch(-1, "k")), E_INVALID_ARG),
        ("unknown flags", lambda: run_batch(raw, make_batch(E, "k", flags=1 << 10)), E_INVALID_ARG),
        ("get without bufs", lambda: run_batch(raw, make_batch(OP.MCS_OP_GET, "k")), E_INVALID_ARG),
        (
            "exists with bufs",
            lambda: run_batch(raw, make_batch(E, "k", bufs=bufs, sizes=sizes)),
            E_INVALID_ARG,
        ),
        (
            "put NULL buffer",
            lambda: run_batch(raw, make_batch(OP.MCS_OP_PUT, "k", bufs=nullbufs, sizes=sizes)),
            E_INVALID_ARG,
        ),
        (
            "put zero size",
            lambda: run_batch(raw, make_batch(OP.MCS_OP_PUT, "k", bufs=bufs, sizes=zero)),
            E_INVALID_ARG,
        ),
        (
            "put with unsized replica options",
            lambda: run_batch(
                raw, with_replica(make_batch(PUT, "k", bufs=bufs, sizes=sizes), unsized_ro)
            ),
            BAD,
        ),
        (
            "put with malformed preferred_segments",
            lambda: run_batch(
                raw, with_replica(make_batch(PUT, "k", bufs=bufs, sizes=sizes), torn_ro)
            ),
            BAD,
        ),
        (
            "put with group_ids not one per key",
            lambda: run_batch(
                raw, with_replica(make_batch(PUT, "k", bufs=bufs, sizes=sizes), groups2)
            ),
            BAD,
        ),
        (
            "put with soft_pin_action 7",
            lambda: run_batch(
                raw, with_replica(make_batch(PUT, "k", bufs=bufs, sizes=sizes), pin7)
            ),
            BAD,
        ),
        (
            "exists with replica options",
            lambda: run_batch(raw, with_replica(make_batch(E, "k"), ro)),
            BAD,
        ),
        (
            "get_buffer without values",
            lambda: run_batch(raw, make_batch(OP.MCS_OP_GET_BUFFER, "k"), idp),
            E_INVALID_ARG,
        ),
        (
            "get_buffer run without id_out",
            lambda: run_batch(raw, make_batch(OP.MCS_OP_GET_BUFFER, "k", values=values)),
            E_INVALID_ARG,
        ),
        ("submit id_out NULL", lambda: lib.mcs_client_submit(raw, NULL, make_batch(E, "k")), BAD),
        ("run_one NULL handle", lambda: run_one(NULL, one, E, 0, b"k", 1, NULL, 0), BAD_H),
        ("run_one result NULL", lambda: run_one(raw, NULL, E, 0, b"k", 1, NULL, 0), BAD),
        ("run_one key NULL", lambda: run_one(raw, one, E, 0, NULL, 1, NULL, 0), BAD),
        ("run_one empty key", lambda: run_one(raw, one, E, 0, b"k", 0, NULL, 0), BAD),
        ("run_one NUL in key", lambda: run_one(raw, one, E, 0, b"a\0b", 3, NULL, 0), BAD),
        ("run_one unknown op", lambda: run_one(raw, one, 99, 0, b"k", 1, NULL, 0), BAD),
        ("run_one get no buf", lambda: run_one(raw, one, GET, 0, b"k", 1, NULL, 0), BAD),
        ("run_one get size 0", lambda: run_one(raw, one, GET, 0, b"k", 1, buf, 0), BAD),
        ("run_one exists buf", lambda: run_one(raw, one, E, 0, b"k", 1, buf, 16), BAD),
        ("run_keys NULL handle", lambda: run_keys(NULL, res2, E, 0, b"a", 2, 1), BAD_H),
        ("run_keys results NULL", lambda: run_keys(raw, NULL, E, 0, b"a", 2, 1), BAD),
        ("run_keys keys NULL", lambda: run_keys(raw, res2, E, 0, NULL, 2, 1), BAD),
        ("run_keys n 0", lambda: run_keys(raw, res2, E, 0, b"a", 2, 0), BAD),
        ("run_keys short of n", lambda: run_keys(raw, res2, E, 0, b"a", 2, 2), BAD),
        ("run_keys past n", lambda: run_keys(raw, res2, E, 0, b"a\0b", 4, 1), BAD),
        ("run_keys empty key", lambda: run_keys(raw, res2, E, 0, b"\0a", 3, 2), BAD),
        ("run_keys duplicate", lambda: run_keys(raw, res2, E, 0, b"a\0a", 4, 2), DUP),
        ("run_keys get", lambda: run_keys(raw, res2, GET, 0, b"a", 2, 1), BAD),
        (
            "run_one get_buffer",
            lambda: run_one(raw, one, OP.MCS_OP_GET_BUFFER, 0, b"k", 1, NULL, 0),
            BAD,
        ),
        ("drain out NULL", lambda: lib.mcs_client_drain(raw, NULL, 4), E_INVALID_ARG),
        ("drain struct_size 0", lambda: lib.mcs_client_drain(raw, unsized_comp, 4), BAD),
        ("drain tiny struct_size", lambda: lib.mcs_client_drain(raw, tiny_comp, 4), BAD),
        ("drain NULL handle", lambda: lib.mcs_client_drain(NULL, comp, 4), E_INVALID_HANDLE),
        ("stats bad lane", lambda: lib.mcs_client_lane_stats(raw, 7, st), E_INVALID_ARG),
        ("stats out NULL", lambda: lib.mcs_client_lane_stats(raw, 0, NULL), E_INVALID_ARG),
        ("stats struct_size 0", lambda: lib.mcs_client_lane_stats(raw, 0, unsized), E_INVALID_ARG),
        ("op stats bad op", lambda: lib.mcs_client_op_stats(raw, 42, ost), E_INVALID_ARG),
        ("release NULL handle", lambda: lib.mcs_client_release(NULL, 1), E_INVALID_HANDLE),
        ("withdraw NULL handle", lambda: lib.mcs_client_withdraw(NULL, 1), E_INVALID_HANDLE),
        (
            "gather into too little",
            lambda: lib.mcs_gather(written, buf, 1, values, ffi.new("int64_t[]", [5]), 1),
            E_INVALID_ARG,
        ),
        ("fd out NULL", lambda: lib.mcs_client_fd(raw, NULL), E_INVALID_ARG),
        ("register NULL", lambda: lib.mcs_client_register_l1(raw, NULL, 100, 0), E_INVALID_ARG),
        ("register size 0", lambda: lib.mcs_client_register_l1(raw, buf, 0, 0), E_INVALID_ARG),
        ("options init NULL", lambda: lib.mcs_replica_options_init(NULL), BAD),
        ("set options NULL handle", lambda: lib.mcs_client_set_replica_options(NULL, ro), BAD_H),
        ("set options unsized", lambda: lib.mcs_client_set_replica_options(raw, unsized_ro), BAD),
        ("set options with groups", lambda: lib.mcs_client_set_replica_options(raw, groups2), BAD),
        ("set options bad flag", lambda: lib.mcs_client_set_replica_options(raw, flag2), BAD),
        ("debug compare NULL", lambda: lib.mcs_debug_replica_compare(NULL, 0, NULL, ro), BAD),
        ("debug assign NULL", lambda: lib.mcs_debug_replica_assign(NULL, ro), BAD),
        ("hostname NULL buf", lambda: lib.mcs_client_hostname(raw, NULL, 10), E_INVALID_ARG),
        ("close NULL", lambda: lib.mcs_client_close(NULL), E_INVALID_HANDLE),
        ("log level 9", lambda: lib.mcs_set_log_level(9), E_INVALID_ARG),
        (
            "create out NULL",
            lambda: lib.mcs_client_create(NULL, NULL, NULL, 0, NULL, 0),
            E_INVALID_ARG,
        ),
        (
            "create keys NULL",
            lambda: lib.mcs_client_create(ffi.new("mcs_client **"), NULL, NULL, 2, NULL, 0),
            E_INVALID_ARG,
        ),
    ]
    for name, call, expected in cases:
        rc = call()
        assert rc == expected, f"{name}: got {rc} ({capi.last_error()})"
        assert capi.last_error(), f"{name}: no message"
    # the handle is still fine after all that
    assert run_batch(raw, make_batch(E, "misuse-a")) == 0
    assert lib.mcs_client_run_one(raw, one, E, 0, b"misuse-a", 8, NULL, 0) == 0 and one[0] in (0, 1)
    assert lib.mcs_client_run_keys(raw, res2, E, 0, b"misuse-a\0misuse-b", 18, 2) == 0
    assert list(res2) == [one[0], 0]
    assert lib.mcs_client_release(raw, 123456789) == 0  # unknown ids are ignored
    assert lib.mcs_client_withdraw(raw, 123456789) == 0  # nothing of it queued: 0 keys
    assert lib.mcs_client_fd(raw, fdp) == 0 and fdp[0] >= 0
    assert lib.mcs_client_submit(raw, idp, make_batch(E, "misuse-a")) == 0
    assert lib.mcs_client_wait(raw, 5000) == 0
    assert lib.mcs_client_drain(raw, comp, 4) == 1 and comp[0].id == idp[0]
    assert comp[0].struct_size == csize
    assert lib.mcs_client_drain(raw, NULL, 0) == 0  # cap 0: out is not read
    assert lib.mcs_client_wait(raw, 10) == lib.MCS_E_TIMEOUT
    assert lib.mcs_client_op_stats(raw, E, ost) == 0 and ost.calls >= 2
    assert lib.mcs_client_set_replica_options(raw, ro) == 0
    assert lib.mcs_client_set_replica_options(raw, NULL) == 0  # back to Mooncake's defaults
    free_null = lib.mcs_client_free
    free_null(NULL)  # a no-op


def test_drain_fills_an_older_shorter_completion_at_its_stride(raw):
    """A caller whose struct mcs_completion is shorter (an older header) sets its size in
    out[0].struct_size: elements are laid out at that stride, each filled with at most that
    many bytes (the cut message terminated), and nothing past them is written."""
    stride = ffi.offsetof("struct mcs_completion", "message") + 8
    total = stride * 2 + 64
    raw_bytes = ffi.new("unsigned char[]", total)
    ffi.memmove(raw_bytes, b"\xab" * total, total)
    ids = []
    idp = ffi.new("uint64_t *")
    for i in range(2):
        b = make_batch(lib.MCS_OP_EXISTS, f"stride-{i}")
        KEEP.append(b)
        assert lib.mcs_client_submit(raw, idp, b) == 0
        ids.append(int(idp[0]))
    got: list[int] = []
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        lib.mcs_client_wait(raw, 100)
        at = ffi.cast("struct mcs_completion *", raw_bytes + stride * len(got))
        at[0].struct_size = stride
        k = lib.mcs_client_drain(raw, at, 2 - len(got))
        assert k >= 0, capi.last_error()
        for _ in range(k):
            elem = ffi.cast("struct mcs_completion *", raw_bytes + stride * len(got))
            assert elem.struct_size == stride
            assert elem.message[7] == b"\0"
            got.append(int(elem.id))
    assert sorted(got) == sorted(ids)
    assert bytes(ffi.buffer(raw_bytes + stride * 2, 64)) == b"\xab" * 64


def _nulloffs(raw):
    """NUL-terminated form with n larger than the keys key_data holds."""
    b = make_batch(lib.MCS_OP_EXISTS, "k", n=2)
    b.key_offsets = NULL
    return b


def _offsets_past(raw):
    b = make_batch(lib.MCS_OP_EXISTS, "k")
    b.key_bytes = 0
    return b


def test_a_batch_that_ran_returns_0_with_per_key_failures(raw):
    """The return says whether the call ran; key outcomes are only in results."""
    res = results_array(2)
    b = make_batch(lib.MCS_OP_REMOVE, "never-stored-1", "never-stored-2", res=res)
    assert run_batch(raw, b) == 0
    assert list(res[0:2]) == [-704, -704]
