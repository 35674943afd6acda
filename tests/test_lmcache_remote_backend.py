"""LMCache's own Mooncake remote connector (``MooncakestoreConnector``, a ``mooncakestore://``
remote_url) under LMCache's ``RemoteBackend``, made once over Mooncake's
``MooncakeDistributedStore`` and once over the drop-in, on one cluster: the same answers, the
bytes read back equal to the bytes written, and each side reads what the other wrote.

LMCache's ``MooncakeLookupClient`` (0.5.6) cannot reach a master on either class: it hands
Mooncake's dict setup LMCache's key ``master_server_address``, which Mooncake does not read
(its key is ``master_server_addr``), so the client aims at Mooncake's default master
127.0.0.1:50051; Mooncake's class retries there for about 90 s and answers -1, which LMCache
ignores.  The drop-in answers the same -1 within its 2 s probe (the last test).

LMCache imports ``mooncake.store`` by name when it makes a connector or a lookup client; the
drop-in takes that module's place in ``sys.modules`` while the drop-in's are made (the one
import a user changes).  Stood in for: nothing.  LMCache's real LocalCPUBackend allocates
the memory objects, its RemoteBackend runs the connector on an event loop of its own.

Needs lmcache (``scripts/install_lmcache.sh``); skipped without it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("lmcache")

import mooncake.store as theirs_module  # noqa: E402
import torch  # noqa: E402
from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.lookup_client.mooncake_lookup_client import MooncakeLookupClient  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402
from lmcache.v1.storage_backend.remote_backend import RemoteBackend  # noqa: E402
from lmcache.v1.token_database import ChunkedTokenDatabase  # noqa: E402

import mooncake_cffi.store as ours_module  # noqa: E402
from mooncake_cffi.cluster import LocalCluster  # noqa: E402

CHUNK = 16
KV_SHAPE = (2, 2, CHUNK, 2, 8)  # layers, k/v, tokens, heads, head size
OBJ_SHAPE = torch.Size((2, 2, CHUNK, 16))  # KV_2LTD: k/v, layers, tokens, hidden
MODULES = {"theirs": theirs_module, "ours": ours_module}


@pytest.fixture(scope="module")
def local(make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("256 MB").start()


def _config(local: LocalCluster) -> Any:
    return LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.05,
        remote_url=f"mooncakestore://{local.master_addr}", remote_serde="naive",
        extra_config={"local_hostname": "127.0.0.1", "metadata_server": local.metadata_server,
                      "mooncake_master_server_addr": local.master_addr, "protocol": "tcp",
                      "mooncake_global_segment_size": 0, "local_buffer_size": 16 << 20},
    )  # fmt: skip


def _metadata(model: str) -> Any:
    return LMCacheMetadata(
        model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.float32, kv_shape=KV_SHAPE, chunk_size=CHUNK,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stacks(local: LocalCluster) -> Iterator[dict[str, Any]]:
    """Per name: LMCache's RemoteBackend and its LocalCPUBackend, made with ``mooncake.store``
    being Mooncake's module (theirs) or the drop-in (ours)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    config, metadata = _config(local), _metadata("org/remote-test")
    made: dict[str, Any] = {}
    saved = sys.modules["mooncake.store"]
    try:
        for name, module in MODULES.items():
            sys.modules["mooncake.store"] = module
            cpu = LocalCPUBackend(config, metadata, dst_device="cpu")
            remote = RemoteBackend(config, metadata, loop, cpu, dst_device="cpu")
            made[name] = {"cpu": cpu, "remote": remote}
        sys.modules["mooncake.store"] = saved
        yield made
    finally:
        sys.modules["mooncake.store"] = saved
        for parts in made.values():
            parts["remote"].close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_each_side_runs_on_its_own_class(stacks: dict[str, Any]) -> None:
    for name, parts in stacks.items():
        store = parts["remote"].connection._connector.store
        assert type(store) is MODULES[name].MooncakeDistributedStore


def _objects(cpu: Any, n: int, base: float) -> list[Any]:
    objs = []
    for i in range(n):
        obj = cpu.allocate(OBJ_SHAPE, torch.float32, MemoryFormat.KV_2LTD)
        obj.tensor.copy_(torch.arange(obj.tensor.numel(), dtype=torch.float32).view(OBJ_SHAPE))
        obj.tensor.add_(base + i * 1000)
        objs.append(obj)
    return objs


def _stored(remote: Any, keys: list[Any], timeout: float = 10.0) -> list[bool]:
    deadline = time.monotonic() + timeout
    while True:
        found = [bool(remote.contains(k)) for k in keys]
        if all(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _round_trip(parts: dict[str, Any], n: int, chunk0: int, base: float) -> list[Any]:
    cpu, remote = parts["cpu"], parts["remote"]
    keys = [CacheEngineKey("org/remote-test", 1, 0, chunk0 + i, torch.float32) for i in range(n)]
    objs = _objects(cpu, n, base)
    expect = [o.tensor.clone() for o in objs]
    out: list[Any] = [[bool(remote.contains(k)) for k in keys]]
    remote.batched_submit_put_task(keys, objs)
    out.append(_stored(remote, keys))
    got = remote.batched_get_blocking(keys)
    out.append([g is not None and bool(torch.equal(g.tensor, e)) for g, e in zip(got, expect)])
    missing = CacheEngineKey("org/remote-test", 1, 0, chunk0 + 10_000, torch.float32)
    out.append([bool(remote.contains(missing)), remote.batched_get_blocking([missing])])
    for o in [*objs, *[g for g in got if g is not None]]:
        o.ref_count_down()
    return out


def test_the_remote_backend_answers_and_bytes_as_on_mooncakes_class(
    stacks: dict[str, Any],
) -> None:
    answers = {
        name: _round_trip(parts, 8, 1000 + 100 * i, float(i * 10_000))
        for i, (name, parts) in enumerate(stacks.items())
    }
    assert answers["ours"] == answers["theirs"], answers
    assert answers["ours"] == [[False] * 8, [True] * 8, [True] * 8, [False, [None]]]


def test_each_reads_what_the_other_wrote(stacks: dict[str, Any]) -> None:
    theirs, ours = stacks["theirs"], stacks["ours"]
    for writer, reader, chunk0 in ((theirs, ours, 3000), (ours, theirs, 4000)):
        keys = [
            CacheEngineKey("org/remote-test", 1, 0, chunk0 + i, torch.float32) for i in range(4)
        ]
        objs = _objects(writer["cpu"], 4, float(chunk0))
        expect = [o.tensor.clone() for o in objs]
        writer["remote"].batched_submit_put_task(keys, objs)
        assert _stored(writer["remote"], keys) == [True] * 4
        got = reader["remote"].batched_get_blocking(keys)
        assert [g is not None and bool(torch.equal(g.tensor, e)) for g, e in zip(got, expect)] == [
            True
        ] * 4
        for o in [*objs, *got]:
            o.ref_count_down()


def test_lmcaches_lookup_client_misses_its_master_and_says_so_at_once(
    local: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mooncake.store", ours_module)
    began = time.monotonic()
    lookup = MooncakeLookupClient(_config(local), _metadata("org/remote-test"), local.master_addr)
    assert time.monotonic() - began < 10  # Mooncake's class: about 90 s
    assert lookup.store.client is None  # the setup answered -1: 127.0.0.1:50051 is not it
    tokens = torch.arange(2 * CHUNK, dtype=torch.long)
    assert lookup.lookup(tokens) == 0
    database = ChunkedTokenDatabase(_config(local), _metadata("org/remote-test"))
    assert len(list(database.process_tokens(tokens))) == 2
