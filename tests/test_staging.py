"""Staging: bytes through a registered L1 region, against a real cluster over tcp."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mooncake_cffi import (
    EXISTED,
    Client,
    ClosedError,
    InvalidArgumentError,
    MooncakeTimeoutError,
)
from mooncake_cffi.staging import Staging

KIB = 1024
WAIT = 30.0  # seconds any thread of a test may take before the test fails


@pytest.fixture
def l1() -> np.ndarray:
    return np.zeros(256 * KIB, dtype=np.uint8)


@pytest.fixture
def client(cluster_config: dict[str, Any], l1: np.ndarray) -> Iterator[Client]:
    with Client(cluster_config, l1=l1, register_l1=True) as c:
        assert c.l1_registered
        yield c


@pytest.fixture
def prefix() -> str:
    return f"stg-{uuid.uuid4().hex[:12]}/"


def values_of(n: int, size: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


class Spy:
    """A real client whose put_from / get_into / size calls are recorded, optionally paused."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.l1_blocks = client.l1_blocks
        self.puts: list[int] = []
        self.gets: list[int] = []
        self.inside = threading.Event()
        self.go_on: threading.Event | None = None
        self.shrink_sizes_once = False

    def put_from(self, keys: list[Any], bufs: list[Any], **options: Any) -> list[int]:
        self.puts.append(len(keys))
        self.inside.set()
        if self.go_on is not None:
            assert self.go_on.wait(WAIT)
        return self.client.put_from(keys, bufs, **options)

    def get_into(self, keys: list[Any], bufs: list[Any], **options: Any) -> list[int]:
        self.gets.append(len(keys))
        return self.client.get_into(keys, bufs, **options)

    def size(self, key: Any, **options: Any) -> int | None:
        n = self.client.size(key, **options)
        if self.shrink_sizes_once and n is not None:
            self.shrink_sizes_once = False
            return n // 2  # as if a larger value replaced it after sizing
        return n


# ------------------------------------------------------------------ round trips


