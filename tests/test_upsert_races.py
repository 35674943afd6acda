"""Racing upserts: two processes upsert one key at once, round after round.

Mooncake's master lets one upsert of a key be in progress at a time: a second upsert that
starts meanwhile takes the key over, and the first ends in ILLEGAL_CLIENT (-601).  The
loser's bytes are not stored; the key holds the winner's, whole.  ``Client.upsert`` raises
:class:`~mooncake_cffi.ConcurrentWriteError` for it (``.code`` Mooncake's), the drop-in and
Mooncake's own class answer the code.  Each round starts on a barrier, so the writes overlap
for real; every writer stores bytes of its own, so the stored value says who won.

A cluster of its own: the master holds each lost upsert's space for
``-put_start_release_timeout_sec`` (600 s by default) before it frees it, so the races fill
memory that other tests would miss (about 380 MiB here, within its 1 GB).
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from store_helpers import setup_args
from test_races import value_of

from mooncake_cffi import Client, ConcurrentWriteError, MooncakeError
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.errors import CONCURRENT_WRITE_CODES

MIB = 1 << 20
pytestmark = pytest.mark.slow


def _upsert_call(
    kind: str, config: dict[str, Any], args: tuple[Any, ...]
) -> tuple[Callable[[str, bytes], Any], Any]:
    """An upsert of ``kind`` (a Client from ``config``, or a store set up with ``args``)
    answering 0, a code, or the exception's (class name, code); and the object to close."""
    if kind == "client":
        client = Client(config)

        def upsert(key: str, value: bytes) -> Any:
            try:
                client.upsert(key, value)
                return 0
            except MooncakeError as exc:
                assert exc.retryable or not isinstance(exc, ConcurrentWriteError)
                return (type(exc).__name__, exc.code)

        return upsert, client
    if kind == "dropin":
        from mooncake_cffi.store import MooncakeDistributedStore as Store
    else:
        from mooncake.store import MooncakeDistributedStore as Store  # type: ignore[no-redef]
    store = Store()
    assert store.setup(*args) == 0
    return store.upsert, store


def _writer(
    kind: str,
    config: dict[str, Any],
    args: tuple[Any, ...],
    writer: int,
    barrier: Any,
    jobs: Any,
    results: Any,
) -> None:
    try:
        upsert, owner = _upsert_call(kind, config, args)
        try:
            while (job := jobs.get()) is not None:
                key, size = job
                barrier.wait(60)
                results.put((writer, upsert(key, value_of(writer, key, size)), None))
        finally:
            owner.close()
    except BaseException:
        results.put((writer, None, traceback.format_exc()))


def _lost(kind: str, answer: Any) -> bool:
    """True for the answer of an upsert that lost the race to the other writer."""
    if kind == "client":
        return isinstance(answer, tuple) and answer[0] == "ConcurrentWriteError"
    return answer in CONCURRENT_WRITE_CODES


@pytest.fixture(scope="module")
def racing(make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("1 GB").start()


@pytest.mark.parametrize("kind", ["client", "dropin", "theirs"])
@pytest.mark.parametrize(("size", "rounds"), [(MIB, 30), (16 * MIB, 6)], ids=["1MiB", "16MiB"])
def test_racing_upserts_have_one_winner_whose_value_is_stored(
    racing: LocalCluster, kind: str, size: int, rounds: int
) -> None:
    if kind == "theirs":
        pytest.importorskip("mooncake.store")
    config, args = racing.client_config(), setup_args(racing, 64 * MIB)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    jobs = [ctx.Queue() for _ in range(2)]
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(kind, config, args, w, barrier, jobs[w], results))
        for w in range(2)
    ]
    for p in procs:
        p.start()
    seen: list[tuple[Any, Any]] = []
    try:
        with Client(config) as checker:
            for r in range(rounds):
                key = f"upsert-race-{kind}-{size}-{r}-{uuid.uuid4().hex[:8]}"
                for q in jobs:
                    q.put((key, size))
                answers: dict[int, Any] = {}
                for _ in range(2):
                    writer, answer, error = results.get(timeout=120)
                    assert error is None, f"writer {writer} raised:\n{error}"
                    answers[writer] = answer
                seen.append((answers[0], answers[1]))
                won = [w for w, a in answers.items() if a == 0]
                lost = [w for w, a in answers.items() if _lost(kind, a)]
                assert sorted(won + lost) == [0, 1], f"round {r}: {answers}"
                assert won, f"round {r}: both writers lost: {answers}"
                stored = checker.get(key)
                assert stored in [value_of(w, key, size) for w in won], (
                    f"round {r}: {answers}, the key holds "
                    f"{None if stored is None else stored[:24]!r}"
                )
                if lost:  # the loser may upsert again: the later upsert wins
                    checker.upsert(key, value_of(lost[0], key, size))
                    assert checker.get(key) == value_of(lost[0], key, size)
                checker.remove(key, force=True)
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    losses = [a for pair in seen for a in pair if _lost(kind, a)]
    kinds = set(map(str, losses))
    print(f"\n[{kind} {size // MIB} MiB] {len(seen)} rounds, {len(losses)} lost: {kinds}")
    if size == MIB:  # at 1 MiB most rounds overlap (measured: ~90 of 100)
        assert losses, f"no round overlapped: {seen}"
    if kind == "client":
        assert all(a == ("ConcurrentWriteError", -601) or a[1] == -703 for a in losses)
