"""The stacks' own loops, over Mooncake's class and over the drop-in, in one process.

Each stack's code is PyPI's, run as it runs in a server: the only change is which module
``mooncake.store`` is while its objects are made (the one import a user changes).

``--stack lmcache`` (run with the LMCache virtualenv's python, ``scripts/install_lmcache.sh``
prints its path): LMCache's ``MooncakestoreConnector`` in its zero-copy mode
(``save_chunk_meta`` False), its memory objects from LMCache's ``LocalCPUBackend``, awaited
on an asyncio loop as LMCache's ``RemoteBackend`` awaits it:

    batched_put        batch_put_from of a batch of fresh chunks (in a worker thread)
    batched_contains   batched_async_contains: is_exist per key until the first miss
    batched_get        batch_get_into into freshly allocated memory objects
    exists             exists_sync of one key

``--stack sglang`` (the SGLang virtualenv's python, ``scripts/install_sglang.sh``): SGLang's
HiCache ``MooncakeStore`` backend over a host KV pool (the mock of SGLang's own test module),
with its page keys per tensor-parallel rank:

    batch_set_v1       batch_exists, then batch_put_from of the pages not stored yet (fresh)
    batch_exists       batch_is_exist of every page's keys
    batch_get_v1       batch_get_into into the host pool
    exists             exists of one page's k part

``--stack vllm`` (this package's own virtualenv: no engine is imported): the store calls
vLLM's ``MooncakeStoreConnector`` makes per request (its ``MooncakeStoreWorker`` of vllm
0.32.0, replayed call for call), over a KV cache of one region per layer registered with
``register_buffer`` as the worker registers vLLM's, blocks of 32 tokens, one key per block
named as the worker names it (``<model>@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@<hash>``),
its value the block's slice of every layer (one buffer per layer):

    save               the save thread: batch_is_exist of the request's block keys (dedup),
                       then batch_put_from_multi_buffers of the missing ones (all: fresh;
                       each of a round's ``--repeat`` saves has keys of its own)
    lookup             the scheduler's lookup: batch_is_exist of the prompt's block keys
    load               the load thread: batch_get_into_multi_buffers into other blocks

A vLLM call that answers a failure is counted and printed with its codes (vLLM logs it and
goes on: a failed save is a later miss, a failed load a recompute), not fatal.

Every round runs each loop on both classes, in an order that alternates each round; printed
per loop: each median time, the ratio of medians (ours / theirs: < 1 is faster) and the
p10..p90 of the per-round paired ratios.  Keys are fresh per round and force-removed after
it (untimed).  Nothing is pinned (``--pin split`` puts the cluster on the last CPU).  Each
class is ``--instances`` clients (default 2), created in a mirrored order and taken in turn
by the rounds (see ``mirrored_sets`` in bench/_common.py for why).  The drop-in is set up
as the stack sets it up (by default failing open: a deadline per call, which hands each data
call to a lane worker and back); ``--no-deadline-too`` adds a third contender, the drop-in
set up with ``"fail_open": false``, to show what that hand-off costs in the same run.

    $(scripts/install_lmcache.sh | tail -1)/bin/python bench/stacks.py --stack lmcache
    $(scripts/install_sglang.sh | tail -1)/bin/python bench/stacks.py --stack sglang [--quick]
    .venv/bin/python bench/stacks.py --stack vllm [--quick]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    add_instances,
    banner,
    check_installed,
    cluster,
    fmt,
    mirrored_sets,
    parser,
    quantile,
    table,
    write_json,
)

import mooncake_cffi.store as ours_module
from mooncake_cffi.store.setup_args import OPTIONS_ENV

SIDES = ("theirs", "ours")
#: ``--no-deadline-too``: a third contender, the drop-in set up with ``"fail_open": false``
#: (no deadline, so no lane hand-off per data call), through the variable the drop-in reads.
NO_DEADLINE = "ours_nd"


@contextmanager
def _as_mooncake(module: Any) -> Iterator[None]:
    """``mooncake.store`` is ``module`` inside the block (the stacks import it by name)."""
    import mooncake.store as theirs_module

    saved = sys.modules.get("mooncake.store", theirs_module)
    sys.modules["mooncake.store"] = module
    try:
        yield
    finally:
        sys.modules["mooncake.store"] = saved


def _module(side: str) -> Any:
    if side in ("ours", NO_DEADLINE):
        return ours_module
    import mooncake.store as theirs_module

    return theirs_module


class Loops:
    """A stack's loops on one side: ``loops[name]()`` runs one timed call of loop ``name``;
    ``prepare(round)`` readies the round's fresh keys (untimed), ``finish()`` removes them."""

    names: tuple[str, ...] = ()

    def prepare(self, round_: int) -> None:
        raise NotImplementedError

    def run(self, name: str) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# -- LMCache ------------------------------------------------------------------------------


