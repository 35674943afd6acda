"""Verified values (the ``integrity`` config key) against a real local cluster: round trips
of every API, sizes without the trailer, values written without one refused, and a value
torn by an upsert in another process never returned as good."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import random
import time
import traceback
import uuid
from typing import Any

import numpy as np
import pytest

from mooncake_cffi import AsyncClient, Client, IntegrityError, InvalidArgumentError, StoreConfig
from mooncake_cffi.integrity import TRAILER_SIZE, integrity_stats
from mooncake_cffi.status import MCS_E_CORRUPT

MIB = 1 << 20
SIZES = [1, 100, 4096, 300 * 1024, 2 * MIB + 3]


def unique(prefix: str = "integ") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def value_of(size: int, seed: int = 0) -> bytes:
    return (np.arange(size, dtype=np.uint64) * 2654435761 + seed).astype(np.uint8).tobytes()


@pytest.fixture(scope="module")
def verifying(cluster: Any) -> Any:
    with Client(cluster.client_config(num_workers=2, integrity="crc32c")) as c:
        yield c


@pytest.fixture(scope="module")
def plain(cluster: Any) -> Any:
    with Client(cluster.client_config(num_workers=2)) as c:
        yield c


def test_bytes_api_round_trips_with_the_values_own_sizes(verifying: Client, plain: Client) -> None:
    keys = [unique() for _ in SIZES]
    values = [value_of(n, i) for i, n in enumerate(SIZES)]
    for k, v in zip(keys, values):
        verifying.put(k, v)
        assert verifying.get(k) == v
        assert verifying.size(k) == len(v)
        assert plain.size(k) == len(v) + TRAILER_SIZE  # what a client without it sees
    assert verifying.batch_get(keys) == values
    assert verifying.batch_size(keys) == [len(v) for v in values]
    newer = [value_of(n, 99) for n in SIZES]
    verifying.batch_upsert(keys, newer)
    assert verifying.batch_get(keys) == newer
    verifying.upsert(keys[0], b"x")
    assert verifying.get(keys[0]) == b"x"
    raw = plain.get(keys[1])
    assert raw is not None and raw[: len(newer[1])] == newer[1]
    assert raw[len(newer[1]) : len(newer[1]) + 4] == b"MCI2"
    verifying.batch_remove(keys, force=True)


def test_another_keys_whole_value_under_a_key_does_not_verify(
    verifying: Client, plain: Client
) -> None:
    """A late write can land a whole value of one key, bytes and trailer, in memory since
    handed to another (docs/guide/failures.md): its CRC covers its key, so the other key's
    read fails instead of returning it; a value written with a version-1 trailer (the
    value's CRC alone, before the key was bound in) still reads."""
    a, b = unique("bound-a"), unique("bound-b")
    verifying.put(b, value_of(300 * 1024, 5))
    whole = plain.get(b)  # the value and its trailer, as stored
    assert whole is not None and whole[-TRAILER_SIZE:][:4] == b"MCI2"
    plain.put(a, whole)
    with pytest.raises(IntegrityError):
        verifying.get(a)
    assert verifying.get(b) == value_of(300 * 1024, 5)
    # version 1: magic MCI1, the CRC32C of the value alone, a nonce
    v1 = unique("v1")
    value = value_of(4096, 7)
    trailer = b"MCI1" + crc32c(value).to_bytes(4, "little") + (42).to_bytes(8, "little")
    plain.put(v1, value + trailer)
    assert verifying.get(v1) == value
    verifying.batch_remove([a, b, v1], force=True)


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli, reflected), bit by bit: the trailer's checksum, for a test."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_put_if_absent_and_skip_existing_tell_the_first_writer(verifying: Client) -> None:
    k = unique()
    assert verifying.put_if_absent(k, value_of(MIB, 1))
    assert not verifying.put_if_absent(k, value_of(MIB, 2))
    assert verifying.get(k) == value_of(MIB, 1)
    other = unique()
    assert verifying.batch_put([k, other], [b"a" * 10, b"b" * 10], skip_existing=True) == [1, 0]
    assert verifying.get(other) == b"b" * 10
    verifying.batch_remove([k, other], force=True)


