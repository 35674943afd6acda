"""Landing memory (mooncake_cffi._core.landing): the pool hands a buffer to one load at a
time and keeps a bounded amount, and a copy-out, split between two threads or not, puts
every byte where it belongs."""

from __future__ import annotations

import ctypes
import os
import random

import pytest

from mooncake_cffi._core.landing import SPLIT_BYTES, LandingPool, copy_out


def _address(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


@pytest.mark.parametrize("total", [1, 4096, SPLIT_BYTES - 1, SPLIT_BYTES, 3 * SPLIT_BYTES + 7])
def test_a_copy_out_puts_every_byte_in_its_place(total):
    rng = random.Random(total)
    src = bytearray(os.urandom(total))
    dst = bytearray(total + 64)  # guard bytes after the end must stay zero
    cuts = sorted({0, total, *(rng.randrange(total + 1) for _ in range(9))})
    s, d = _address(src), _address(dst)
    copies = [(d + a, s + a, b - a) for a, b in zip(cuts, cuts[1:]) if b > a]
    rng.shuffle(copies)  # the parts of a load come in any order
    copy_out(copies)
    assert dst[:total] == src
    assert dst[total:] == bytes(64)


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
