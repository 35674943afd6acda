"""setup_dummy, MooncakeHostMemAllocator and alloc_from_mem_pool on the drop-in, side by side
with Mooncake's own class: both are dummy clients of one standalone client service (the
LocalCluster's storage node is Mooncake's mooncake_client, which serves the IPC socket
``@mooncake_client_<port>.sock``), with the same answers and the same bytes; plus the C
calls' misuse (mcs_client_create_dummy, mcs_shm_alloc, mcs_shm_free)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from capi_helpers import E_INVALID_ARG
from store_helpers import MIB, setup_args, tag

import mooncake_cffi.store as ours_module
from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib
from mooncake_cffi.cluster import LocalCluster

ms = pytest.importorskip("mooncake.store")
if not hasattr(ms, "MooncakeHostMemAllocator"):
    pytest.skip("the installed Mooncake wheel has no dummy client", allow_module_level=True)

POOL = 4 * MIB
PAGE = 64 << 10


def service_address(local: LocalCluster) -> str:
    """The RPC address of ``local``'s first storage node, Mooncake's client service."""
    role = local.storage_roles[0]
    return f"{local.address(role)}:{local.ports[role + '_rpc']}"


@pytest.fixture(scope="module")
def local(make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("256 MB").start()


class Pool:
    """A host pool as SGLang's MooncakeHostTensorAllocator makes it: one segment from the
    class's own MooncakeHostMemAllocator."""

    def __init__(self, allocator: Any, size: int) -> None:
        self.allocator, self.size = allocator, size
        self.ptr = allocator.alloc(size)
        assert self.ptr
        self.view = (ctypes.c_char * size).from_address(self.ptr)

    def write(self, offset: int, data: bytes) -> None:
        ctypes.memmove(self.ptr + offset, data, len(data))

    def read(self, offset: int, n: int) -> bytes:
        return ctypes.string_at(self.ptr + offset, n)


@pytest.fixture(scope="module")
def pair(local: LocalCluster) -> Iterator[dict[str, Any]]:
    addr = service_address(local)
    made = {
        "theirs": (ms.MooncakeDistributedStore(), ms.MooncakeHostMemAllocator()),
        "ours": (ours_module.MooncakeDistributedStore(), ours_module.MooncakeHostMemAllocator()),
    }
    try:
        for name, (store, _) in made.items():
            assert store.setup_dummy(POOL, 16 * MIB, addr) == 0, name
        yield made
    finally:
        for store, _ in made.values():
            store.close()


def both(pair: dict[str, Any], call: Any) -> Any:
    answers = {name: call(store, alloc, name) for name, (store, alloc) in pair.items()}
    assert answers["ours"] == answers["theirs"], answers
    return answers["ours"]