def test_zero_copy_calls_round_trip(verifying: Client) -> None:
    keys = [unique() for _ in SIZES]
    values = [np.frombuffer(value_of(n, 5), dtype=np.uint8) for n in SIZES]
    assert verifying.put_from(keys, values) == [0] * len(keys)
    exact = [np.zeros(n, dtype=np.uint8) for n in SIZES]
    assert verifying.get_into(keys, exact) == SIZES
    larger = [np.zeros(n + 64, dtype=np.uint8) for n in SIZES]
    assert verifying.get_into(keys, larger) == SIZES
    for v, a, b in zip(values, exact, larger):
        assert np.array_equal(v, a) and np.array_equal(v, b[: len(v)])
    just_short = [np.zeros(n + 8, dtype=np.uint8) for n in SIZES]  # value < cap < value + 16
    assert verifying.get_into(keys, just_short) == SIZES
    small = np.zeros(SIZES[-1] - 1, dtype=np.uint8)
    assert verifying.get_into([keys[-1]], [small]) == [-600]
    # Multi-part: two parts written as one value, read back into two parts.
    k = unique()
    a, b = value_of(1000, 1), value_of(3000, 2)
    assert verifying.put_from([k], [[a, b]]) == [0]
    pa, pb = bytearray(1000), bytearray(3000)
    assert verifying.get_into([k], [[pa, pb]]) == [4000]
    assert bytes(pa) + bytes(pb) == a + b
    verifying.batch_remove([*keys, k], force=True)


def test_async_client_round_trips(cluster: Any) -> None:
    async def main() -> None:
        async with AsyncClient(cluster.client_config(integrity="crc32c")) as c:
            k = unique()
            v = value_of(MIB, 3)
            await c.put(k, v)
            assert await c.get(k) == v
            assert await c.size(k) == MIB
            buf = bytearray(MIB)
            assert await c.get_into([k], [buf]) == [MIB]
            assert bytes(buf) == v
            await c.batch_upsert([k], [b"new"])
            assert await c.batch_get([k]) == [b"new"]
            await c.remove(k, force=True)

    asyncio.run(main())


def test_l1_staging_round_trips(cluster: Any) -> None:
    l1 = bytearray(8 * MIB)
    config = cluster.client_config(integrity="crc32c")
    with Client(config, l1=l1, register_l1=True) as c:
        keys = [unique() for _ in range(3)]
        values = [value_of(n, 7) for n in (10, 100_000, MIB)]
        c.batch_put(keys, values)
        assert c.batch_get(keys) == values
        assert c.get(keys[2]) == values[2]
        c.batch_remove(keys, force=True)


def test_a_value_written_without_a_trailer_raises(verifying: Client, plain: Client) -> None:
    k = unique()
    plain.put(k, value_of(5000))
    before = integrity_stats(verifying)
    with pytest.raises(IntegrityError) as info:
        verifying.get(k)
    assert info.value.code == MCS_E_CORRUPT
    with pytest.raises(IntegrityError):
        verifying.batch_get([k])
    assert verifying.get_into([k], [bytearray(5000)]) == [MCS_E_CORRUPT]
    after = integrity_stats(verifying)
    assert after["enabled"] and after["failed"] >= before["failed"] + 3
    tiny = unique()
    plain.put(tiny, b"abc")  # shorter than any trailer
    with pytest.raises(IntegrityError):
        verifying.size(tiny)
    plain.batch_remove([k, tiny], force=True)


def test_a_value_overwritten_by_mooncakes_own_client_raises(
    cluster: Any, verifying: Client
) -> None:
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(
        "127.0.0.1", cluster.metadata_server, 0, 16 * MIB, "tcp", "", cluster.master_addr
    )
    assert rc == 0
    try:
        k = unique()
        verifying.put(k, value_of(1000))
        seen = store.get(k)
        assert len(seen) == 1000 + TRAILER_SIZE and seen[1000:1004] == b"MCI2"
        assert store.upsert(k, value_of(1000, 1)) == 0
        with pytest.raises(IntegrityError):
            verifying.get(k)
    finally:
        store.close()


def test_lmcache_adapter_params_keep_integrity_for_the_client() -> None:
    from mooncake_cffi.lmcache import parse_adapter_params

    params = parse_adapter_params(
        {"local_hostname": "h", "metadata_server": "http://h:1/m", "integrity": "crc32c"}
    )
    assert params.store.integrity == "crc32c"


