"""AsyncClient answers as Client does: large gets, racing skip-existing puts, retries,
aclose with work in flight, and the calls Client has (size, lookup_prefix, put_if_absent,
batch_upsert, stats)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import pytest

from mooncake_cffi import EXISTED, AsyncClient, Client, RetryPolicy

MIB = 1 << 20


def unique(tag: str = "k") -> str:
    return f"aio-{tag}-{uuid.uuid4().hex[:10]}"


def test_a_get_larger_than_mooncakes_local_buffer_returns_the_value(
    cluster_config: dict[str, Any],
) -> None:
    """Before: TypeError "buffer #0 must be a writable buffer, not bytes" for values over
    the 16 MiB local buffer (the plan's own bytes buffers were asked to be writable)."""
    value = os.urandom(20 * MIB)

    async def main() -> None:
        async with AsyncClient(cluster_config) as ac:
            key = unique("big")
            await ac.put(key, value)
            assert await ac.get(key) == value
            assert await ac.batch_get([key, unique("none")]) == [value, None]
            await ac.remove(key, force=True)

    asyncio.run(main())


def test_racing_skip_existing_puts_have_exactly_one_winner(cluster_config: dict[str, Any]) -> None:
    """Before: with 4 concurrent puts of one key, several were told "written" in 30 of 30
    trials (no first-writer check on the async path)."""

    async def main() -> None:
        async with AsyncClient(cluster_config) as ac:
            for trial in range(30):
                key = unique(f"race{trial}")
                values = [bytes([w]) * (64 * 1024) for w in range(1, 5)]
                results = await asyncio.gather(
                    *(ac.batch_put([key], [v], skip_existing=True) for v in values)
                )
                codes = [r[0] for r in results]
                assert sorted(codes) == [0, EXISTED, EXISTED, EXISTED], (trial, codes)
                winner = values[codes.index(0)]
                assert await ac.get(key) == winner
                flags = await asyncio.gather(
                    *(ac.put_if_absent(key, v) for v in values)  # all lose now
                )
                assert flags == [False] * 4

    asyncio.run(main())


def test_retry_policy_applies_to_async_calls(make_cluster: Any) -> None:
    """Before: AsyncClient(retry=RetryPolicy(...)) accepted the policy and never retried (an
    async put that failed with NO_AVAILABLE_HANDLE returned in 0.03 s).  On a cluster of its
    own: a full pool makes the master evict other keys."""
    cluster = make_cluster("64 MB")
    cluster.start()
    policy = RetryPolicy(attempts=4, backoff=0.2, jitter=0.0)
    too_big = b"x" * (100 * MIB)  # more than the 64 MB segment holds

    async def main() -> tuple[float, float]:
        async with AsyncClient(cluster.client_config(), retry=policy) as ac:
            start = time.monotonic()
            res = await ac.batch_put([unique("nospace")], [too_big])
            took = time.monotonic() - start
            assert res[0] < 0
        async with AsyncClient(cluster.client_config()) as plain:
            start = time.monotonic()
            await plain.batch_put([unique("nospace")], [too_big])
            return took, time.monotonic() - start

    with_retry, without = asyncio.run(main())
    # Three waits of 0.2, 0.4, 0.8 s (no jitter) before giving up.
    assert with_retry >= 1.3 > without, (with_retry, without)


def test_aclose_lets_puts_in_flight_finish_and_report_what_they_stored(
    cluster_config: dict[str, Any],
) -> None:
    """Before: aclose() cancelled the puts in flight (CancelledError) although Mooncake
    stored them: callers were told "not done" for done work."""
    keys = [unique(f"close{i}") for i in range(16)]
    values = [os.urandom(2 * MIB) for _ in keys]

    async def main() -> list[Any]:
        ac = AsyncClient(cluster_config)
        tasks = [asyncio.create_task(ac.put(k, v)) for k, v in zip(keys, values)]
        await asyncio.sleep(0)  # the puts are submitted
        await ac.aclose()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert outcomes == [None] * len(keys), outcomes
    with Client(cluster_config) as c:
        assert c.batch_get(keys) == values
        c.batch_remove(keys, force=True)


def test_async_client_has_the_calls_client_has(cluster_config: dict[str, Any]) -> None:
    async def main() -> None:
        async with AsyncClient(cluster_config) as ac:
            keys = [unique(f"p{i}") for i in range(4)]
            assert await ac.batch_upsert(keys[:3], [b"a", b"bb", b"ccc"]) == [0, 0, 0]
            assert await ac.size(keys[1]) == 2
            assert await ac.batch_size(keys) == [1, 2, 3, None]
            assert await ac.lookup_prefix(keys) == 3
            assert await ac.lookup_prefix([keys[0], keys[1], keys[0], keys[3]]) == 3
            assert await ac.put_if_absent(keys[3], b"d")
            assert not await ac.put_if_absent(keys[3], b"e")
            assert await ac.get(keys[3]) == b"d"
            assert ac.stats()["store"]["keys"] >= 4
            assert ac.op_stats()["exists"]["calls"] >= 1
            assert await ac.batch_remove(keys, force=True) == [0, 0, 0, 0]

    asyncio.run(main())


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), float("inf"), 3e6])
def test_async_calls_refuse_a_bad_timeout(cluster_config: dict[str, Any], bad: float) -> None:
    async def main() -> None:
        async with AsyncClient(cluster_config) as ac:
            with pytest.raises(ValueError, match="timeout"):
                await ac.get(unique(), timeout=bad)

    asyncio.run(main())
