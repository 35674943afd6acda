"""A call made from inside another call on the same thread gets its own answer, and so does
the call it interrupted.

Blocking calls without a deadline reuse one batch struct (and one read buffer) per thread.
Python code can run in the middle of such a call on the same thread: a finalizer the
garbage collector runs, a signal handler.  A trace function here plays that part, calling
the client again from every line of the client's own code.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mooncake_cffi import Client

PACKAGE = "mooncake_cffi"


def unique(prefix: str) -> str:
    return f"reentry-{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster.client_config()) as c:
        yield c


@contextmanager
def calling_in_mid_call(nested: Callable[[], Any]) -> Iterator[list[Any]]:
    """Run ``nested()`` at every line the package executes (not from inside itself);
    yields the list of what it returned."""
    answers: list[Any] = []
    inside = [False]

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not inside[0]:
            inside[0] = True
            try:
                answers.append(nested())
            finally:
                inside[0] = False
        return local

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_globals.get("__name__", "").startswith(PACKAGE):
            return local
        return None

    sys.settrace(trace)
    try:
        yield answers
    finally:
        sys.settrace(None)


def test_lookups_interrupted_by_lookups_each_get_their_own_answer(client: Client) -> None:
    present = [unique("p") for _ in range(3)]
    client.batch_put(present, [b"v"] * 3)
    absent = [unique("a") for _ in range(5)]
    with calling_in_mid_call(lambda: client.batch_exists(absent)) as nested:
        outer = client.batch_exists(present)
    assert outer == [True, True, True]
    assert nested and all(a == [False] * 5 for a in nested)


def test_a_remove_interrupted_by_lookups_removes_its_own_keys(client: Client) -> None:
    mine, other = [unique("m") for _ in range(2)], [unique("o") for _ in range(4)]
    client.batch_put(mine + other, [b"v"] * 6)
    with calling_in_mid_call(lambda: client.batch_exists(other)) as nested:
        removed = client.batch_remove(mine, force=True)
    assert removed == [0, 0]
    assert nested and all(a == [True] * 4 for a in nested)
    assert client.batch_exists(mine + other) == [False, False] + [True] * 4


def test_gets_interrupted_by_gets_each_read_their_own_value(client: Client) -> None:
    a, b = unique("ga"), unique("gb")
    client.put(a, b"value of a" * 100)
    client.put(b, b"value of b")
    with calling_in_mid_call(lambda: client.get(b)) as nested:
        got = client.get(a)
    assert got == b"value of a" * 100
    assert nested and all(v == b"value of b" for v in nested)


def test_puts_interrupted_by_lookups_store_their_own_values(client: Client) -> None:
    keys = [unique("w") for _ in range(3)]
    values = [f"value {i}".encode() for i in range(3)]
    probe = [unique("x")]
    with calling_in_mid_call(lambda: client.batch_exists(probe)) as nested:
        assert client.batch_put(keys, values) == [0, 0, 0]
    assert nested and all(a == [False] for a in nested)
    assert client.batch_get(keys) == values