def test_an_unknown_integrity_mode_is_refused(cluster: Any) -> None:
    with pytest.raises((ValueError, InvalidArgumentError)):
        Client(cluster.client_config(integrity="md5"))
    config = StoreConfig.from_dict(cluster.client_config(integrity="crc32c"))
    assert config.integrity == "crc32c"
    assert StoreConfig.from_dict(cluster.client_config()).integrity == "none"


# ------------------------------------------------------------------- torn reads

TORN_SIZE = 8 * MIB
FILLS = (0x11, 0xEE)


def _upserter(config: dict[str, Any], key: str, seconds: float, ready: Any, out: Any) -> None:
    try:
        values = [bytes([f]) * TORN_SIZE for f in FILLS]
        with Client(config) as c:
            c.upsert(key, values[0])
            ready.set()
            n, end = 0, time.monotonic() + seconds
            while time.monotonic() < end:
                c.upsert(key, values[n % 2])
                n += 1
                time.sleep(random.choice((0, 0, 0.002, 0.008)))  # some reads land between
        out.put((n, None))
    except BaseException:
        out.put((0, traceback.format_exc()))


def _read_while_upserted(cluster: Any, integrity: str, reads: int) -> dict[str, int]:
    """Reads of a key another process upserts, until ``reads`` of them returned bytes (or
    a typed error) or 60 s passed; Mooncake's -703 while a new replica is written is counted
    apart ("unready")."""
    extra = {"integrity": integrity} if integrity != "none" else {}
    config = cluster.client_config(**extra)
    key = unique("torn")
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_upserter, args=(config, key, 60.0, ready, out))
    proc.start()
    # unready: Mooncake's -703 REPLICA_IS_NOT_READY while an upsert writes a new replica
    counts = {"reads": 0, "good": 0, "torn": 0, "errors": 0, "unready": 0, "retried": 0}
    try:
        assert ready.wait(60), "the upserting process did not start"
        buf = np.zeros(TORN_SIZE, dtype=np.uint8)
        with Client(config) as c:
            end = time.monotonic() + 60
            while counts["reads"] - counts["unready"] < reads and time.monotonic() < end:
                counts["reads"] += 1
                try:
                    got = c.get_into([key], [buf])[0]
                except IntegrityError:
                    got = MCS_E_CORRUPT
                if got == MCS_E_CORRUPT:
                    counts["errors"] += 1
                    continue
                if got < 0:
                    assert got == -703, got
                    counts["unready"] += 1
                    continue
                assert got == TORN_SIZE, got
                first = int(buf[0])
                if first in FILLS and not np.any(buf != first):
                    counts["good"] += 1
                else:
                    counts["torn"] += 1
            if integrity != "none":
                counts["retried"] = int(integrity_stats(c)["retried"])
            proc.terminate()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    print(f"\ntorn-read scenario, integrity={integrity}: {counts}")
    return counts


@pytest.mark.slow
def test_torn_reads_never_return_as_good_with_integrity(cluster: Any) -> None:
    counts = _read_while_upserted(cluster, "crc32c", 150)
    assert counts["reads"] - counts["unready"] >= 100
    assert counts["torn"] == 0
    assert counts["good"] + counts["errors"] + counts["unready"] == counts["reads"]
    assert counts["good"] > 0


@pytest.mark.slow
def test_torn_reads_happen_without_integrity(cluster: Any) -> None:
    counts = _read_while_upserted(cluster, "none", 150)
    assert counts["good"] + counts["torn"] + counts["unready"] == counts["reads"]  # 0 torn: ok


# ---------------------------------------------------------------- other front ends


def test_mcl2_integrity_option_round_trips_and_refuses_unverified(
    cluster: Any, plain: Client, tmp_path: Any
) -> None:
    from click.testing import CliRunner
    from mooncake_cffi.cli import cli

    env = {
        "MCL2_MASTER": cluster.master_addr,
        "MCL2_METADATA_SERVER": cluster.metadata_server,
        "MCL2_STATE_DIR": str(tmp_path / "no-state"),
    }
    runner = CliRunner()
    k = unique()
    data = value_of(300_000, 4)
    put = runner.invoke(cli, ["--integrity", "crc32c", "put", k, "-"], input=data, env=env)
    assert put.exit_code == 0, put.output
    got = runner.invoke(cli, ["--integrity", "crc32c", "get", k], env=env)
    assert got.exit_code == 0 and got.stdout_bytes == data
    assert plain.size(k) == len(data) + TRAILER_SIZE
    raw = unique()
    plain.put(raw, data)
    bad = runner.invoke(cli, ["get", raw], env={**env, "MCL2_INTEGRITY": "crc32c"})
    assert bad.exit_code != 0 and "CORRUPT" in bad.output
    plain.batch_remove([k, raw], force=True)


