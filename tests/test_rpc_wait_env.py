"""``MC_RPC_TIMEOUT_MS`` during client setups: each setup sees the value it asked for (its
``op_timeout``, or Mooncake's default when it gave none), however many run at once, and the
environment is as it was once they are done."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest

from mooncake_cffi import Client
from mooncake_cffi._capi.native import mooncake_timeouts_shortened

NAME = "MC_RPC_TIMEOUT_MS"


@pytest.fixture(autouse=True)
def no_value_of_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)


def test_concurrent_setups_each_see_their_own_value() -> None:
    wrong: list[tuple[Any, Any]] = []
    choices = [None, 0.5, 0.8]

    def setups(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200):
            op_timeout = rng.choice(choices)
            expected = None if op_timeout is None else str(int(op_timeout * 1000))
            with mooncake_timeouts_shortened(op_timeout):
                for _ in range(3):  # what Mooncake's setup would read, at several points
                    seen = os.environ.get(NAME)
                    if seen != expected:
                        wrong.append((expected, seen))
                    time.sleep(rng.uniform(0, 0.0005))

    threads = [threading.Thread(target=setups, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a setup waited forever"
    assert not wrong, f"{len(wrong)} reads saw another setup's value, e.g. {wrong[:3]}"
    assert NAME not in os.environ


def test_a_value_the_user_set_is_kept_for_every_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "1234")
    for op_timeout in (None, 0.5):
        with mooncake_timeouts_shortened(op_timeout):
            assert os.environ[NAME] == "1234"
    assert os.environ[NAME] == "1234"


def test_clients_set_up_at_once_with_and_without_a_deadline(cluster_config) -> None:
    errors: list[BaseException] = []
    clients: list[Client] = []
    lock = threading.Lock()

    def make(op_timeout: float | None) -> None:
        try:
            c = Client(cluster_config, op_timeout=op_timeout)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            return
        with lock:
            clients.append(c)

    threads = [threading.Thread(target=make, args=([None, 2.0, 3.0][i % 3],)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors
        assert len(clients) == 9
        key = f"rpcenv-{os.getpid()}-{time.monotonic_ns()}"
        clients[0].put(key, b"v")
        assert all(c.get(key) == b"v" for c in clients)
        assert NAME not in os.environ
    finally:
        for c in clients:
            c.close()
