"""The drop-in MooncakeDistributedStore next to Mooncake's own, in one process, on one
cluster: the same calls must give the same answers (codes, lists, bytes), and what either
writes the other reads."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from store_helpers import Memory, same, stores, tag

from mooncake_cffi.cluster import LocalCluster

Case = Callable[[Any, str], Any]


@pytest.fixture(scope="module")
def pair(cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    with stores(cluster) as made:
        yield made


def _bytes(handle: Any) -> Any:
    return None if handle is None else (handle.size(), len(handle), bytes(memoryview(handle)))


SRC = Memory(64, b"0123456789abcdefghij")
BIG = bytes(range(256)) * 4096  # 1 MiB
DST = Memory(64)


def _cases(t: str) -> dict[str, Case]:
    """Calls and their expected-equal answers; ``n`` (the store's name) keys each store's own."""
    p, d = SRC.ptr, DST.ptr
    return {
        "put then get": lambda s, n: (s.put(f"{t}{n}a", b"hello"), s.get(f"{t}{n}a")),
        "a missing key": lambda s, n: (
            s.get(f"{t}{n}-none"),
            s.is_exist(f"{t}{n}-none"),
            s.get_size(f"{t}{n}-none"),
            s.remove(f"{t}{n}-none"),
            s.get_buffer(f"{t}{n}-none"),
            s.get_into(f"{t}{n}-none", d, 8),
        ),
        "the empty key": lambda s, n: (
            s.get(""),
            s.is_exist(""),
            s.get_size(""),
            s.remove(""),
            s.put("", b"x"),
        ),
        "an empty value": lambda s, n: (s.put(f"{t}{n}e", b""), s.is_exist(f"{t}{n}e")),
        "put keeps the first value": lambda s, n: (
            s.put(f"{t}{n}f", b"one"),
            s.put(f"{t}{n}f", b"two"),
            s.get(f"{t}{n}f"),
        ),
        "upsert replaces": lambda s, n: (s.upsert(f"{t}{n}f", b"three"), s.get(f"{t}{n}f")),
        "a value larger than a thread's read buffer": lambda s, n: (
            s.put(f"{t}{n}big", BIG),
            s.get(f"{t}{n}big") == BIG,
            s.get_batch([f"{t}{n}big"])[0] == BIG,
            s.get_batch([f"{t}{n}big", f"{t}{n}big-none"])[0] == BIG,
            bytes(s.get_buffer(f"{t}{n}big")) == BIG,
        ),
        "put_batch": lambda s, n: (
            s.put_batch([f"{t}{n}b1", f"{t}{n}b2"], [b"aa", b"bbb"]),
            s.get_batch([f"{t}{n}b1", f"{t}{n}-none", f"{t}{n}b2"]),
            s.get_size(f"{t}{n}b2"),
        ),
        "put_batch edge cases": lambda s, n: (
            s.put_batch([], []),
            s.put_batch([f"{t}{n}m"], []),
            s.put_batch([f"{t}{n}d", f"{t}{n}d"], [b"first", b"second"]),
            s.get(f"{t}{n}d"),
            s.upsert_batch([f"{t}{n}u", f"{t}{n}u"], [b"first", b"second"]),
            s.get(f"{t}{n}u"),
            s.put_batch([f"{t}{n}pe1", f"{t}{n}pe2"], [b"x", b""]),
            s.is_exist(f"{t}{n}pe1"),
        ),
        "get_batch edge cases": lambda s, n: (s.get_batch([]), s.get_batch([f"{t}{n}b1", ""])),
        "batch_is_exist": lambda s, n: (
            s.batch_is_exist([f"{t}{n}b1", f"{t}{n}-none", f"{t}{n}b1", ""]),
            s.batch_is_exist([]),
            s.batch_is_exist((f"{t}{n}b2",)),
        ),
        "get_buffer": lambda s, n: (
            _bytes(s.get_buffer(f"{t}{n}b2")),
            [_bytes(h) for h in s.batch_get_buffer([f"{t}{n}b1", f"{t}{n}-none", f"{t}{n}b2"])],
            s.batch_get_buffer([]),
        ),
        "get_into": lambda s, n: (
            DST.clear(),
            s.get_into(f"{t}{n}b2", d, 64),
            DST[:4],
            s.get_into(f"{t}{n}b2", d, 1),
            s.get_into(f"{t}{n}b2", d, 0),
        ),
        "batch_get_into": lambda s, n: (
            DST.clear(),
            s.batch_get_into(
                [f"{t}{n}b1", f"{t}{n}-none", f"{t}{n}b2"], [d, d + 8, d + 16], [8] * 3
            ),
            DST[:20],
            s.batch_get_into([f"{t}{n}b1", f"{t}{n}b1"], [d, d + 8], [8, 8]),
            s.batch_get_into([f"{t}{n}b1", f"{t}{n}b2"], [d, d + 8], [8, 0]),
            s.batch_get_into([f"{t}{n}b1", f"{t}{n}b2"], [d], [8]),
            s.batch_get_into([], [], []),
        ),
        "put_from": lambda s, n: (
            s.put_from(f"{t}{n}pf", p, 10),
            s.get(f"{t}{n}pf"),
            s.put_from(f"{t}{n}pf0", p, 0),
            s.is_exist(f"{t}{n}pf0"),
            s.upsert_from(f"{t}{n}pf", p + 12, 4),
            s.get(f"{t}{n}pf"),
        ),
        "batch_put_from": lambda s, n: (
            s.batch_put_from([f"{t}{n}p2", f"{t}{n}p3"], [p, p + 4], [4, 4]),
            s.get_batch([f"{t}{n}p2", f"{t}{n}p3"]),
            s.batch_put_from([f"{t}{n}pd", f"{t}{n}pd"], [p, p + 4], [4, 4]),
            s.get(f"{t}{n}pd"),
            s.batch_put_from([f"{t}{n}z1", f"{t}{n}z2"], [p, p], [4, 0]),
            s.is_exist(f"{t}{n}z1"),
            s.batch_put_from([f"{t}{n}x1", f"{t}{n}x2"], [p], [4]),
            s.batch_upsert_from([f"{t}{n}bu", f"{t}{n}bu"], [p, p + 3], [3, 3]),
            s.get(f"{t}{n}bu"),
        ),
        "multi buffers": lambda s, n: (
            DST.clear(),
            s.batch_put_from_multi_buffers([f"{t}{n}mb"], [[p, p + 10]], [[2, 3]]),
            s.get(f"{t}{n}mb"),
            s.batch_get_into_multi_buffers([f"{t}{n}mb"], [[d, d + 32]], [[2, 3]]),
            (DST[:2], DST[32:35]),
            s.batch_get_into_multi_buffers([f"{t}{n}-none"], [[d]], [[2]]),
            s.batch_put_from_multi_buffers([f"{t}{n}me"], [[]], [[]]),
            s.batch_put_from_multi_buffers([f"{t}{n}mm", f"{t}{n}mm2"], [[p]], [[2]]),
        ),
        "put_parts": lambda s, n: (
            s.put_parts(f"{t}{n}pp", b"ab", b"cde"),
            s.get(f"{t}{n}pp"),
            s.upsert_parts(f"{t}{n}pp", b"xy", memoryview(b"z")),
            s.get(f"{t}{n}pp"),
        ),
        "put_parts with empty parts or none": lambda s, n: (
            s.put_parts(f"{t}{n}pe"),
            s.is_exist(f"{t}{n}pe"),
            s.put_parts(f"{t}{n}pe", b""),
            s.put_parts(f"{t}{n}pe", b"", memoryview(b"")),
            s.is_exist(f"{t}{n}pe"),
            s.put_parts(f"{t}{n}pe", b"ab", b"", b"c"),
            s.get(f"{t}{n}pe"),
            s.upsert_parts(f"{t}{n}pe"),
            s.upsert_parts(f"{t}{n}pe", b""),
            s.get(f"{t}{n}pe"),
            s.upsert_parts(f"{t}{n}pe", b"", b"xy", b""),
            s.get(f"{t}{n}pe"),
            s.upsert_parts(f"{t}{n}pu", b"", b"q"),
            s.get(f"{t}{n}pu"),
        ),
        "remove": lambda s, n: (
            s.batch_remove([f"{t}{n}p2", f"{t}{n}-none", f"{t}{n}p2"], True),
            s.remove_by_regex(f"^{t}{n}p[3d]$", force=True),
            s.is_exist(f"{t}{n}p3"),
            s.remove_by_regex("(("),
        ),
    }


CASES = list(_cases("x"))


@pytest.mark.parametrize("case", CASES)
def test_the_same_call_gets_the_same_answer(pair: dict[str, Any], case: str) -> None:
    cases = _cases(tag("sbs") + "-")
    # Earlier cases create the keys later ones read: run them in order, check the one named.
    for name, call in cases.items():
        if name == case:
            same(pair, call)
            return
        for store_name, store in pair.items():
            call(store, store_name)


def test_the_values_of_either_client_read_back_through_the_other(pair: dict[str, Any]) -> None:
    t = tag("cross")
    theirs, ours = pair["theirs"], pair["ours"]
    value = bytes(range(256)) * 40
    assert theirs.put(f"{t}-t", value) == 0 and ours.put(f"{t}-o", value) == 0
    for reader, key in ((ours, f"{t}-t"), (theirs, f"{t}-o")):
        assert reader.get(key) == value
        assert reader.get_batch([key, key + "-none"]) == [value, b""]
        assert bytes(reader.get_buffer(key)) == value
        assert reader.get_size(key) == len(value) and reader.is_exist(key) == 1
        mem = Memory(len(value))
        assert reader.get_into(key, mem.ptr, mem.size) == len(value) and mem[:] == value


def test_a_key_twice_in_a_batch_reads_its_value_twice(pair: dict[str, Any]) -> None:
    # Mooncake's own get_batch / batch_get_buffer sometimes return another value's bytes for
    # one of the two (seen on 0.3.13.post1); the drop-in reads each distinct key once.
    ours, key = pair["ours"], tag("twice")
    assert ours.put_batch([key, key + "-2"], [b"value", b"other"]) == 0
    assert ours.get_batch([key, key + "-2", key]) == [b"value", b"other", b"value"]
    handles = ours.batch_get_buffer([key, key, key + "-2"])
    assert [bytes(h) for h in handles] == [b"value", b"value", b"other"]
    assert ours.batch_is_exist([key, key]) == [1, 1]
    assert ours.batch_remove([key, key], True) == [0, -704]


def test_a_read_lease_blocks_a_plain_remove_and_force_removes(pair: dict[str, Any]) -> None:
    t = tag("lease")

    def lease(s: Any, n: str) -> Any:
        key = f"{t}-{n}"
        s.put(key, b"leased")
        got = s.get(key)  # the read takes a lease (10 s by default)
        return got, s.remove(key), s.batch_remove([key]), s.is_exist(key), s.remove(key, True)

    assert same(pair, lease) == (b"leased", -706, [-706], 1, 0)


def test_zero_copy_with_registered_buffers(pair: dict[str, Any]) -> None:
    t = tag("zc")
    n_keys, size = 16, 64 * 1024

    def zero_copy(s: Any, n: str) -> Any:
        src, dst = Memory(n_keys * size), Memory(n_keys * size)
        ctypes.memmove(src.ptr, bytes(range(256)) * (n_keys * size // 256), n_keys * size)
        keys = [f"{t}-{n}-{i}" for i in range(n_keys)]
        ptrs = [src.ptr + i * size for i in range(n_keys)]
        dptrs = [dst.ptr + i * size for i in range(n_keys)]
        registered = (s.register_buffer(src.ptr, src.size), s.register_buffer(dst.ptr, dst.size))
        put = s.batch_put_from(keys, ptrs, [size] * n_keys)
        got = s.batch_get_into(keys, dptrs, [size] * n_keys)
        same_bytes = dst[:] == src[:]
        unregistered = (s.unregister_buffer(src.ptr), s.unregister_buffer(dst.ptr))
        return registered, put, got, same_bytes, unregistered

    answer = same(pair, zero_copy)
    assert answer == ((0, 0), [0] * n_keys, [size] * n_keys, True, (0, 0))


def test_byte_ranges_into_registered_buffers(pair: dict[str, Any]) -> None:
    t = tag("rng")

    def ranges(s: Any, n: str) -> Any:
        s.put(f"{t}-{n}-a", b"yyyyyyyy")
        s.put(f"{t}-{n}-b", b"0123456789")
        a, b = Memory(64), Memory(64)
        regs = (s.register_buffer(a.ptr, 64), s.register_buffer(b.ptr, 64))
        read = s.get_into_ranges(
            [a.ptr, b.ptr],
            [[f"{t}-{n}-a", f"{t}-{n}-b", f"{t}-{n}-none"], [f"{t}-{n}-b"]],
            [[[0], [3, 10], [20]], [[1]]],
            [[[0], [0, 5], [0]], [[2]]],
            [[[3], [2, 3], [1]], [[4]]],
        )
        out = (regs, read, a[:15], b[:6])
        bad = (
            # past the value, lists of unequal length, two buffers but one list of keys
            s.get_into_ranges([a.ptr], [[f"{t}-{n}-a"]], [[[0]]], [[[5]]], [[[9]]]),
            s.get_into_ranges([a.ptr], [[f"{t}-{n}-a"]], [[[0, 1]]], [[[0]]], [[[1]]]),
            s.get_into_ranges([a.ptr, b.ptr], [[f"{t}-{n}-a"]], [[[0]]], [[[0]]], [[[1]]]),
            s.get_into_ranges(  # the first buffer's lists do not pair up, the second's do
                [a.ptr, b.ptr],
                [[f"{t}-{n}-a", f"{t}-{n}-b"], [f"{t}-{n}-b"]],
                [[[0]], [[1]]],
                [[[0]], [[2]]],
                [[[1]], [[4]]],
            ),
            s.get_into_ranges([], [], [], [], []),
            s.get_into_ranges([a.ptr], [[]], [[]], [[]], [[]]),
        )
        unreg = Memory(64)
        bad += (s.get_into_ranges([unreg.ptr], [[f"{t}-{n}-a"]], [[[0]]], [[[0]]], [[[2]]]),)
        s.unregister_buffer(a.ptr)
        s.unregister_buffer(b.ptr)
        return out, bad

    (regs, read, a, b), bad = same(pair, ranges)
    assert regs == (0, 0) and read == [[[3], [2, 3], [-704]], [[4]]]
    assert a == b"yyy01" + bytes(5) + b"567" + bytes(2) and b == b"\x002345\x00"
    assert bad == (
        [[[-600]]],
        [[[-600, -600]]],
        [[[-600]], [[-600]]],
        [[[-600], [-600]], [[4]]],
        [],
        [[]],
        [[[-600]]],
    )


def test_registering_twice_and_unknown_addresses(pair: dict[str, Any]) -> None:
    def register(s: Any, n: str) -> Any:
        m = Memory(4096)
        return (
            s.register_buffer(m.ptr, m.size),
            s.register_buffer(m.ptr, m.size),
            s.unregister_buffer(m.ptr),
            s.unregister_buffer(m.ptr),
        )

    assert same(pair, register) == (0, -600, 0, -600)


def test_wrong_argument_types_raise_type_error_as_mooncakes_do(pair: dict[str, Any]) -> None:
    for store in pair.values():
        for call in (
            lambda s: s.put(1, b"x"),
            lambda s: s.get(1),
            lambda s: s.put("k", "a str is no buffer"),
            lambda s: s.get_into("k", -1, 4),
            lambda s: s.get(key="k"),
            lambda s: s.batch_is_exist("not-a-list"),
            lambda s: s.setup("127.0.0.1"),
        ):
            with pytest.raises(TypeError):
                call(store)


def test_health_hostname_and_close(cluster: LocalCluster) -> None:
    with stores(cluster) as pair:
        for store in pair.values():
            assert store.health_check() == 0
            assert store.get_hostname().startswith("127.0.0.1:")

        def closed(s: Any, n: str) -> Any:
            return (s.close(), s.close(), s.health_check(), s.get("k"), s.put_from("k", SRC.ptr, 4))

        assert same(pair, closed) == (0, 0, 1, b"", -600)


def test_values_larger_than_the_local_buffer_go_through_the_bytes_calls(
    pair: dict[str, Any],
) -> None:
    t, huge = tag("huge"), bytes(range(256)) * (80 * 1024)  # 20 MiB, past the 16 MiB buffer
    theirs, ours = pair["theirs"], pair["ours"]
    assert theirs.put(f"{t}-t", huge) == -600 and theirs.put_batch([f"{t}-t"], [huge]) == -600
    assert ours.put(f"{t}-o", huge) == 0 and ours.put_batch([f"{t}-o2"], [huge]) == 0
    assert ours.get(f"{t}-o") == huge and ours.get_batch([f"{t}-o", f"{t}-o2"]) == [huge, huge]
    assert theirs.get(f"{t}-o") == b"" and theirs.get_batch([f"{t}-o"]) == [b""]
    assert ours.get_buffer(f"{t}-o") is None  # a handle needs room in the local buffer
    assert ours.batch_remove([f"{t}-o", f"{t}-o2"], True) == [0, 0]


def test_with_no_local_buffer_the_bytes_calls_fail_and_zero_copy_works(
    cluster: LocalCluster,
) -> None:
    """``local_buffer_size`` 0: nothing to copy through, so put / get and their batches
    answer as Mooncake's do (its own wheel tests expect it); registered memory still works."""
    t, src = tag("nobuf"), Memory(64, b"zero-copy")
    with stores(cluster, local_buffer_size=0) as pair:

        def calls(s: Any, n: str) -> Any:
            k = f"{t}{n}"
            return (
                s.put(k, b"v"),
                s.put_batch([k + "b1", k + "b2"], [b"x", b"y"]),
                s.upsert(k + "u", b"v"),
                s.upsert_batch([k + "ub"], [b"v"]),
                s.put_parts(k + "p", b"a", b"b"),
                s.is_exist(k),
                s.register_buffer(src.ptr, 64),
                s.put_from(k + "z", src.ptr, 9),
                s.get(k + "z"),
                s.get_batch([k + "z"]),
                s.get_into(k + "z", src.ptr + 32, 32),
                bytes(src.buf.raw[32:41]),
                s.get_size(k + "z"),
                s.unregister_buffer(src.ptr),
            )

        answer = same(pair, calls)
    assert answer[:6] == (-600, -600, -600, -600, -600, 0) and answer[10:12] == (9, b"zero-copy")


def test_put_from_with_metadata_stores_the_metadata_first(pair: dict[str, Any]) -> None:
    t = tag("pfm")
    data, meta = Memory(16, b"0123456789"), Memory(4, b"meta")

    def pfm(s: Any, n: str) -> Any:
        return (
            s.put_from_with_metadata(f"{t}-{n}", data.ptr, meta.ptr, 10, 4),
            s.get(f"{t}-{n}"),
            s.put_from_with_metadata(f"{t}-{n}0", data.ptr, meta.ptr, 0, 4),
        )

    assert same(pair, pfm) == (0, b"meta0123456789", 0)
    # A failure is Mooncake's positive ErrorCode there; the drop-in's is negative.
    assert pair["theirs"].put_from_with_metadata("", data.ptr, meta.ptr, 10, 4) == 600
    assert pair["ours"].put_from_with_metadata("", data.ptr, meta.ptr, 10, 4) == -600
