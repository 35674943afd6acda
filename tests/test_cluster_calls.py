"""Calls on many keys at once and values in parts: remove_by_regex, remove_all, health_check,
and put_from / get_into with a list of buffers per key."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from mooncake_cffi import Client, LocalCluster


def test_remove_by_regex_removes_what_it_matches_and_nothing_else(
    cluster_config: dict[str, Any],
) -> None:
    tag = uuid.uuid4().hex[:10]
    doomed = [f"rx-{tag}/drop/{i}" for i in range(5)]
    kept = [f"rx-{tag}/keep/{i}" for i in range(3)]
    with Client(cluster_config) as c:
        c.batch_put(doomed + kept, [b"v"] * 8)
        assert c.remove_by_regex(f"^rx-{tag}/drop/[0-9]+$", force=True) == 5
        assert c.batch_exists(doomed + kept) == [False] * 5 + [True] * 3
        assert c.remove_by_regex(f"^rx-{tag}/nothing", force=True) == 0
        with pytest.raises(TypeError, match="pattern"):
            c.remove_by_regex(b"^x")  # type: ignore[arg-type]
        c.batch_remove(kept, force=True)


def test_remove_all_empties_the_cluster(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster("64 MB")
    local.start()
    with Client(local.client_config()) as c:
        keys = [f"all-{i}" for i in range(10)]
        c.batch_put(keys, [b"x" * 100] * 10)
        assert c.remove_all(force=True) == 10
        assert c.batch_exists(keys) == [False] * 10
        assert c.remove_all() == 0


def test_health_check_answers_and_a_closed_client_is_not_set_up(
    cluster_config: dict[str, Any],
) -> None:
    c = Client(cluster_config)
    assert c.health_check() == 0
    c.close()
    assert c.health_check() == 1


def test_a_value_in_parts_round_trips_and_reads_as_one(cluster_config: dict[str, Any]) -> None:
    key = f"parts-{uuid.uuid4().hex[:10]}"
    head, tail = os.urandom(3000), os.urandom(1096)
    with Client(cluster_config) as c:
        assert c.put_from([key], [[head, tail]]) == [0]
        assert c.get(key) == head + tail
        a, b = bytearray(1000), bytearray(3096)
        assert c.get_into([key], [[a, b]]) == [4096]
        assert bytes(a) + bytes(b) == head + tail
        whole = np.zeros(4096, dtype=np.uint8)
        assert c.get_into([key], [whole]) == [4096]
        assert whole.tobytes() == head + tail
        c.remove(key, force=True)
