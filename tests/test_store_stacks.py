"""The calls SGLang's HiCache backend, vLLM's Mooncake store connector and LMCache's Mooncake
adapter make, in their order and with their arguments, through the drop-in and through
Mooncake's own class: the same answers, and the bytes land where those stacks read them."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from store_helpers import MIB, same, stores, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import ReplicateConfig
from mooncake_cffi.store.unset import UNSUPPORTED

torch = pytest.importorskip("torch")
ms = pytest.importorskip("mooncake.store")


@pytest.fixture(scope="module")
def pair(make_module_cluster: Callable[..., LocalCluster]) -> Iterator[dict[str, Any]]:
    # A cluster of its own: the stacks call remove_all, which empties the whole cluster.
    with stores(make_module_cluster("256 MB").start()) as made:
        yield made


def _pool(pages: int, page_bytes: int) -> tuple[Any, int]:
    """A host KV pool as these stacks allocate it: a torch tensor over pinned-like memory."""
    pool = torch.zeros(pages * page_bytes, dtype=torch.uint8)
    return pool, pool.data_ptr()


def test_sglang_hicache(pair: dict[str, Any]) -> None:
    page, pages = 4096, 8

    def sglang(s: Any, n: str) -> Any:
        t = tag(f"sgl-{n}")
        warm = f"sglang_mooncake_store_warmup_key{t}"
        out: list[Any] = [s.put(warm, bytes(4 * 1024)), s.is_exist(warm), s.get(warm)[:4]]
        pool, base = _pool(pages, page)
        pool.copy_(torch.arange(pages * page, dtype=torch.int64).to(torch.uint8))
        out.append(s.register_buffer(base, pages * page))
        keys = [f"{t}_{i}_k" for i in range(pages)]
        ptrs = [base + i * page for i in range(pages)]
        exist = s.batch_is_exist(keys)
        missing = [i for i, e in enumerate(exist) if e != 1]
        config = ms.ReplicateConfig() if n == "theirs" else ReplicateConfig()
        out.append(exist)
        out.append(
            s.batch_put_from(
                [keys[i] for i in missing], [ptrs[i] for i in missing], [page] * len(missing)
            )
        )
        # MHA layout: the k and v halves of a page as two buffers of one object
        halves = [[p, p + page // 2] for p in ptrs]
        out.append(
            s.batch_put_from_multi_buffers(
                [k + "v" for k in keys], halves, [[page // 2] * 2] * pages, config
            )
        )
        dst, dbase = _pool(pages, page)
        out.append(s.register_buffer(dbase, pages * page))
        out.append(s.batch_get_into(keys, [dbase + i * page for i in range(pages)], [page] * pages))
        out.append(bool(torch.equal(dst, pool)))
        dst.zero_()
        dhalves = [[dbase + i * page, dbase + i * page + page // 2] for i in range(pages)]
        out.append(
            s.batch_get_into_multi_buffers(
                [k + "v" for k in keys], dhalves, [[page // 2] * 2] * pages
            )
        )
        out.append(bool(torch.equal(dst, pool)))
        out += [s.unregister_buffer(base), s.unregister_buffer(dbase)]
        return out

    answers = same(pair, sglang)
    assert answers[3] == 0 and answers[4] == [0] * pages and answers[-3:] == [True, 0, 0]


def test_vllm_store_connector(pair: dict[str, Any]) -> None:
    def vllm(s: Any, n: str) -> Any:
        t = tag(f"vllm-{n}")
        config = ms.ReplicateConfig() if n == "theirs" else ReplicateConfig()
        config.preferred_segment = ""  # vLLM sets one only when configured
        block, blocks = 8192, 6
        cache, base = _pool(blocks, block)
        cache.copy_(
            torch.randint(
                0,
                255,
                (blocks * block,),
                dtype=torch.uint8,
                generator=torch.Generator().manual_seed(3),
            )
        )
        out: list[Any] = [s.register_buffer(base, blocks * block)]
        keys = [f"{t}@{i:04x}" for i in range(blocks)]
        # K and V segments of each block (a FlashAttention layout), one object per block
        addrs = [[base + i * block, base + i * block + block // 2] for i in range(blocks)]
        sizes = [[block // 2, block // 2] for _ in range(blocks)]
        out.append(s.batch_is_exist(keys))
        out.append(s.batch_put_from_multi_buffers(keys, addrs, sizes, config))
        out.append(s.batch_is_exist(keys + [f"{t}@missing"]))
        saved = cache.clone()
        cache.zero_()
        out.append(s.batch_get_into_multi_buffers(keys, addrs, sizes))
        out.append(bool(torch.equal(cache, saved)))
        out.append(s.unregister_buffer(base))
        return out

    answers = same(pair, vllm)
    assert answers[2] == [0] * 6 and answers[4] == [8192] * 6 and answers[5] is True
    # vLLM's tier logging asks for replica descriptors and catches any exception.
    if "batch_get_replica_desc" in UNSUPPORTED:
        with pytest.raises(AttributeError, match="query"):
            pair["ours"].batch_get_replica_desc(["k"])


METADATA_BYTES_LEN = 28


def test_lmcache_mooncake_adapter(pair: dict[str, Any]) -> None:
    def lmcache(s: Any, n: str) -> Any:
        t = tag(f"lmc-{n}")
        config = ms.ReplicateConfig() if n == "theirs" else ReplicateConfig()
        config.replica_num = 1
        config.preferred_segment = s.get_hostname()  # prefer_local_alloc (no segment here)
        config.preferred_segment = ""
        chunk = torch.arange(256 * 16, dtype=torch.float16).reshape(16, 256)
        kv_bytes = chunk.view(torch.uint8).numpy().tobytes()
        meta = struct.pack("<7i", len(kv_bytes), 16, 256, 0, 0, 5, 1)  # 28 bytes
        out: list[Any] = []
        # save_chunk_meta: put_parts(metadata, data), read back with batch_get_buffer
        out.append(s.put_parts(f"{t}-m", meta, kv_bytes))
        out.append(s.is_exist(f"{t}-m"))
        buffers = s.batch_get_buffer([f"{t}-m", f"{t}-none"])
        view = memoryview(buffers[0])
        out.append(bytes(view[:METADATA_BYTES_LEN]) == meta)
        got = torch.frombuffer(
            buffers[0], dtype=torch.float16, offset=METADATA_BYTES_LEN, count=16 * 256
        )
        out.append(bool(torch.equal(got.reshape(16, 256), chunk)))
        out.append(buffers[1])
        del view, got, buffers
        # optimized mode: put_from and batch_get_into over the registered CPU buffer
        pool, base = _pool(4, len(kv_bytes))
        out.append(s.register_buffer(base, pool.numel()))
        ctypes.memmove(base, kv_bytes, len(kv_bytes))
        out.append(s.put_from(f"{t}-z", base, len(kv_bytes), config))
        read = s.batch_get_into(
            [f"{t}-z", f"{t}-none"],
            [base + len(kv_bytes), base + 2 * len(kv_bytes)],
            [len(kv_bytes)] * 2,
        )
        out.append(read)
        out.append(bytes(pool[len(kv_bytes) : 2 * len(kv_bytes)].numpy()) == kv_bytes)
        out.append(s.unregister_buffer(base))
        return out

    answers = same(pair, lmcache)
    assert answers[:4] == [0, 1, True, True] and answers[4] is None
    assert answers[7] == [16 * 256 * 2, -704] and answers[8] is True


def test_remove_all_as_the_stacks_reset(pair: dict[str, Any]) -> None:
    theirs, ours = pair["theirs"], pair["ours"]
    t = tag("reset")
    assert ours.put(f"{t}-a", b"a") == 0 and theirs.put(f"{t}-b", b"b") == 0
    removed = ours.remove_all(force=True)
    assert removed >= 2 and ours.is_exist(f"{t}-b") == 0 and theirs.is_exist(f"{t}-a") == 0
    assert theirs.remove_all(True) == 0 and ours.remove_all() == 0
    assert ours.get_size(f"{t}-a") == -704 and ours.put(f"{t}-c", b"c" * MIB) == 0