def test_bytes_round_trip_through_an_l1_registered_tcp_client(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    st = Staging(client, l1)
    keys = [f"{prefix}{i}" for i in range(8)]
    values = values_of(8, 10 * KIB)
    assert st.put(keys, values) == [0] * 8
    assert st.get(keys) == values
    assert st.get([prefix + "missing", keys[3]]) == [None, values[3]]
    assert st.in_use == 0


def test_put_accepts_any_bytes_like_value(client: Client, l1: np.ndarray, prefix: str) -> None:
    st = Staging(client, l1)
    arr = np.arange(1000, dtype=np.float64)
    values = [bytearray(b"ba"), memoryview(b"mv"), arr, np.asfortranarray(np.ones((3, 4)))]
    keys = [f"{prefix}{i}" for i in range(4)]
    assert st.put(keys, values) == [0] * 4
    got = st.get(keys)
    assert got[:2] == [b"ba", b"mv"]
    assert got[2] == arr.tobytes()
    assert got[3] == np.ones((3, 4)).tobytes()


def test_skip_existing_and_upsert_reach_mooncake(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    st = Staging(client, l1)
    k = prefix + "k"
    assert st.put([k], [b"first"]) == [0]
    assert st.put([k], [b"second"], skip_existing=True) == [EXISTED]
    assert st.get([k]) == [b"first"]
    assert st.put([k], [b"third"], upsert=True) == [0]
    assert st.get([k]) == [b"third"]


def test_a_batch_larger_than_the_area_moves_in_rounds_in_key_order(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    spy = Spy(client)
    st = Staging(spy, l1, offset=0, size=64 * KIB)
    keys = [f"{prefix}{i}" for i in range(10)]
    values = values_of(10, 20 * KIB, seed=1)
    assert st.put(keys, values) == [0] * 10
    assert spy.puts == [3, 3, 3, 1]  # 3 x 20 KiB fit 64 KiB
    assert st.get(keys) == values
    assert spy.gets == [3, 3, 3, 1]
    assert client.batch_exists(keys) == [True] * 10


def test_a_slice_of_l1_leaves_the_rest_of_the_region_untouched(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    l1[:] = 0xAB
    st = Staging(client, l1, offset=64 * KIB, size=64 * KIB)
    keys = [f"{prefix}{i}" for i in range(6)]
    values = values_of(6, 30 * KIB, seed=2)
    assert st.put(keys, values) == [0] * 6
    assert st.get(keys) == values
    assert (l1[: 64 * KIB] == 0xAB).all() and (l1[128 * KIB :] == 0xAB).all()


def test_slots_never_cross_an_l1_block_boundary(
    cluster_config: dict[str, Any], l1: np.ndarray, prefix: str
) -> None:
    with Client(cluster_config, l1=l1, register_l1=True, l1_block_size=64 * KIB) as c:
        assert c.l1_blocks == 4
        with pytest.raises(ValueError, match="block_size"):
            Staging(c, l1)
        st = Staging(c, l1, block_size=64 * KIB)
        assert st.max_value_bytes == 64 * KIB
        keys = [f"{prefix}{i}" for i in range(12)]
        values = values_of(12, 40 * KIB, seed=3)  # 40 KiB pieces would straddle blocks if packed
        assert st.put(keys, values) == [0] * 12
        assert st.get(keys) == values
        with pytest.raises(InvalidArgumentError, match="65536-byte L1 block"):
            st.put([prefix + "big"], [bytes(64 * KIB + 1)])


# ------------------------------------------------------------------ refusals


def test_a_value_larger_than_a_slot_is_refused_before_anything_is_sent(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    st = Staging(client, l1, size=32 * KIB)
    small, huge = prefix + "small", prefix + "huge"
    with pytest.raises(InvalidArgumentError, match=r"value #1 .* 40960 bytes: larger than"):
        st.put([small, huge], [b"s", bytes(40 * KIB)])
    assert client.batch_exists([small, huge]) == [False, False]


def test_a_stored_value_larger_than_a_slot_is_refused_on_get(
    cluster_config: dict[str, Any], client: Client, l1: np.ndarray, prefix: str
) -> None:
    with Client(cluster_config) as plain:  # no L1: stores bytes directly
        plain.put(prefix + "big", bytes(100 * KIB))
    st = Staging(client, l1, size=64 * KIB)
    with pytest.raises(InvalidArgumentError, match="stored value #0 .* 102400 bytes"):
        st.get([prefix + "big"])


def test_bad_arguments_get_errors_that_name_them(client: Client, l1: np.ndarray) -> None:
    st = Staging(client, l1)
    with pytest.raises(InvalidArgumentError, match="value #0 .* is empty"):
        st.put(["k"], [b""])
    with pytest.raises(InvalidArgumentError, match="2 keys but 1 values"):
        st.put(["a", "b"], [b"1"])
    with pytest.raises(TypeError, match="value #0 must be a bytes-like object, not int"):
        st.put(["a"], [5])
    with pytest.raises(TypeError, match="single str"):
        st.get("abc")
    with pytest.raises(InvalidArgumentError, match="empty batch"):
        st.get([])
    with pytest.raises(ValueError, match="inside l1"):
        Staging(client, l1, offset=200 * KIB, size=100 * KIB)
    with pytest.raises(ValueError, match="read-only"):
        Staging(client, b"immutable")
    with pytest.raises(TypeError, match="writable buffer"):
        Staging(client, 12)


# ------------------------------------------------------------------ concurrency


def test_concurrent_callers_get_disjoint_slots(client: Client, l1: np.ndarray, prefix: str) -> None:
    st = Staging(client, l1, size=128 * KIB)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for r in range(6):
                keys = [f"{prefix}t{t}r{r}k{i}" for i in range(3)]
                values = values_of(3, 24 * KIB + 7 * t, seed=100 * t + r)
                assert st.put(keys, values) == [0, 0, 0]
                assert st.get(keys) == values
                assert st.in_use <= st.capacity
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(WAIT)
    assert not any(th.is_alive() for th in threads)
    assert errors == []
    assert st.in_use == 0


def test_a_caller_waits_for_space_and_times_out_when_none_frees(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    spy = Spy(client)
    spy.go_on = threading.Event()
    st = Staging(spy, l1, size=64 * KIB)
    holder = threading.Thread(target=st.put, args=([prefix + "a"], [bytes(60 * KIB)]))
    holder.start()
    try:
        assert spy.inside.wait(WAIT)  # the holder is inside put_from with 60 KiB taken
        with pytest.raises(MooncakeTimeoutError, match="L1 staging space"):
            st.put([prefix + "b"], [bytes(10 * KIB)], timeout=0.2)
        result: list[Any] = []
        waiter = threading.Thread(
            target=lambda: result.append(st.put([prefix + "c"], [b"c" * 10 * KIB], timeout=WAIT))
        )
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # still waiting for space
        spy.go_on.set()
        waiter.join(WAIT)
        assert result == [[0]]
    finally:
        spy.go_on.set()
        holder.join(WAIT)
    assert st.get([prefix + "a", prefix + "c"]) == [bytes(60 * KIB), b"c" * 10 * KIB]


def test_a_value_that_grew_between_sizing_and_reading_is_read_again(
    client: Client, l1: np.ndarray, prefix: str
) -> None:
    spy = Spy(client)
    st = Staging(spy, l1)
    value = values_of(1, 5000, seed=9)[0]
    assert st.put([prefix + "g"], [value]) == [0]
    spy.shrink_sizes_once = True
    assert st.get([prefix + "g"]) == [value]
    assert spy.gets == [1, 1]


def test_close_releases_the_view_of_l1_and_refuses_later_calls(
    cluster_config: dict[str, Any], prefix: str
) -> None:
    region = bytearray(64 * KIB)
    with Client(cluster_config) as plain:  # over tcp staging works without registration too
        st = Staging(plain, region)
        assert st.put([prefix + "m"], [b"x"]) == [0]
        st.close()
        st.close()
        with pytest.raises(ClosedError):
            st.get([prefix + "m"])
    region.extend(b"!")  # a bytearray with a live view could not be resized


def test_default_block_size_follows_mc_max_mr_size(
    cluster_config: dict[str, Any], l1: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "MC_MAX_MR_SIZE", str(100 * KIB))
    with Client(cluster_config, l1=l1, register_l1=True) as c:
        assert c.l1_blocks == 3
        assert Staging(c, l1).max_value_bytes == 100 * KIB
