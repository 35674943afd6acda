"""A drop-in transfer that outlives its call never touches the caller's memory after it.

Failing open, a data call answers at its deadline while Mooncake's transfer goes on (it
cannot be cancelled).  A stack takes the failure as its answer and reuses its buffers at
once: vLLM hands the blocks of a failed load to the next request, and frees those of a
failed save.  So a read that lands after its call returned must not land in the caller's
memory (it would overwrite another request's KV), and a write that is sent after its call
returned must not take its bytes from there (the key would hold whatever the caller wrote
next).  Each test freezes (SIGSTOP) the storage node of a cluster of its own, lets a call
time out, rewrites the caller's buffers, thaws the node and waits for the shim to finish
the transfer; then it looks at the buffers and the stored value.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from process_helpers import freeze

from mooncake_cffi.store import MooncakeDistributedStore

#: Values large enough that a transfer cannot hide in the kernel's socket buffers.
PART = 4 << 20
KEYS = 4
#: Bounds of the waits below on a loaded 2-core machine (Mooncake's own transfer wait on a
#: thawed node, the call's deadline with its per-MiB growth, scheduling).
CALL_S = 20.0
DONE_S = 90.0


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> None:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"{what} not within {timeout} s"
        time.sleep(0.05)


@pytest.fixture
def local(make_cluster):
    cluster = make_cluster("96 MB").start()
    yield cluster
    for pid in cluster.pids.values():  # thaw whatever a test froze
        if pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


@pytest.fixture
def store(local):
    s = MooncakeDistributedStore()
    # as vLLM's connector: positional, Mooncake's keys only, no segment of its own
    assert (
        s.setup(local.client_host, local.metadata_server, 0, 16 << 20, "tcp", "", local.master_addr)
        == 0
    )
    yield s
    s.close()


class Blocks:
    """A registered region of KEYS * 2 parts of PART bytes, as an engine's KV blocks."""

    def __init__(self, store: MooncakeDistributedStore) -> None:
        self.raw = (ctypes.c_char * (KEYS * 2 * PART))()
        self.base = ctypes.addressof(self.raw)
        assert store.register_buffer(self.base, len(self.raw)) == 0
        self.store = store

    def ptrs(self) -> list[list[int]]:
        return [[self.base + (2 * i + j) * PART for j in range(2)] for i in range(KEYS)]

    def sizes(self) -> list[list[int]]:
        return [[PART, PART] for _ in range(KEYS)]

    def fill(self, byte: int) -> None:
        ctypes.memset(self.base, byte, len(self.raw))

    def bytes(self) -> bytes:
        return ctypes.string_at(self.base, len(self.raw))

    def close(self) -> None:
        self.store.unregister_buffer(self.base)


def _shim_done(store: MooncakeDistributedStore) -> Callable[[], bool]:
    batches = store._x.calls.client.batches
    return lambda: batches.in_flight == 0


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


def _fails_at_deadline(local, call: Callable[[], Any], then: Callable[[], None]) -> None:
    """With the storage node frozen, ``call`` fails at its deadline, as a stack sees it;
    then ``then()`` (the stack reusing its memory) runs before the node is thawed."""
    pid = local.pids["storage"]
    freeze(pid)
    try:
        got, took = _timed(call)
        assert took < CALL_S, took
        assert all(r < 0 for r in got), got
        then()
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_load_that_outlives_its_call_never_lands_in_the_callers_buffers(local, store):
    keys = [f"late-load-{i}-{uuid.uuid4().hex[:8]}" for i in range(KEYS)]
    blocks = Blocks(store)
    try:
        blocks.fill(0x5A)
        assert store.batch_put_from_multi_buffers(keys, blocks.ptrs(), blocks.sizes()) == [0] * KEYS
        blocks.fill(0x00)
        assert (
            store.batch_get_into_multi_buffers(keys, blocks.ptrs(), blocks.sizes())
            == [2 * PART] * KEYS
        )
        assert blocks.bytes() == b"\x5a" * len(blocks.raw)
        _fails_at_deadline(
            local,
            lambda: store.batch_get_into_multi_buffers(keys, blocks.ptrs(), blocks.sizes()),
            lambda: blocks.fill(0xC3),  # the stack reuses its blocks for another request
        )
        wait_until("the shim finishing the late load", _shim_done(store), DONE_S)
        assert blocks.bytes() == b"\xc3" * len(blocks.raw), "a late load wrote the caller's memory"
        # and the node serves the keys again, into the same buffers
        wait_until(
            "the keys read again",
            lambda: (
                store.batch_get_into_multi_buffers(keys, blocks.ptrs(), blocks.sizes())
                == [2 * PART] * KEYS
            ),
            DONE_S,
        )
        assert blocks.bytes() == b"\x5a" * len(blocks.raw)
    finally:
        blocks.close()


def test_a_save_that_outlives_its_call_never_stores_what_the_caller_wrote_after(local, store):
    keys = [f"late-save-{i}-{uuid.uuid4().hex[:8]}" for i in range(KEYS)]
    blocks = Blocks(store)
    try:
        blocks.fill(0x5A)
        _fails_at_deadline(
            local,
            lambda: store.batch_put_from_multi_buffers(keys, blocks.ptrs(), blocks.sizes()),
            lambda: blocks.fill(0xC3),  # the stack's blocks now hold another request's KV
        )
        wait_until("the shim finishing the late save", _shim_done(store), DONE_S)
        # Each key is absent (the write was given up) or holds exactly what the caller
        # handed over before the call returned; never the bytes written after.
        for key in keys:
            value = store.get(key)
            assert value in (b"", b"\x5a" * 2 * PART), (key, len(value), set(value[:4096]))
    finally:
        blocks.close()