class LMCacheLoops(Loops):
    names = ("batched_put", "batched_contains", "batched_get", "exists")

    def __init__(self, side: str, local: Any, loop: Any, chunks: int, tokens: int) -> None:
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.memory_management import MemoryFormat
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.connector.mooncakestore_connector import (
            MooncakestoreConnector,
        )
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

        self.torch, self.key_type, self.fmt = torch, CacheEngineKey, MemoryFormat.KV_2LTD
        self.loop, self.chunks, self.side = loop, chunks, side
        # A chunk of a small model's KV: 8 layers, k/v, tokens, 8 heads of 64, float16.
        self.kv_shape = (8, 2, tokens, 8, 64)
        self.obj_shape = torch.Size((2, 8, tokens, 8 * 64))
        self.model = f"bench/{side}-{uuid.uuid4().hex[:8]}"
        chunk_bytes = 2 * 8 * tokens * 8 * 64 * 2
        config = LMCacheEngineConfig.from_defaults(
            chunk_size=tokens, local_cpu=False,
            max_local_cpu_size=max(0.5, 4 * chunks * chunk_bytes / 2**30),
            remote_url=f"mooncakestore://{local.master_addr}", remote_serde="naive",
            extra_config={"local_hostname": "127.0.0.1", "metadata_server": local.metadata_server,
                          "mooncake_master_server_addr": local.master_addr, "protocol": "tcp",
                          "mooncake_global_segment_size": 0,
                          "local_buffer_size": 64 << 20, "save_chunk_meta": False},
        )  # fmt: skip
        metadata = LMCacheMetadata(
            model_name=self.model, world_size=1, local_world_size=1, worker_id=0,
            local_worker_id=0, kv_dtype=torch.float16, kv_shape=self.kv_shape, chunk_size=tokens,
        )  # fmt: skip
        with _as_mooncake(_module(side)):
            self.cpu = LocalCPUBackend(config, metadata, dst_device="cpu")
            self.conn = MooncakestoreConnector(loop, self.cpu, config)
        assert type(self.conn.store) is _module(side).MooncakeDistributedStore
        self.keys: list[Any] = []
        self.objs: list[Any] = []
        self.got: list[Any] = []

    def _await(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def prepare(self, round_: int) -> None:
        torch = self.torch
        base = round_ * self.chunks
        self.keys = [
            self.key_type(self.model, 1, 0, base + i, torch.float16) for i in range(self.chunks)
        ]
        self.objs = []
        for i in range(self.chunks):
            obj = self.cpu.allocate(self.obj_shape, torch.float16, self.fmt)
            obj.tensor.fill_(float((base + i) % 1000))
            self.objs.append(obj)

    def run(self, name: str) -> None:
        conn = self.conn
        if name == "batched_put":
            self._await(conn.batched_put(self.keys, self.objs))
        elif name == "batched_contains":
            hits = self._await(conn.batched_async_contains("bench", self.keys))
            if hits != len(self.keys):
                raise RuntimeError(f"{self.side}: {hits} of {len(self.keys)} chunks found")
        elif name == "batched_get":
            self._release(self.got)  # the previous call's (verified in finish: the last)
            self.got = self._await(conn.batched_get(self.keys))
            if any(g is None for g in self.got):
                raise RuntimeError(f"{self.side}: a chunk was not read")
        else:
            if not conn.exists_sync(self.keys[0]):
                raise RuntimeError(f"{self.side}: exists_sync missed a stored chunk")

    def finish(self) -> None:
        for got, obj in zip(self.got, self.objs, strict=False):
            if got is not None and not self.torch.equal(got.tensor, obj.tensor):
                raise RuntimeError(f"{self.side}: a chunk read back differs from the one written")
        self._release(self.objs)
        self._release(self.got)
        self.conn.store.batch_remove([k.to_string() for k in self.keys], True)
        self.objs, self.got = [], []

    @staticmethod
    def _release(objs: list[Any]) -> None:
        for o in objs:
            if o is not None:
                o.ref_count_down()

    def close(self) -> None:
        self._await(self.conn.close())


# -- SGLang -------------------------------------------------------------------------------


class SGLangLoops(Loops):
    names = ("batch_set_v1", "batch_exists", "batch_get_v1", "exists")

    def __init__(self, side: str, local: Any, tmp: Path, pages: int) -> None:
        import os

        import torch
        from sglang.srt.mem_cache.storage.mooncake_store import mooncake_store as sgl
        from sglang.srt.mem_cache.storage.mooncake_store import test_mooncake_store as sgl_tests

        self.torch, self.side, self.pages, self.sgl_tests = torch, side, pages, sgl_tests
        role = local.storage_roles[0]
        path = tmp / f"sglang-{side}.json"
        path.write_text(json.dumps({
            "local_hostname": "127.0.0.1", "metadata_server": local.metadata_server,
            "master_server_address": local.master_addr, "protocol": "tcp", "device_name": "",
            "global_segment_size": 0, "check_server": False, "standalone_storage": False,
            "client_server_address": f"{local.address(role)}:{local.ports[role + '_rpc']}",
        }))  # fmt: skip
        os.environ["SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"] = str(path)
        config = sgl_tests.make_hicache_storage_config(is_mla_model=False, tp_rank=0, tp_size=1)
        # Pages of 2 entries (k and v) of 32 Ki float32 elements each: 128 KiB a part.
        self.page_elements = 2 * (32 << 10)
        self.pool, self.buffer = sgl_tests.create_mock_host_kv_cache(
            2 * pages * self.page_elements, entries_per_page=2, page_elements=32 << 10
        )
        with _as_mooncake(_module(side)):
            self.store = sgl.MooncakeStore(config, mem_pool=self.pool)
            self.store.register_mem_pool_host(self.pool)
        assert type(self.store.store) is _module(side).MooncakeDistributedStore
        self.keys: list[str] = []
        self.tag = uuid.uuid4().hex[:8]

    def prepare(self, round_: int) -> None:
        self.keys = [f"bench-{self.side}-{self.tag}-{round_}-{i}" for i in range(self.pages)]
        self.buffer[: self.pages * self.page_elements].fill_(float(round_ % 100))
        self.buffer[self.pages * self.page_elements :].fill_(-1.0)
        store = self.store
        self.first_part = f"{store._tag_keys(self.keys[:1])[0]}_{store.mha_suffix}_k"

    def run(self, name: str) -> None:
        torch, store, n = self.torch, self.store, self.pages
        if name == "batch_set_v1":
            ok = store.batch_set_v1(self.keys, torch.arange(n))
            if not all(ok):
                raise RuntimeError(f"{self.side}: batch_set_v1 stored {sum(ok)} of {n} pages")
        elif name == "batch_exists":
            if store.batch_exists(self.keys) != n:
                raise RuntimeError(f"{self.side}: batch_exists missed stored pages")
        elif name == "batch_get_v1":
            ok = store.batch_get_v1(self.keys, torch.arange(n, 2 * n))
            if not all(ok):
                raise RuntimeError(f"{self.side}: batch_get_v1 read {sum(ok)} of {n} pages")
        else:  # exists() asks for the name as given: a page's k part
            if not store.exists(self.first_part):
                raise RuntimeError(f"{self.side}: exists missed a stored page")

    def finish(self) -> None:
        n = self.pages * self.page_elements
        if not self.torch.equal(self.buffer[:n], self.buffer[n : 2 * n]):
            raise RuntimeError(f"{self.side}: a page read back differs from the one written")
        store = self.store
        names = [f"{k}_{store.mha_suffix}_{p}" for k in store._tag_keys(self.keys) for p in "kv"]
        store.store.batch_remove(names, True)

    def close(self) -> None:
        self.store.close()
        self.store.store.close()


# -- vLLM ---------------------------------------------------------------------------------


class VLLMLoops(Loops):
    """vLLM's ``MooncakeStoreWorker`` calls, per request (see the module's docstring).

    The KV cache is one region per layer, blocks first (as ``group_kernel_blocks`` views
    vLLM's caches): block ``b`` of layer ``l`` is ``block_len`` bytes at ``base[l] + b *
    block_len``, K and V of its 32 tokens.  A request's blocks are ``0 .. blocks - 1``; the
    load reads them back into ``blocks .. 2 * blocks - 1``."""

    names = ("save", "lookup", "load")
    block_tokens = 32

    def __init__(
        self, side: str, local: Any, blocks: int, layers: int, heads: int, saves: int
    ) -> None:
        import hashlib

        import numpy as np

        module = _module(side)
        self.np, self.hashlib, self.side, self.blocks = np, hashlib, side, blocks
        self.saves = saves
        self.store = module.MooncakeDistributedStore()
        # vllm.distributed.mooncake_store.setup_mooncake_store: the positional setup, here
        # in standalone-store mode (no segment of its own: the KV lives on the storage node).
        rc = self.store.setup(
            "127.0.0.1", local.metadata_server, 0, 16 << 20, "tcp", "", local.master_addr
        )
        if rc != 0:
            raise RuntimeError(f"{side}: setup answered {rc}")
        self.config = module.ReplicateConfig()
        # K and V of 32 tokens, ``heads`` KV heads of 64, bfloat16: one layer's block.
        self.block_len = 2 * self.block_tokens * heads * 64 * 2
        self.regions = [np.zeros(2 * blocks * self.block_len, np.uint8) for _ in range(layers)]
        self.base = [int(r.ctypes.data) for r in self.regions]
        for region in self.regions:  # register_kv_caches: each layer's storage once
            if self.store.register_buffer(int(region.ctypes.data), region.nbytes) != 0:
                raise RuntimeError(f"{side}: register_buffer failed")
        # RankLocalStoreLayout's prefix: the model's last path part, the rank namespace.
        self.prefix = f"Llama-3.1-8B-Instruct@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{side}"
        self.src = self._values(range(blocks))
        self.dst = self._values(range(blocks, 2 * blocks))
        self.keys: list[str] = []
        self.fresh: list[list[str]] = []  # the round's key sets not saved yet
        self.failed = dict.fromkeys(self.names, 0)  # calls that answered a failure
        self.codes: set[int] = set()
        self.clean = True
        self.saved: list[list[str]] = []
        self.tag = uuid.uuid4().hex[:8]

    def _values(self, block_ids: Any) -> tuple[list[list[int]], list[list[int]]]:
        """prepare_values: per block, one address and one size per layer."""
        n = self.block_len
        return ([[b + i * n for b in self.base] for i in block_ids],
                [[n] * len(self.base) for _ in block_ids])  # fmt: skip

    def prepare(self, round_: int) -> None:
        # A block's hash is 32 bytes of sha256 (vLLM's default), in hex in the key.
        # Each save has fresh keys (a second save of the same keys would only ask, as
        # vLLM's dedup does); lookup and load take the first set, saved first.
        sha = self.hashlib.sha256
        self.fresh = [
            [
                f"{self.prefix}@{sha(f'{self.tag}/{round_}/{s}/{i}'.encode()).hexdigest()}"
                for i in range(self.blocks)
            ]
            for s in range(self.saves)
        ]
        self.keys, self.saved, self.clean = self.fresh[0], [], True
        half, np = self.blocks * self.block_len, self.np
        for region in self.regions:  # the prefill's KV, and the blocks the load fills
            region[:half] = np.frombuffer(np.random.bytes(half), np.uint8)
            region[half:] = 0

    def run(self, name: str) -> None:
        store, keys = self.store, self.keys
        if name == "save":
            keys = self.fresh.pop(0)
            self.saved.append(keys)
            exists = store.batch_is_exist(keys)
            missing = [i for i, e in enumerate(exists) if e != 1]
            if missing:
                addrs, sizes = self.src
                if len(missing) != len(keys):
                    keys = [keys[i] for i in missing]
                    addrs, sizes = [addrs[i] for i in missing], [sizes[i] for i in missing]
                res = store.batch_put_from_multi_buffers(keys, addrs, sizes, self.config)
                if any(r < 0 for r in res):
                    self._failed(name, res)
        elif name == "lookup":
            res = store.batch_is_exist(keys)
            if not all(r == 1 for r in res):
                self._failed(name, res)
        else:
            addrs, sizes = self.dst
            res = store.batch_get_into_multi_buffers(keys, addrs, sizes)
            if any(r < 0 for r in res):
                self._failed(name, res)

    def _failed(self, name: str, res: list[int]) -> None:
        """A call that answered a failure (vLLM logs it and goes on: a failed save is a
        later miss, a failed load a recompute): counted with its codes, and the round's
        bytes are not compared."""
        self.failed[name] += 1
        self.codes.update(r for r in res if r < 0)
        self.clean = False

    def finish(self) -> None:
        half = self.blocks * self.block_len
        for region in self.regions if self.clean else ():
            if not self.np.array_equal(region[:half], region[half:]):
                raise RuntimeError(f"{self.side}: a block read back differs from the one saved")
        for keys in self.saved + self.fresh:
            self.store.batch_remove(keys, True)

    def close(self) -> None:
        for base in self.base:
            self.store.unregister_buffer(base)
        self.store.close()


def _without_deadline(make: Callable[[str], Loops]) -> Callable[[str], Loops]:
    """``make``, with the drop-in's setup options saying ``"fail_open": false`` while the
    :data:`NO_DEADLINE` side is made (the stack's own code calls setup)."""

    def made(side: str) -> Loops:
        if side != NO_DEADLINE:
            return make(side)
        saved = os.environ.get(OPTIONS_ENV)
        os.environ[OPTIONS_ENV] = json.dumps({**json.loads(saved or "{}"), "fail_open": False})
        try:
            return make(side)
        finally:
            if saved is None:
                del os.environ[OPTIONS_ENV]
            else:
                os.environ[OPTIONS_ENV] = saved

    return made


# -- the rounds ---------------------------------------------------------------------------


def measure(sets: list[dict[str, Loops]], rounds: int, repeat: int) -> dict[str, Any]:
    """``rounds`` rounds, round ``r`` on the instances ``sets[r % len(sets)]``; in each, every
    loop on both sides, in an order that alternates each time a set comes round again (so
    every set runs in both orders), the median of ``repeat`` calls kept (LMCache's and
    SGLang's write loops run once: their keys are fresh; vLLM's save has a key set per
    call)."""
    names = next(iter(sets[0].values())).names
    times: dict[str, dict[str, list[float]]] = {n: {s: [] for s in sets[0]} for n in names}
    for r in range(rounds):
        sides = sets[r % len(sets)]
        order = list(sides) if (r // len(sets)) % 2 == 0 else list(reversed(sides))
        for side in order:
            sides[side].prepare(r)
        for name in names:
            calls = 1 if name in ("batched_put", "batch_set_v1") else repeat
            for side in order:
                loops = sides[side]
                took = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    loops.run(name)
                    took.append(time.perf_counter() - t0)
                times[name][side].append(statistics.median(took))
        for side in order:
            sides[side].finish()
    return times


def report(times: dict[str, dict[str, list[float]]], title: str) -> list[dict[str, Any]]:
    rows, out = [], []
    for name, by_side in times.items():
        theirs = by_side["theirs"]
        m_t = statistics.median(theirs)
        cell: dict[str, Any] = {"loop": name, "theirs_ms": m_t * 1e3, "theirs_s": theirs}
        row: list[Any] = [name, m_t * 1e3]
        for side in [s for s in by_side if s != "theirs"]:
            ours = by_side[side]
            paired = [o / t for o, t in zip(ours, theirs, strict=True)]
            m_o = statistics.median(ours)
            pre = "" if side == "ours" else "nd_"  # the first drop-in keeps the old names
            cell |= {
                f"{pre}ours_ms": m_o * 1e3,
                f"{pre}ratio": m_o / m_t,
                f"{pre}p10": quantile(paired, 0.1),
                f"{pre}p90": quantile(paired, 0.9),
                f"{pre}ours_s": ours,
            }
            row += [
                m_o * 1e3,
                m_o / m_t,
                f"{fmt(cell[pre + 'p10'], 2)}..{fmt(cell[pre + 'p90'], 2)}",
            ]
        out.append(cell)
        rows.append(row)
    headers = ["loop", "Mooncake's ms", "drop-in ms", "ratio", "p10..p90"]
    if NO_DEADLINE in next(iter(times.values())):
        headers += ["no deadline ms", "ratio", "p10..p90"]
    table(headers, rows, title)
    return out


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stack", choices=("lmcache", "sglang", "vllm"), required=True)
    p.add_argument("--rounds", type=int, default=41, help="rounds (default %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="calls of a read loop per round")
    p.add_argument("--chunks", type=int, default=16, help="LMCache: chunks per batch")
    p.add_argument("--tokens", type=int, default=256, help="LMCache: tokens per chunk")
    p.add_argument("--pages", type=int, default=32, help="SGLang: pages per batch")
    p.add_argument("--blocks", type=int, default=16, help="vLLM: 32-token blocks per request")
    p.add_argument("--layers", type=int, default=12, help="vLLM: the model's layers")
    p.add_argument("--heads", type=int, default=16, help="vLLM: KV heads (of 64, bfloat16)")
    p.add_argument(
        "--no-deadline-too",
        action="store_true",
        help="a third contender: the drop-in set up without a deadline (fail_open false)",
    )
    add_instances(p)
    args = p.parse_args()
    if args.quick:
        args.rounds, args.repeat = 5, 3
    check_installed()
    info = banner(f"stacks ({args.stack})", args)
    sides = SIDES + ((NO_DEADLINE,) if args.no_deadline_too else ())
    with cluster(args.segment, args.pin) as local, tempfile.TemporaryDirectory() as tmp:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        make: Callable[[str], Loops]
        if args.stack == "lmcache":
            size = 2 * 8 * args.tokens * 8 * 64 * 2
            what = f"{args.chunks} chunks of {args.tokens} tokens ({size >> 10} KiB each)"

            def make(side: str) -> Loops:
                return LMCacheLoops(side, local, loop, args.chunks, args.tokens)
        elif args.stack == "vllm":
            block = 2 * 32 * args.heads * 64 * 2
            what = (f"{args.blocks} blocks of 32 tokens, {args.layers} layers of "
                    f"{block >> 10} KiB each ({args.layers * block >> 10} KiB a key)")  # fmt: skip

            def make(side: str) -> Loops:
                saves = args.repeat
                return VLLMLoops(side, local, args.blocks, args.layers, args.heads, saves)
        else:
            what = f"{args.pages} pages of 2 x 128 KiB"

            def make(side: str) -> Loops:
                return SGLangLoops(side, local, Path(tmp), args.pages)

        sets = mirrored_sets(sides, _without_deadline(make), args.instances)
        try:
            measure(sets, 2 * len(sets), 1)  # warm-up: connections, the segment's pages
            for loops in (lo for s in sets for lo in s.values() if isinstance(lo, VLLMLoops)):
                loops.failed, loops.codes = dict.fromkeys(loops.names, 0), set()
            times = measure(sets, args.rounds, args.repeat)
            failed = _failures(sets)
        finally:
            for sides in sets:
                for loops in sides.values():
                    loops.close()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
    title = f"\n{args.stack}: {what}, {args.rounds} rounds (median of {args.repeat} reads each)"
    cells = report(times, title)
    for side, (counts, codes) in failed.items():
        print(f"{side}: calls that failed {counts}, codes {sorted(codes)}")
    failures = {side: {"calls": c, "codes": sorted(k)} for side, (c, k) in failed.items()}
    out = {"args": vars(args) | {"out": None}, "cells": cells, "failed": failures}
    write_json(f"stacks-{args.stack}", out, args.out, info)


def _failures(sets: list[dict[str, Loops]]) -> dict[str, tuple[dict[str, int], set[int]]]:
    """Per side, the calls of the vLLM loops that answered a failure, and their codes."""
    out: dict[str, tuple[dict[str, int], set[int]]] = {}
    for s in sets:
        for side, loops in s.items():
            if isinstance(loops, VLLMLoops):
                counts, codes = out.setdefault(side, (dict.fromkeys(loops.names, 0), set()))
                for name, n in loops.failed.items():
                    counts[name] += n
                codes |= loops.codes
    return out


if __name__ == "__main__":
    main()