def test_a_dummy_round_trip_answers_and_bytes_as_mooncakes(pair: dict[str, Any]) -> None:
    pages = 8

    def round_trip(s: Any, alloc: Any, n: str) -> list[Any]:
        t = tag(f"dummy-{n}")
        pool = Pool(alloc, pages * 2 * PAGE)
        for i in range(pages):
            pool.write(i * PAGE, bytes([i + 1]) * PAGE)
        out: list[Any] = [
            s.register_buffer(pool.ptr, pool.size // 2),  # not the whole segment: -1
            s.register_buffer(pool.ptr, pool.size),
        ]
        warm = f"{t}-warm"  # SGLang's warm-up: bytes in, bytes out
        out += [s.put(warm, bytes(4096)), s.is_exist(warm), s.get(warm) == bytes(4096)]
        out += [s.get_size(warm), s.put(warm, b"again"), s.upsert(warm, b"x" * 100)]
        out.append(s.get(warm))
        keys = [f"{t}-{i}" for i in range(pages)]
        src = [pool.ptr + i * PAGE for i in range(pages)]
        dst = [pool.ptr + (pages + i) * PAGE for i in range(pages)]
        out.append(s.batch_is_exist(keys))
        out.append(s.batch_put_from(keys, src, [PAGE] * pages))
        out.append(s.batch_put_from(keys[:2], src[:2], [PAGE] * 2))  # present already
        out.append(s.batch_get_into(keys, dst, [PAGE] * pages))
        out.append(pool.read(pages * PAGE, pages * PAGE) == pool.read(0, pages * PAGE))
        # MHA layout: two halves of a page as one object
        halves = [[p, p + PAGE // 2] for p in src]
        mkeys = [k + "-mha" for k in keys]
        out.append(s.batch_put_from_multi_buffers(mkeys, halves, [[PAGE // 2] * 2] * pages))
        ctypes.memset(pool.ptr + pages * PAGE, 0, pages * PAGE)
        dhalves = [[p, p + PAGE // 2] for p in dst]
        out.append(s.batch_get_into_multi_buffers(mkeys, dhalves, [[PAGE // 2] * 2] * pages))
        out.append(pool.read(pages * PAGE, pages * PAGE) == pool.read(0, pages * PAGE))
        out.append(s.put_from(f"{t}-one", src[3], PAGE))
        out.append(s.get_into(f"{t}-one", dst[0], PAGE))
        out.append(pool.read(pages * PAGE, PAGE) == bytes([4]) * PAGE)
        out += [s.get_into(keys[0], dst[0], 100), s.get_into(f"{t}-missing", dst[0], PAGE)]
        outside = ctypes.create_string_buffer(PAGE)  # memory the service has never seen
        out += [s.put_from(f"{t}-out", ctypes.addressof(outside), PAGE)]
        out += [s.get_into(keys[0], ctypes.addressof(outside), PAGE)]
        out.append(s.batch_get_buffer([keys[0], f"{t}-missing"])[1] is None)
        handle = s.get_buffer(keys[1])
        out.append(bytes(memoryview(handle)) == bytes([2]) * PAGE if handle else None)
        del handle
        out.append(s.get_batch([warm, keys[2]]) == [b"x" * 100, bytes([3]) * PAGE])
        out.append(s.health_check())
        out.append(s.batch_remove([*keys, *mkeys, warm, f"{t}-one"], True))
        out += [s.unregister_buffer(pool.ptr), s.unregister_buffer(pool.ptr)]
        out += [alloc.free(pool.ptr), alloc.free(pool.ptr)]
        return out

    answers = both(pair, round_trip)
    assert answers[:2] == [-1, 0] and answers[2:5] == [0, 1, True]
    assert answers[-2:] == [0, -1]


def test_each_reads_what_the_other_wrote(pair: dict[str, Any]) -> None:
    (theirs, t_alloc), (ours, o_alloc) = pair["theirs"], pair["ours"]
    t_pool, o_pool = Pool(t_alloc, 4 * PAGE), Pool(o_alloc, 4 * PAGE)
    assert theirs.register_buffer(t_pool.ptr, t_pool.size) == 0
    assert ours.register_buffer(o_pool.ptr, o_pool.size) == 0
    try:
        a, b = tag("from-theirs"), tag("from-ours")
        t_pool.write(0, b"T" * PAGE)
        o_pool.write(0, b"O" * PAGE)
        assert theirs.put_from(a, t_pool.ptr, PAGE) == 0
        assert ours.put_from(b, o_pool.ptr, PAGE) == 0
        assert ours.get_into(a, o_pool.ptr + PAGE, PAGE) == PAGE
        assert theirs.get_into(b, t_pool.ptr + PAGE, PAGE) == PAGE
        assert o_pool.read(PAGE, PAGE) == b"T" * PAGE and t_pool.read(PAGE, PAGE) == b"O" * PAGE
        assert ours.get(a) == theirs.get(a) == b"T" * PAGE
        assert ours.batch_remove([a, b], True) == [0, 0]
    finally:
        theirs.unregister_buffer(t_pool.ptr)
        ours.unregister_buffer(o_pool.ptr)
        t_alloc.free(t_pool.ptr)
        o_alloc.free(o_pool.ptr)


def test_many_rounds_keep_every_byte(pair: dict[str, Any]) -> None:
    keys_per_round, rounds = 16, 40

    def rounds_of(s: Any, alloc: Any, n: str) -> list[int]:
        pool = Pool(alloc, 2 * keys_per_round * PAGE)
        assert s.register_buffer(pool.ptr, pool.size) == 0
        bad = []
        try:
            for r in range(rounds):
                keys = [tag(f"round{r}-{n}") for _ in range(keys_per_round)]
                data = [bytes([(r * 7 + i) % 251 + 1]) * PAGE for i in range(keys_per_round)]
                for i, d in enumerate(data):
                    pool.write(i * PAGE, d)
                src = [pool.ptr + i * PAGE for i in range(keys_per_round)]
                dst = [pool.ptr + (keys_per_round + i) * PAGE for i in range(keys_per_round)]
                assert s.batch_put_from(keys, src, [PAGE] * keys_per_round) == [0] * len(keys)
                got = s.batch_get_into(keys, dst, [PAGE] * keys_per_round)
                assert got == [PAGE] * keys_per_round, got
                bad += [r for i in range(keys_per_round) if pool.read(dst[i] - pool.ptr, PAGE)
                        != data[i]]  # fmt: skip
                assert s.batch_remove(keys, True) == [0] * keys_per_round
        finally:
            s.unregister_buffer(pool.ptr)
            alloc.free(pool.ptr)
        return bad

    assert both(pair, rounds_of) == []


def _replica_facts(replicas: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for r in replicas:
        row: tuple[Any, ...] = (r.is_memory_replica(), r.is_disk_replica(), int(r.status))
        if r.is_memory_replica():
            d = r.get_memory_descriptor().buffer_descriptor
            row += (d.size, d.buffer_address, d.transport_endpoint)
        out.append(row)
    return out


def test_replica_descriptors_of_a_dummy_answer_as_mooncakes(pair: dict[str, Any]) -> None:
    """Through the service (DummyClient's own batch_get_replica_desc), no admin URL.  With
    0.3.13.post1 the service gives a dummy client no descriptors: both answer {} and []."""
    theirs, ours = pair["theirs"][0], pair["ours"][0]
    keys = [tag("dummy-desc") for _ in range(3)]
    for i, k in enumerate(keys):
        assert theirs.put(k, bytes([i + 1]) * (2048 + i)) == 0
    asked = [keys[0], tag("dummy-desc-missing"), keys[1], keys[2]]
    try:
        real, mine = theirs.batch_get_replica_desc(asked), ours.batch_get_replica_desc(asked)
        assert sorted(mine) == sorted(real)
        assert {k: _replica_facts(v) for k, v in mine.items()} == {
            k: _replica_facts(v) for k, v in real.items()
        }
        for k in asked:
            assert _replica_facts(ours.get_replica_desc(k)) == _replica_facts(
                theirs.get_replica_desc(k)
            )
    finally:
        assert theirs.batch_remove(keys, True) == [0, 0, 0]


def test_alloc_from_mem_pool_answers_as_mooncakes(
    pair: dict[str, Any], local: LocalCluster
) -> None:
    def pooled(s: Any, alloc: Any, n: str) -> list[Any]:
        ptr = s.alloc_from_mem_pool(PAGE)
        out: list[Any] = [ptr != 0, s.register_buffer(ptr, PAGE)]
        key = tag(f"mp-{n}")
        ctypes.memset(ptr, 0x5A, PAGE)
        out += [s.put_from(key, ptr, PAGE), s.get(key) == b"\x5a" * PAGE, s.remove(key, True)]
        out += [s.unregister_buffer(ptr), alloc.free(ptr)]
        return out

    assert both(pair, pooled) == [True, 0, 0, True, 0, 0, 0]
    # A client of its own (RealClient): Mooncake answers 0
    real = {"theirs": ms.MooncakeDistributedStore(), "ours": ours_module.MooncakeDistributedStore()}
    try:
        for s in real.values():
            assert s.setup(*setup_args(local)) == 0
        assert [s.alloc_from_mem_pool(PAGE) for s in real.values()] == [0, 0]
    finally:
        for s in real.values():
            s.close()
    # Not set up: Mooncake's crashes the process; the drop-in answers 0
    assert ours_module.MooncakeDistributedStore().alloc_from_mem_pool(PAGE) == 0


def test_the_allocator_needs_no_store() -> None:
    for alloc in (ms.MooncakeHostMemAllocator(), ours_module.MooncakeHostMemAllocator()):
        ptr = alloc.alloc(PAGE)
        assert ptr and ptr % 4096 == 0
        ctypes.memset(ptr, 1, PAGE)  # mapped, writable
        assert [alloc.free(ptr), alloc.free(ptr)] == [0, -1]
        assert alloc.free(12345) == -1


def test_no_service_answers_minus_one() -> None:
    s = ours_module.MooncakeDistributedStore()
    began = time.monotonic()
    assert s.setup_dummy(0, 16 * MIB, "127.0.0.1:1") == -1  # nothing listens on port 1
    assert time.monotonic() - began < 3  # (Mooncake's own takes about 4 s to say so)
    assert s.setup_dummy(0, 16 * MIB, "no-port") == -1
    assert s.client is None and s.get("k") == b"" and s.is_exist("k") < 0
    with pytest.raises(TypeError, match="mem_pool_size"):
        s.setup_dummy(-1, 0, "127.0.0.1:1")
    with pytest.raises(TypeError):
        ms.MooncakeDistributedStore().setup_dummy(-1, 0, "127.0.0.1:1")


def test_the_dummy_replaces_a_real_setup(local: LocalCluster) -> None:
    s = ours_module.MooncakeDistributedStore()
    assert s.setup(*setup_args(local)) == 0
    try:
        key = tag("was-real")
        assert s.put(key, b"r") == 0
        assert s.setup_dummy(0, 16 * MIB, service_address(local)) == 0
        assert s.get(key) == b"r" and s.remove(key, True) == 0
        assert s.put(key, b"d" * 10) == 0 and s.get(key) == b"d" * 10
        assert s.remove(key, True) == 0
    finally:
        s.close()


# ---------------------------------------------------------------- the C calls' misuse


def test_create_dummy_refuses_bad_arguments_with_a_message() -> None:
    capi.ensure_mooncake_loaded()
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create_dummy(ffi.NULL, 0, 0, b"127.0.0.1:1", ffi.NULL, -1) == (
        E_INVALID_ARG
    )
    assert lib.mcs_client_create_dummy(out, 0, 0, ffi.NULL, ffi.NULL, -1) == E_INVALID_ARG
    for bad, why in ((b"", "empty"), (b"host", "not host:port"), (b"h:0", "not 1..65535"),
                     (b"h:99999", "not 1..65535"), (b"a b:1", "white space")):  # fmt: skip
        assert lib.mcs_client_create_dummy(out, 0, 0, bad, ffi.NULL, -1) == E_INVALID_ARG, bad
        assert why in capi.last_error() and out[0] == ffi.NULL
    rc = lib.mcs_client_create_dummy(out, 0, 0, b"127.0.0.1:1", ffi.NULL, 500)
    assert rc == lib.MCS_E_UNREACHABLE and "127.0.0.1:1" in capi.last_error()
    assert out[0] == ffi.NULL


def test_shm_calls_refuse_misuse() -> None:
    capi.ensure_mooncake_loaded()
    ptr = ffi.new("void **")
    assert lib.mcs_shm_alloc(ffi.NULL, 4096) == E_INVALID_ARG
    assert lib.mcs_shm_alloc(ptr, 0) == E_INVALID_ARG and ptr[0] == ffi.NULL
    assert lib.mcs_shm_free(ffi.NULL) == E_INVALID_ARG
    assert lib.mcs_shm_alloc(ptr, 8192) == 0 and ptr[0] != ffi.NULL
    inside = ffi.cast("char *", ptr[0]) + 4096
    assert lib.mcs_shm_free(inside) == E_INVALID_ARG  # not a segment's start: nothing freed
    assert "not the start" in capi.last_error()
    assert lib.mcs_shm_free(ptr[0]) == 0
    assert lib.mcs_shm_free(ptr[0]) == E_INVALID_ARG