# One buffer per key: the calls that run through the thread's reused batch with the
# deadline (a timed-out one leaves that struct with the shim, and the thread takes another).

WHOLE = 2 * PART


def _whole(blocks: Blocks, region: int = 0) -> tuple[list[int], list[int]]:
    """One WHOLE-byte buffer per key, in the first or second half of the region."""
    base = blocks.base + region * (len(blocks.raw) // 2)
    n = len(blocks.raw) // 2 // WHOLE
    return [base + i * WHOLE for i in range(n)], [WHOLE] * n


def _whole_keys(blocks: Blocks, name: str, one: bool) -> tuple[list[str], list[int], list[int]]:
    """Fresh keys named ``name``, one per buffer of the first half (just one if ``one``),
    with those buffers and their sizes."""
    ptrs, sizes = _whole(blocks)
    keys = [f"{name}-{i}-{uuid.uuid4().hex[:8]}" for i in range(len(ptrs))]
    n = 1 if one else len(keys)
    return keys[:n], ptrs[:n], sizes[:n]


def _load(store: MooncakeDistributedStore, kind: str, keys: list[str], ptrs, sizes) -> list[int]:
    if kind == "get_into":
        return [store.get_into(keys[0], ptrs[0], sizes[0])]
    return store.batch_get_into(keys, ptrs, sizes)


def _save(store: MooncakeDistributedStore, kind: str, keys: list[str], ptrs, sizes) -> list[int]:
    if kind == "put_from":
        return [store.put_from(keys[0], ptrs[0], sizes[0])]
    if kind == "put_batch":  # bytes-like values: views of the same memory
        raw = (ctypes.c_ubyte * (sizes[0] * len(keys))).from_address(ptrs[0])
        whole = memoryview(raw).cast("B")
        views = [whole[i * sizes[0] : (i + 1) * sizes[0]] for i in range(len(keys))]
        return [store.put_batch(keys, views)] * len(keys)
    return store.batch_put_from(keys, ptrs, sizes)


@pytest.mark.parametrize("kind", ["batch_get_into", "get_into"])
def test_a_timed_out_load_leaves_its_batch_and_the_next_call_reads_right(local, store, kind):
    blocks = Blocks(store)
    try:
        keys, ptrs, sizes = _whole_keys(blocks, "late-whole", kind == "get_into")
        blocks.fill(0x5A)
        assert store.batch_put_from(keys, ptrs, sizes) == [0] * len(keys)
        runner = store._x.calls.runner
        before = runner.state().timed

        def then() -> None:
            # the shim keeps the timed-out struct (it writes the results there when the
            # transfer ends): the thread's next call must not fill it
            assert runner.state().timed is not before
            blocks.fill(0xC3)

        _fails_at_deadline(local, lambda: _load(store, kind, keys, ptrs, sizes), then)
        wait_until("the shim finishing the late load", _shim_done(store), DONE_S)
        assert blocks.bytes() == b"\xc3" * len(blocks.raw), "a late load wrote the caller's memory"
        # The same thread's next calls, into the other half: the keys' bytes, and only there.
        ptrs2, _ = _whole(blocks, 1)
        ptrs2 = ptrs2[: len(keys)]
        wait_until(
            "the keys read again",
            lambda: _load(store, kind, keys, ptrs2, sizes) == [WHOLE] * len(keys),
            DONE_S,
        )
        half = len(blocks.raw) // 2
        data = blocks.bytes()
        assert data[:half] == b"\xc3" * half
        assert data[half : half + len(keys) * WHOLE] == b"\x5a" * (len(keys) * WHOLE)
    finally:
        blocks.close()


@pytest.mark.parametrize("kind", ["batch_put_from", "put_from", "put_batch"])
def test_a_timed_out_save_leaves_its_batch_and_the_next_call_stores_right(local, store, kind):
    blocks = Blocks(store)
    try:
        keys, ptrs, sizes = _whole_keys(blocks, "late-wsave", kind == "put_from")
        blocks.fill(0x5A)
        _fails_at_deadline(
            local, lambda: _save(store, kind, keys, ptrs, sizes), lambda: blocks.fill(0xC3)
        )
        wait_until("the shim finishing the late save", _shim_done(store), DONE_S)
        for key in keys:
            value = store.get(key)
            assert value in (b"", b"\x5a" * WHOLE), (key, len(value), set(value[:4096]))
        # The same thread's next save, of other keys from the rewritten memory.
        again = [f"{k}-again" for k in keys]
        wait_until(
            "a save stored again",
            lambda: _save(store, kind, again, ptrs, sizes) == [0] * len(again),
            DONE_S,
        )
        for key in again:
            assert store.get(key) == b"\xc3" * WHOLE
    finally:
        blocks.close()


def test_negative_sizes_are_refused_as_before_on_the_deadline_path(store):
    # The deadline grows with the bytes a call moves; a negative size must still be the
    # TypeError Mooncake's binding raises, not an error of the deadline's arithmetic.
    raw = (ctypes.c_char * 4096)()
    base = ctypes.addressof(raw)
    assert store.register_buffer(base, 4096) == 0
    try:
        with pytest.raises(TypeError):
            store.batch_get_into(["neg-a", "neg-b"], [base, base + 64], [64, -(2**40)])
        with pytest.raises(TypeError):
            store.get_into("neg-a", base, -(2**40))
        with pytest.raises(TypeError):
            store.batch_put_from(["neg-a", "neg-b"], [base, base + 64], [-(2**40), 64])
    finally:
        store.unregister_buffer(base)
