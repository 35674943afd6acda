"""The drop-in's differences from Mooncake's class that docs/guide/migrating.md lists under
"What differs", each measured side by side on one cluster: a key twice in
``batch_get_into``, numpy arrays of wider items given to ``put``, buffers that are not
C-contiguous, and values of the wrong type.  If Mooncake's class changes, these fail and the
page needs the news."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_helpers import Memory, stores, tag

from mooncake_cffi.cluster import LocalCluster

pytest.importorskip("mooncake.store")

MIGRATING = Path(__file__).resolve().parent.parent / "docs" / "guide" / "migrating.md"


@pytest.fixture(scope="module")
def pair(cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    with stores(cluster) as made:
        yield made


def test_a_key_twice_in_batch_get_into(pair: dict[str, Any]) -> None:
    got = {}
    for name, store in pair.items():
        key = tag(f"into-twice-{name}")
        assert store.put(key, b"abcdef") == 0
        mem = Memory(8192)
        assert store.register_buffer(mem.ptr, mem.size) == 0
        try:
            answer = store.batch_get_into([key, key], [mem.ptr, mem.ptr + 4096], [4096, 4096])
            got[name] = (answer, mem[0:6], mem[4096:4102])
        finally:
            store.unregister_buffer(mem.ptr)
    assert got["ours"] == ([6, 6], b"abcdef", b"abcdef")
    assert got["theirs"] == ([6, 6], bytes(6), b"abcdef")  # only the last buffer filled
    assert "A key twice in `batch_get_into`" in MIGRATING.read_text()


@pytest.mark.parametrize(
    ("value", "theirs_bytes"),
    [(np.arange(4, dtype=np.float32), 4), (np.float32(1.5), 1), (np.ones(2, np.float64), 2)],
)
def test_numpy_values_are_stored_whole(pair: dict[str, Any], value: Any, theirs_bytes: int) -> None:
    raw = np.asarray(value).tobytes()
    stored = {}
    for name, store in pair.items():
        key = tag(f"numpy-{name}")
        assert store.put(key, value) == 0
        stored[name] = store.get(key)
    assert stored["ours"] == raw  # nbytes bytes
    assert stored["theirs"] == raw[:theirs_bytes]  # one byte per item
    assert "`np.arange(4, dtype=np.float32)` stores 16 bytes" in MIGRATING.read_text()


def test_a_buffer_that_is_not_contiguous(pair: dict[str, Any]) -> None:
    view = np.ones((2, 2), dtype=np.float32)[:, :1]
    assert pair["theirs"].put(tag("strided-theirs"), view) == 0
    with pytest.raises(ValueError, match="contiguous"):
        pair["ours"].put(tag("strided-ours"), view)


@pytest.mark.parametrize("value", ["text", 5])
def test_a_value_of_the_wrong_type_raises_type_error_in_both(
    pair: dict[str, Any], value: Any
) -> None:
    for name, store in pair.items():
        with pytest.raises(TypeError):
            store.put(tag(f"wrong-{name}"), value)
