"""The drop-in's tensor calls with CPU torch: Mooncake's serialized format byte for byte, and
tensors written by either client read back through the other."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pytest
from store_helpers import Memory, same, stores, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import ReplicateConfig
from mooncake_cffi.store import tensors as store_tensors

torch = pytest.importorskip("torch")
ms = pytest.importorskip("mooncake.store")


@pytest.fixture(scope="module")
def pair(cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    with stores(cluster) as made:
        yield made


def _tensors() -> dict[str, Any]:
    g = torch.Generator().manual_seed(7)
    out = {
        "float32 2x3": torch.randn(2, 3, generator=g),
        "float64": torch.randn(5, dtype=torch.float64, generator=g),
        "int8": torch.randint(-100, 100, (4, 4), dtype=torch.int8, generator=g),
        "uint8": torch.randint(0, 255, (7,), dtype=torch.uint8, generator=g),
        "int16": torch.randint(-1000, 1000, (3,), dtype=torch.int16, generator=g),
        "int32": torch.arange(12, dtype=torch.int32).reshape(3, 4),
        "int64": torch.arange(6, dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "float16": torch.randn(4, 2, generator=g).half(),
        "bfloat16": torch.randn(3, 3, generator=g).bfloat16(),
        "float8_e4m3fn": torch.randn(8, generator=g).to(torch.float8_e4m3fn),
        "float8_e5m2": torch.randn(8, generator=g).to(torch.float8_e5m2),
        "a scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "8 dimensions": torch.arange(256, dtype=torch.float32).reshape(2, 2, 2, 2, 2, 2, 2, 2),
        "not contiguous": torch.arange(20, dtype=torch.float32).reshape(4, 5).t(),
    }
    for name in ("uint16", "uint32", "uint64"):
        out[name] = torch.arange(5, dtype=torch.int32).to(getattr(torch, name))
    return out


def _equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if b.dim() == 0:
        b = b.reshape(1)  # Mooncake reads a 0-d tensor back as one of shape (1,)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


@pytest.mark.parametrize("name", list(_tensors()))
def test_metadata_is_mooncakes_byte_for_byte(name: str) -> None:
    t = _tensors()[name]
    meta, _ = store_tensors.encode(t)  # type: ignore[misc]
    theirs, _, nbytes, _ = ms._serialize_tensor(t)
    assert len(meta) == ms._tensor_metadata_size() == store_tensors.META_BYTES
    assert meta == theirs and nbytes == t.numel() * t.element_size()


@pytest.mark.parametrize("name", list(_tensors()))
def test_tensors_of_either_client_read_back_through_the_other(
    pair: dict[str, Any], name: str
) -> None:
    t = _tensors()[name]
    key = tag("tensor")
    for writer, reader in (("theirs", "ours"), ("ours", "theirs")):
        k = f"{key}-{writer}"
        assert pair[writer].put_tensor(k, t) == 0
        for store in pair.values():
            got = store.get_tensor(k)
            assert _equal(got, t.contiguous()), (writer, name, got)
        assert _equal(pair[reader].batch_get_tensor([k, k + "-none"])[0], t.contiguous())
        assert pair[reader].batch_get_tensor([k + "-none"]) == [None]


def test_batch_upsert_pub_and_refusals_answer_as_mooncakes(pair: dict[str, Any]) -> None:
    a, b = torch.arange(4, dtype=torch.float32), torch.ones(2, 2, dtype=torch.bfloat16)
    t = tag("tb")

    def calls(s: Any, n: str) -> Any:
        k = f"{t}-{n}"
        mooncake_config = ms.ReplicateConfig()
        two_segments = ms.ReplicateConfig()
        two_segments.preferred_segments = ["x:1", "y:2"]  # two, for one replica
        return (
            s.batch_put_tensor([f"{k}-1", f"{k}-2"], [a, b]),
            s.batch_put_tensor([f"{k}-3"], []),
            s.batch_put_tensor([], []),
            s.put_tensor(f"{k}-4", "not a tensor"),
            s.put_tensor(f"{k}-5", torch.zeros(2, dtype=torch.complex64)),
            s.put_tensor(f"{k}-6", torch.zeros([1] * 9)),
            s.put_tensor(f"{k}-1", b),  # put keeps the first value
            s.upsert_tensor(f"{k}-2", a),  # upsert replaces
            s.batch_upsert_tensor([f"{k}-1"], [b]),
            [None if x is None else x.tolist() for x in s.batch_get_tensor([f"{k}-1", f"{k}-2"])],
            s.pub_tensor(f"{k}-7", a, two_segments),
            s.batch_pub_tensor([f"{k}-8"], [a], mooncake_config),
            s.upsert_pub_tensor(f"{k}-8", b, mooncake_config),
            s.batch_upsert_pub_tensor([f"{k}-9"], [a], two_segments),
            s.get_tensor(f"{k}-8").dtype,
            s.get_tensor_with_tp(f"{k}-8").shape,
        )

    answers = same(pair, calls)
    assert answers[0] == [0, 0] and answers[3:6] == (-600, -600, -600)
    assert answers[9] == [b.float().tolist(), a.tolist()]


def test_get_into_and_put_from_a_buffer_in_mooncakes_layout(pair: dict[str, Any]) -> None:
    t = torch.arange(24, dtype=torch.int16).reshape(2, 3, 4)
    key = tag("into")
    theirs, ours = pair["theirs"], pair["ours"]
    assert theirs.put_tensor(f"{key}-t", t) == 0
    size = store_tensors.META_BYTES + t.numel() * t.element_size()
    mem = Memory(size + 64)
    got = ours.get_tensor_into(f"{key}-t", mem.ptr, mem.size)
    assert _equal(got, t)
    # The tensor is over the buffer, as Mooncake's is: a change of the buffer shows in it.
    ctypes.memset(mem.ptr + store_tensors.META_BYTES, 0, 2)
    assert int(got.flatten()[0]) == 0
    # The buffer now holds metadata + data: store it as it is, through both clients.
    assert ours.put_tensor_from(f"{key}-o", mem.ptr, size) == 0
    assert theirs.get_tensor(f"{key}-o").tolist()[0][0][1] == 1
    assert ours.put_tensor_from(f"{key}-bad", mem.ptr, size - 1) == -600  # lengths disagree
    assert theirs.put_tensor_from(f"{key}-bad", mem.ptr, size - 1) == -600
    many = ours.batch_get_tensor_into([f"{key}-t", f"{key}-none"], [mem.ptr, mem.ptr], [size, size])
    assert _equal(many[0], t) and many[1] is None
    assert ours.batch_get_tensor_into([f"{key}-t"], [0], [size]) == [-600]
    assert ours.batch_put_tensor_from([f"{key}-b1"], [mem.ptr], [size]) == [0]
    assert ours.get_tensor_into(f"{key}-none", mem.ptr, mem.size) is None


def test_tensor_shards_are_read_under_mooncakes_shard_keys(pair: dict[str, Any]) -> None:
    key = tag("tp")
    ours = pair["ours"]
    shard = torch.arange(6, dtype=torch.float32)
    assert ours.put_tensor(f"{key}_tp_1", shard) == 0
    assert _equal(ours.get_tensor_with_tp(key, tp_rank=1, tp_size=2), shard)
    assert _equal(ours.batch_get_tensor_with_tp([key], tp_rank=1, tp_size=2)[0], shard)
    assert ours.get_tensor_with_tp(key, tp_rank=0, tp_size=2) is None
    with pytest.raises(AttributeError, match="put_tensor"):
        ours.put_tensor_with_tp(key, shard, tp_size=2)
    assert isinstance(ours.pub_tensor.__defaults__[0], ReplicateConfig)  # type: ignore[index]
