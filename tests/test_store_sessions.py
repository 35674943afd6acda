"""Mooncake's session API (0.3.13: batch_put_session_start ... batch_get_session_end) on the
drop-in, side by side with Mooncake's own class on one cluster: the same answers (errors
included) and the same bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from store_helpers import Memory, same, stores, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import MooncakeDistributedStore

ms = pytest.importorskip("mooncake.store")
if not hasattr(ms.MooncakeDistributedStore, "batch_put_session_start"):
    pytest.skip("the installed Mooncake wheel has no session API", allow_module_level=True)

N = 64 << 10
H = N // 2


@pytest.fixture(scope="module")
def pair(make_module_cluster: Callable[..., LocalCluster]) -> Iterator[dict[str, Any]]:
    # A cluster of its own: the 1 TiB reservation below makes the master evict objects to
    # make room, and on the session cluster it would evict other files' keys.
    with stores(make_module_cluster("256 MB").start()) as made:
        yield made


def _sources(n: int, base: int) -> list[Memory]:
    return [Memory(N, bytes([base + i]) * N) for i in range(n)]


def test_a_session_round_trip_answers_and_bytes_as_mooncakes(pair: dict[str, Any]) -> None:
    # vLLM's newer store worker: reserve, write each value as two ranges (second half
    # first), end, then read it back through a get session, two ranges per key.
    def round_trip(s: Any, n: str) -> list[Any]:
        keys = [tag(f"sess-{n}") for _ in range(4)]
        src, dst = _sources(4, 65), [Memory(N) for _ in range(4)]
        out: list[Any] = [s.batch_put_session_start(keys, [N] * 4)]
        out.append(s.batch_is_exist(keys))  # reserved, not readable yet
        out.append(s.get_size(keys[0]))
        out.append(s.batch_put_from_multi_buffer_ranges(keys, [[m.ptr + H] for m in src],
                                                        [[H]] * 4, [[H]] * 4))  # fmt: skip
        out.append(s.batch_put_from_multi_buffer_ranges(keys, [[m.ptr] for m in src],
                                                        [[H]] * 4, [[0]] * 4))  # fmt: skip
        out.append(s.batch_put_session_end(keys))
        out.append(s.batch_is_exist(keys))
        out.append([s.get(k) == m[:] for k, m in zip(keys, src)])
        out.append(s.batch_get_session_start(keys))
        out.append(s.batch_get_into_multi_buffer_ranges(
            keys, [[m.ptr + H, m.ptr] for m in dst], [[H, H]] * 4, [[H, 0]] * 4))  # fmt: skip
        out.append([d[:] == m[:] for d, m in zip(dst, src)])
        out.append(s.batch_get_session_end(keys))
        out.append(s.batch_remove(keys, True))
        return out

    answers = same(pair, round_trip)
    assert answers[0] == [0] * 4 and answers[1] == [0] * 4 and answers[2] == -703
    assert answers[3] == answers[4] == [H] * 4 and answers[5] == [0] * 4
    assert answers[6] == [1] * 4 and answers[7] == [True] * 4
    assert answers[9] == [N] * 4 and answers[10] == [True] * 4 and answers[11] == 0


def test_a_revoked_reservation_leaves_no_key(pair: dict[str, Any]) -> None:
    def revoke(s: Any, n: str) -> list[Any]:
        key, m = tag(f"rev-{n}"), Memory(N, b"r" * N)
        out = [s.batch_put_session_start([key], [N])]
        out.append(s.batch_put_from_multi_buffer_ranges([key], [[m.ptr]], [[N]], [[0]]))
        out += [s.batch_put_session_revoke([key]), s.is_exist(key), s.get_size(key)]
        out.append(s.batch_put_session_revoke([key]))  # no session any more
        out.append(s.batch_put_from_multi_buffer_ranges([key], [[m.ptr]], [[1]], [[0]]))
        return out

    assert same(pair, revoke) == [[0], [N], [0], 0, -704, [-600], [-600]]


def test_put_session_errors_are_mooncakes(pair: dict[str, Any]) -> None:
    def errors(s: Any, n: str) -> list[Any]:
        key, present, m = tag(f"err-{n}"), tag(f"present-{n}"), Memory(N, b"e" * N)
        assert s.put(present, b"here") == 0
        out: list[Any] = [
            s.batch_put_session_end([key]),  # end without a start
            s.batch_put_session_revoke([key]),  # revoke without a start
            s.batch_put_from_multi_buffer_ranges([key], [[m.ptr]], [[8]], [[0]]),  # no start
            s.batch_put_session_start([present], [N]),  # a key already present
            s.batch_put_session_start([key], [0]),  # size 0
            s.batch_put_session_start([key, present], [8]),  # lists that do not pair up
            s.batch_put_session_start([], []),
            s.batch_put_session_start([tag(f"huge-{n}")], [1 << 40]),  # no space
            s.batch_put_session_start([key], [N]),
            s.batch_put_session_start([key], [N]),  # a session already open
            s.batch_put_from_multi_buffer_ranges([key], [[m.ptr]], [[H + 1]], [[H]]),  # past
            s.batch_put_from_multi_buffer_ranges([key], [[m.ptr]], [[H], [1]], [[0]]),  # outer
            s.batch_put_from_multi_buffer_ranges([key], [[m.ptr, m.ptr]], [[H]], [[0]]),  # inner
            s.batch_put_from_multi_buffer_ranges([key], [[]], [[]], [[]]),  # no ranges
            s.batch_put_from_multi_buffer_ranges(
                [key], [[m.ptr + H, m.ptr]], [[H, H]], [[H, 0]]
            ),  # fmt: skip
            s.remove(key),  # reserved, not ready
            s.batch_put_session_end([key]),
            s.batch_put_session_end([key]),  # ended already
            s.get(key) == m[:],
            s.remove(key, True),
        ]
        s.remove(present, True)  # (the 1 TiB start may have made the master evict it)
        return out

    assert same(pair, errors) == [
        [-600], [-600], [-600], [-705], [-600], [-600, -600], [], [-200], [0], [-600],
        [-600], [-600], [-600], [-702], [N], -703, [0], [-600], True, 0,
    ]  # fmt: skip


def test_get_session_errors_are_mooncakes(pair: dict[str, Any]) -> None:
    def errors(s: Any, n: str) -> list[Any]:
        key, missing, pending = tag(f"g-{n}"), tag(f"miss-{n}"), tag(f"pend-{n}")
        m, d = Memory(N, b"g" * N), Memory(N)
        assert s.put_from(key, m.ptr, N) == 0
        out: list[Any] = [
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[8]], [[0]]),  # no start
            s.batch_get_session_start([key, missing]),
            s.batch_put_session_start([pending], [N]),
            s.batch_get_session_start([pending]),  # reserved, not ready
            s.batch_put_session_revoke([pending]),
            s.batch_get_session_start([]),
            s.batch_get_into_multi_buffer_ranges([missing], [[d.ptr]], [[1]], [[0]]),
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[H + 1]], [[H]]),  # past
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[1]], [[N - 1]]),
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[0]], [[0]]),
            s.batch_get_into_multi_buffer_ranges([key], [[]], [[]], [[]]),
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[1], [2]], [[0]]),
            s.remove(key),  # the session's query holds a read lease
            s.batch_get_session_end([key]),
            s.batch_get_session_end([]),
            s.batch_get_into_multi_buffer_ranges([key], [[d.ptr]], [[1]], [[0]]),  # ended
            s.remove(key, True),
        ]
        return out

    assert same(pair, errors) == [
        [-600], [0, -704], [0], [-703], [0], [], [-600], [-600], [1], [0], [0], [-600],
        -706, 0, 0, [-600], 0,
    ]  # fmt: skip


def test_a_store_not_set_up_answers_the_session_calls_as_mooncakes() -> None:
    for s in (ms.MooncakeDistributedStore(), MooncakeDistributedStore()):
        assert [
            s.batch_put_session_start(["k"], [4]),
            s.batch_put_from_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]),
            s.batch_put_session_end(["k"]),
            s.batch_put_session_revoke(["k"]),
            s.batch_get_session_start(["k"]),
            s.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]),
            s.batch_get_session_end(["k"]),
        ] == [[], [], [], [], [], [], -1]


def test_many_sessions_in_a_row_keep_every_byte(cluster: LocalCluster) -> None:
    # 40 rounds of 8 keys, ranges in shuffled order, on the drop-in alone; each read back
    # through a get session and compared, then revoked or removed.
    import random

    rng = random.Random(28)
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", cluster.metadata_server, 0, 16 << 20, "tcp", "",
                   cluster.master_addr) == 0  # fmt: skip
    try:
        for r in range(40):
            keys = [tag(f"round{r}") for _ in range(8)]
            size = rng.choice([4096, 65536, 3 * 65536 + 7])
            src = [Memory(size, rng.randbytes(size)) for _ in keys]
            assert s.batch_put_session_start(keys, [size] * 8) == [0] * 8
            cuts = sorted({0, size, *rng.sample(range(1, size), 3)})
            parts = list(zip(cuts, cuts[1:]))
            rng.shuffle(parts)
            for a, b in parts:
                got = s.batch_put_from_multi_buffer_ranges(
                    keys, [[m.ptr + a] for m in src], [[b - a]] * 8, [[a]] * 8
                )
                assert got == [b - a] * 8
            assert s.batch_put_session_end(keys) == [0] * 8
            dst = [Memory(size) for _ in keys]
            assert s.batch_get_session_start(keys) == [0] * 8
            got = s.batch_get_into_multi_buffer_ranges(
                keys, [[d.ptr + a for a, _ in parts] for d in dst],
                [[b - a for a, b in parts]] * 8, [[a for a, _ in parts]] * 8,
            )  # fmt: skip
            assert got == [size] * 8
            assert [d[:] for d in dst] == [m[:] for m in src]
            assert s.batch_get_session_end(keys) == 0
            assert s.batch_remove(keys, True) == [0] * 8
    finally:
        s.close()
