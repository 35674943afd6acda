"""Racing writers: exactly one winner per key, a clean "existed" for every loser.

Writers in separate processes (spawned, each with its own client) and in threads of one
process race ``put_if_absent`` / ``batch_put(skip_existing=True)`` on the same keys, with
values of 8 bytes to 4 MiB, round after round.  Each round starts on a barrier, so the
writes overlap for real: a loser often reaches a key while the winner's replica is still
being written (Mooncake answers REPLICA_IS_NOT_READY then).  Every writer stores values of
its own, so the stored bytes say who won.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from mooncake_cffi import EXISTED, Client

MIB = 1 << 20
pytestmark = pytest.mark.slow


def value_of(writer: int, key: str, size: int) -> bytes:
    head = f"{writer}:{key}:".encode()
    return (head * (size // len(head) + 1))[:size]


def _process_writer(
    config: dict[str, Any], writer: int, barrier: Any, jobs: Any, results: Any
) -> None:
    try:
        with Client(config) as client:
            while True:
                job = jobs.get()
                if job is None:
                    return
                keys, size = job
                barrier.wait(60)
                won = [client.put_if_absent(k, value_of(writer, k, size)) for k in keys]
                results.put((writer, won, None))
    except BaseException:
        results.put((writer, None, traceback.format_exc()))


def _check_round(client: Client, keys: list[str], size: int, won: dict[int, list[bool]]) -> None:
    for i, key in enumerate(keys):
        winners = [w for w, flags in won.items() if flags[i]]
        assert len(winners) == 1, f"key {key}: winners {winners}"
        assert client.get(key) == value_of(winners[0], key, size), key


@pytest.mark.parametrize("size", [8, MIB, 4 * MIB], ids=["8B", "1MiB", "4MiB"])
def test_processes_racing_put_if_absent_have_one_winner_per_key(
    cluster_config: dict[str, Any], size: int
) -> None:
    """Before: the loser raised REPLICA_IS_NOT_READY on the first key it lost."""
    writers, rounds, per_round = 3, 6 if size > 8 else 12, 20
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers)
    jobs = [ctx.Queue() for _ in range(writers)]
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_writer, args=(cluster_config, w, barrier, jobs[w], results))
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    try:
        with Client(cluster_config) as checker:
            for r in range(rounds):
                keys = [f"race-p{size}-{r}-{i}-{uuid.uuid4().hex[:8]}" for i in range(per_round)]
                for q in jobs:
                    q.put((keys, size))
                won: dict[int, list[bool]] = {}
                for _ in range(writers):
                    writer, flags, error = results.get(timeout=120)
                    assert error is None, f"writer {writer} raised:\n{error}"
                    won[writer] = flags
                _check_round(checker, keys, size, won)
                checker.batch_remove(keys, force=True)
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)


def _race_threads(n: int, write: Callable[[int], Any]) -> dict[int, Any]:
    """``write(w)`` in ``n`` threads started together; each one's answer, or the first
    traceback as an assertion."""
    barrier = threading.Barrier(n)
    answers: dict[int, Any] = {}
    errors: list[str] = []

    def run(w: int) -> None:
        try:
            barrier.wait(30)
            answers[w] = write(w)
        except BaseException:
            errors.append(traceback.format_exc())

    pool = [threading.Thread(target=run, args=(w,)) for w in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert not errors, errors[0]
    assert set(answers) == set(range(n))
    return answers


def test_threads_racing_put_if_absent_have_one_winner_per_key(
    cluster_config: dict[str, Any],
) -> None:
    """Before: 13 and 34 of 120 calls raised REPLICA_IS_NOT_READY (4 threads x 30 keys)."""
    size = MIB
    with Client(cluster_config) as client:
        for r in range(5):
            keys = [f"race-t-{r}-{i}-{uuid.uuid4().hex[:8]}" for i in range(30)]
            won = _race_threads(
                4,
                lambda w, keys=keys: [client.put_if_absent(k, value_of(w, k, size)) for k in keys],
            )
            _check_round(client, keys, size, won)
            client.batch_remove(keys, force=True)


def test_racing_skip_existing_batches_have_one_winner_per_key(
    cluster_config: dict[str, Any],
) -> None:
    size = 512 * 1024
    with Client(cluster_config) as client:
        for r in range(5):
            keys = [f"race-b-{r}-{i}-{uuid.uuid4().hex[:8]}" for i in range(16)]

            def write(w: int, keys: list[str] = keys) -> list[int]:
                values = [value_of(w, k, size) for k in keys]
                return client.batch_put(keys, values, skip_existing=True)

            codes = _race_threads(3, write)
            for w, res in codes.items():
                assert set(res) <= {0, EXISTED}, (w, res)
            _check_round(client, keys, size, {w: [c == 0 for c in res] for w, res in codes.items()})
            client.batch_remove(keys, force=True)
