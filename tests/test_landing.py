"""Landing memory (mooncake_cffi._core.landing): the pool hands a buffer to one load at a
time and keeps a bounded amount."""

from __future__ import annotations

import ctypes

from mooncake_cffi._core.landing import LandingPool


def _address(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def test_the_pool_never_hands_one_buffer_to_two_loads_and_keeps_a_bound():
    pool = LandingPool()
    a, b = pool.take(100_000), pool.take(100_000)
    assert a is not b and len(a) >= 100_000 and len(b) >= 100_000
    pool.give_back(a)
    assert pool.take(90_000) is a  # a nearby size reuses it
    assert pool.take(90_000) is not a  # ... and only once
    pool.KEEP_BYTES = len(b)
    big = pool.take(len(b) * 2)
    pool.give_back(b)
    pool.give_back(big)  # over the bound: dropped, not kept
    assert pool.take(len(big)) is not big
    assert pool.take(len(b)) is b