def test_lmcache_adapter_params_integrity_round_trips(cluster: Any, plain: Client) -> None:
    import ctypes

    from mooncake_cffi.lmcache import MooncakeConnector

    prefix = f"{unique('lmc')}/"
    conn = MooncakeConnector(**cluster.client_config(integrity="crc32c"), key_prefix=prefix)
    try:
        ks = [f"org/model@00000000@0@{i:032x}" for i in range(3)]
        data = [value_of(4096 + i, i) for i in range(3)]
        srcs = [memoryview((ctypes.c_ubyte * len(d)).from_buffer_copy(d)) for d in data]
        dsts = [memoryview((ctypes.c_ubyte * len(d))()) for d in data]

        def wait(task: int) -> tuple[Any, ...]:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                for item in conn.drain_completions():
                    if item[0] == task:
                        return tuple(item)
                time.sleep(0.005)
            raise AssertionError("no completion")

        assert wait(conn.submit_batch_set(ks, srcs))[1] is True
        load = wait(conn.submit_batch_get(ks, dsts))
        assert load[1] is True and load[3] == [True, True, True]
        assert [bytes(b) for b in dsts] == data
        assert plain.size(prefix + ks[0]) == len(data[0]) + TRAILER_SIZE
    finally:
        conn.close()


def test_the_drop_in_store_passes_integrity_through(
    cluster: Any, plain: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mooncake_cffi.store import MooncakeDistributedStore

    monkeypatch.setenv("MOONCAKE_CFFI_STORE_OPTIONS", '{"integrity": "crc32c"}')
    store = MooncakeDistributedStore()
    assert (
        store.setup(
            "127.0.0.1", cluster.metadata_server, 0, 16 * MIB, "tcp", "", cluster.master_addr
        )
        == 0
    )
    try:
        k = unique()
        v = value_of(70_000, 8)
        assert store.put(k, v) == 0
        assert store.get(k) == v
        assert store.get_size(k) == len(v)
        assert plain.size(k) == len(v) + TRAILER_SIZE
        raw = unique()
        plain.put(raw, v)
        assert store.get(raw) == b""  # Mooncake's answer for a read that failed
        plain.batch_remove([k, raw], force=True)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("size", [8, MIB], ids=["8B", "1MiB"])
def test_processes_racing_put_if_absent_with_integrity_have_one_winner(
    cluster_config: dict[str, Any], size: int
) -> None:
    """The race of tests/test_races.py with the shim telling winners from the nonces."""
    from test_races import test_processes_racing_put_if_absent_have_one_winner_per_key as race

    race({**cluster_config, "integrity": "crc32c"}, size)


def test_async_and_l1_reads_of_an_unverified_value_raise(cluster: Any, plain: Client) -> None:
    k = unique()
    plain.put(k, value_of(20_000))
    config = cluster.client_config(integrity="crc32c")

    async def main() -> None:
        async with AsyncClient(config) as c:
            with pytest.raises(IntegrityError):
                await c.get(k)
            with pytest.raises(IntegrityError):
                await c.batch_get([k])

    asyncio.run(main())
    with Client(config, l1=bytearray(4 * MIB), register_l1=True) as staged:
        with pytest.raises(IntegrityError):
            staged.get(k)
    plain.remove(k, force=True)


def _drop_in(cluster: Any, monkeypatch: pytest.MonkeyPatch, integrity: str) -> Any:
    """A drop-in store of ``cluster`` (contributing no memory) with ``integrity`` on or off."""
    from mooncake_cffi.store import MooncakeDistributedStore

    monkeypatch.setenv("MOONCAKE_CFFI_STORE_OPTIONS", f'{{"integrity": "{integrity}"}}')
    store = MooncakeDistributedStore()
    rc = store.setup(
        "127.0.0.1", cluster.metadata_server, 0, 16 * MIB, "tcp", "", cluster.master_addr
    )
    assert rc == 0
    return store


def test_byte_ranges_past_a_values_own_end_answer_as_without_integrity(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each range is checked against the value's own size: past it, -600 and nothing read,
    as the same bytes stored without integrity answer; never the trailer as data."""
    import ctypes

    stores = {
        "verifying": _drop_in(cluster, monkeypatch, "crc32c"),
        "plain": _drop_in(cluster, monkeypatch, "none"),
    }
    try:
        answers = {}
        for name, s in stores.items():
            k, none = unique(), unique()
            assert s.put(k, b"0123456789abcdef") == 0  # 16 bytes
            mem = ctypes.create_string_buffer(128)
            ptr = ctypes.addressof(mem)
            assert s.register_buffer(ptr, 128) == 0
            ranges = [
                # (dst, src, size): past the end, the whole value, an empty range at the end,
                # past the end by one, the last byte, a range that starts past the end
                (0, 10, 16),
                (20, 0, 16),
                (40, 16, 0),
                (41, 17, 0),
                (42, 15, 1),
                (50, 16, 16),
            ]
            got = s.get_into_ranges(
                [ptr],
                [[k, none]],
                [[[r[0] for r in ranges], [60]]],
                [[[r[1] for r in ranges], [0]]],
                [[[r[2] for r in ranges], [4]]],
            )
            answers[name] = (got, mem.raw, s.get_size(k))
            s.unregister_buffer(ptr)
            s.remove(k, True)
        assert answers["verifying"] == answers["plain"]
        got, raw, size = answers["verifying"]
        assert got == [[[-600, 16, 0, -600, 1, -600], [-704]]] and size == 16
        assert raw[20:36] == b"0123456789abcdef" and raw[42:43] == b"f"
        assert b"MCI2" not in raw and raw[:20] == bytes(20)
    finally:
        for s in stores.values():
            s.close()


def test_sizes_of_a_value_without_a_trailer_are_refused_on_every_path(
    cluster: Any, verifying: Client, plain: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A value written without the option is refused by every size call as its reads are
    (not reported 16 bytes short), whatever its length; values written with it size true."""
    from click.testing import CliRunner
    from mooncake_cffi.cli import cli

    raw = {n: unique() for n in (1000, 16, 17, 3)}
    for n, k in raw.items():
        plain.put(k, value_of(n))
    good = unique()
    verifying.put(good, value_of(1000))
    for k in raw.values():
        with pytest.raises(IntegrityError):
            verifying.get(k)
        with pytest.raises(IntegrityError):
            verifying.size(k)
        with pytest.raises(IntegrityError):
            verifying.batch_size([good, k])
    assert verifying.size(good) == 1000 and verifying.batch_size([good]) == [1000]

    async def sizes() -> None:
        async with AsyncClient(cluster.client_config(integrity="crc32c")) as c:
            assert await c.size(good) == 1000
            with pytest.raises(IntegrityError):
                await c.size(raw[1000])
            with pytest.raises(IntegrityError):
                await c.batch_size([raw[16]])

    asyncio.run(sizes())
    store = _drop_in(cluster, monkeypatch, "crc32c")
    try:
        assert store.get_size(good) == 1000
        for k in raw.values():
            assert store.get_size(k) == MCS_E_CORRUPT
            assert store.get(k) == b""
    finally:
        store.close()
    env = {
        "MCL2_MASTER": cluster.master_addr,
        "MCL2_METADATA_SERVER": cluster.metadata_server,
        "MCL2_STATE_DIR": str(tmp_path / "no-state"),
    }
    runner = CliRunner()
    ok = runner.invoke(cli, ["--integrity", "crc32c", "stat", good], env=env)
    assert ok.exit_code == 0 and ok.stdout == f"{good}\t1000\n", ok.output
    bad = runner.invoke(cli, ["--integrity", "crc32c", "stat", raw[1000]], env=env)
    # Not reported 16 bytes short (984); the random key itself may hold those digits.
    shown = bad.output.replace(raw[1000], "")
    assert bad.exit_code == 1 and "CORRUPT" in bad.output and "984" not in shown
    plain.batch_remove([*raw.values(), good], force=True)
