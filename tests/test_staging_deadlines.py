"""Staging keeps a call's deadline, and never hands out memory Mooncake may still use.

With L1 registered every bytes call copies through slots of the L1 region.  A batch that
times out goes on in the shim: Mooncake may still read (put) or write (get) its slots, so
they must stay taken until the batch ends, and a later call must wait for them rather than
overwrite them.  Real sizes (48 MiB values through a 64 MiB region) and a real cluster.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pytest

from mooncake_cffi import Client, MooncakeTimeoutError

MIB = 1 << 20
pytestmark = pytest.mark.slow


def _key(tag: str) -> str:
    return f"stgdl-{tag}-{uuid.uuid4().hex[:10]}"


def test_a_put_that_timed_out_keeps_its_slot_until_mooncake_is_done(
    cluster_config: dict[str, Any],
) -> None:
    """Before: the slot was given back at the timeout, and the next put's bytes replaced the
    value Mooncake was still sending (4 of 4 trials stored 15-29 MB of the wrong value)."""
    a_bytes, b_bytes = b"A" * (48 * MIB), b"B" * (48 * MIB)
    timed_out = 0
    for trial in range(4):
        l1 = np.zeros(64 * MIB, dtype=np.uint8)
        with Client(cluster_config, l1=l1, register_l1=True, op_timeout=0.003) as c:
            a, b = _key(f"a{trial}"), _key(f"b{trial}")
            try:
                c.put(a, a_bytes)
            except MooncakeTimeoutError as exc:
                timed_out += 1
                assert exc.batch_id is not None
                assert c.staging.in_use >= len(a_bytes) or c.in_flight == 0
            c.put(b, b_bytes, timeout=60)
            stored = c.get(a, timeout=60)
            assert stored is None or stored == a_bytes, (
                f"trial {trial}: {a} holds {stored.count(b'B') if stored else 0} bytes of B"
            )
            assert c.get(b, timeout=60) == b_bytes
            c.batch_remove([a, b], force=True, timeout=60)
    assert timed_out, "no put timed out: the test did not reach the window it is about"


def test_a_get_that_timed_out_keeps_its_slot_from_the_next_reader(
    cluster_config: dict[str, Any],
) -> None:
    a_bytes, b_bytes = b"a" * (40 * MIB), b"b" * (40 * MIB)
    l1 = np.zeros(64 * MIB, dtype=np.uint8)
    with Client(cluster_config, l1=l1, register_l1=True) as c:
        a, b = _key("ga"), _key("gb")
        c.put(a, a_bytes)
        c.put(b, b_bytes)
        with pytest.raises(MooncakeTimeoutError):
            for _ in range(20):  # until a read is caught mid-transfer
                c.get(a, timeout=0.002)
        assert c.get(b, timeout=60) == b_bytes  # read while the other may still land
        assert c.get(a, timeout=60) == a_bytes
        c.batch_remove([a, b], force=True, timeout=60)


def test_with_l1_a_calls_own_timeout_wins_over_op_timeout(cluster_config: dict[str, Any]) -> None:
    """Before: staging called put_from / get_into without the call's deadline, so
    ``timeout=0.002`` never timed out and ``timeout=30`` timed out at op_timeout's 3 ms."""
    value = b"x" * (48 * MIB)
    l1 = np.zeros(64 * MIB, dtype=np.uint8)
    with Client(cluster_config, l1=l1, register_l1=True) as c:
        start = time.monotonic()
        with pytest.raises(MooncakeTimeoutError):
            for _ in range(10):
                c.put(_key("short"), value, timeout=0.002)
        assert time.monotonic() - start < 10
        key = _key("long")
        c.upsert(key, value, timeout=60)
    with Client(cluster_config, l1=l1.copy(), register_l1=True, op_timeout=0.003) as c:
        c.upsert(key, value, timeout=60)  # the call's timeout, not op_timeout's 3 ms
        assert c.get(key, timeout=60) == value
        c.remove(key, force=True, timeout=60)
