"""Replica descriptors, the honest setup signature and the module names of mooncake.store on
the drop-in, side by side with Mooncake's own class on one cluster.  The drop-in asks the
master for descriptors as Mooncake's class does (no admin URL in its setup)."""

from __future__ import annotations

import inspect
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from process_helpers import gone, wait_until
from store_helpers import Memory, setup_args, tag

import mooncake_cffi.store as store_module
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import MooncakeDistributedStore, ReplicaStatus

ms = pytest.importorskip("mooncake.store")


@pytest.fixture(scope="module")
def pair(make_module_cluster: Callable[..., LocalCluster]) -> Iterator[dict[str, Any]]:
    # A cluster of its own: the descriptors compared are of keys that must stay put between
    # two reads, and a master under space pressure from another file's tests evicts objects.
    cluster = make_module_cluster("256 MB").start()
    theirs, ours = ms.MooncakeDistributedStore(), MooncakeDistributedStore()
    try:
        assert theirs.setup(*setup_args(cluster)) == 0
        # No admin_url: the descriptors come from the master's RPC, as Mooncake's do (the
        # default admin URL, port 9003, is not this cluster's).
        config = dict(zip(("local_hostname", "metadata_server"), setup_args(cluster)[:2]))
        config.update(master_server_addr=cluster.master_addr, protocol="tcp",
                      global_segment_size="0")  # fmt: skip
        assert ours.setup(config) == 0
        yield {"theirs": theirs, "ours": ours}
    finally:
        theirs.close()
        ours.close()


def _facts(replicas: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for r in replicas:
        kinds = (r.is_memory_replica(), r.is_disk_replica(), r.is_local_disk_replica())
        row: tuple[Any, ...] = (*kinds, int(r.status), r.status.name)
        if r.is_memory_replica():
            d = r.get_memory_descriptor().buffer_descriptor
            row += (d.size, d.buffer_address, d.transport_endpoint, repr(d))
            with pytest.raises(RuntimeError, match="Expected DiskDescriptor"):
                r.get_disk_descriptor()
        out.append(row)
    return out


def test_replica_descriptors_answer_as_mooncakes(pair: dict[str, Any]) -> None:
    theirs, ours = pair["theirs"], pair["ours"]
    keys = [tag("desc") for _ in range(3)]
    for i, k in enumerate(keys):
        assert theirs.put(k, bytes([i + 1]) * (1000 + i)) == 0
    missing, pending = tag("desc-missing"), tag("desc-pending")
    assert theirs.batch_put_session_start([pending], [4096]) == [0]
    try:
        for k in keys:
            assert _facts(ours.get_replica_desc(k)) == _facts(theirs.get_replica_desc(k))
        assert ours.get_replica_desc(missing) == [] == theirs.get_replica_desc(missing)
        assert ours.get_replica_desc(pending) == [] == theirs.get_replica_desc(pending)
        asked = [keys[0], missing, keys[1], pending, keys[2]]
        mine, real = ours.batch_get_replica_desc(asked), theirs.batch_get_replica_desc(asked)
        assert sorted(mine) == sorted(real) == sorted(keys)
        assert {k: _facts(v) for k, v in mine.items()} == {k: _facts(v) for k, v in real.items()}
        assert ours.batch_get_replica_desc([]) == {} == theirs.batch_get_replica_desc([])
        first = _facts(ours.get_replica_desc(keys[0]))[0]
        assert first[:5] == (True, False, False, 3, "COMPLETE") and first[5] == 1000
    finally:
        theirs.batch_put_session_revoke([pending])
        theirs.batch_remove(keys, True)


def _endpoints(replicas: list[Any]) -> list[str]:
    return sorted(
        r.get_memory_descriptor().buffer_descriptor.transport_endpoint
        for r in replicas
        if r.is_memory_replica()
    )


@pytest.mark.slow
def test_two_replicas_on_two_nodes_and_after_one_dies_answer_as_mooncakes(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """replica_num 2 over two storage nodes: both classes list the same two memory replicas
    (one per node, their endpoints); once a node is killed and the master has dropped its
    segment, both list the survivor only."""
    local = make_cluster(["128 MB", "128 MB"], storage_nodes=2, client_ttl=2).start()
    theirs, ours = ms.MooncakeDistributedStore(), MooncakeDistributedStore()
    try:
        assert theirs.setup(*setup_args(local)) == 0
        assert ours.setup(local.client_config()) == 0
        config = ms.ReplicateConfig()
        config.replica_num = 2
        keys = [tag("two") for _ in range(4)]
        for k in keys:
            assert theirs.put(k, b"r" * 8192, config) == 0
        real = theirs.batch_get_replica_desc(keys)
        mine = ours.batch_get_replica_desc(keys)
        assert {k: _facts(v) for k, v in mine.items()} == {k: _facts(v) for k, v in real.items()}
        both = {e for v in real.values() for e in _endpoints(v)}  # one per node
        assert len(both) == 2 and all(len(_endpoints(v)) == 2 for v in mine.values())
        for k in keys:
            assert _facts(ours.get_replica_desc(k)) == _facts(theirs.get_replica_desc(k))

        victim = local.pids["storage1"]
        os.kill(victim, signal.SIGKILL)
        wait_until("the killed node to be gone", lambda: gone(victim))
        wait_until(
            "the master to drop the dead node's replicas",
            lambda: all(len(v) == 1 for v in theirs.batch_get_replica_desc(keys).values()),
        )
        real = theirs.batch_get_replica_desc(keys)
        mine = ours.batch_get_replica_desc(keys)
        assert sorted(mine) == sorted(real) == sorted(keys)
        assert {k: _facts(v) for k, v in mine.items()} == {k: _facts(v) for k, v in real.items()}
        survivors = {e for v in mine.values() for e in _endpoints(v)}
        assert len(survivors) == 1 and survivors < both
        assert _facts(ours.get_replica_desc(keys[0])) == _facts(theirs.get_replica_desc(keys[0]))
    finally:
        theirs.close()
        ours.close()


def test_a_store_not_set_up_has_no_descriptors() -> None:
    s = MooncakeDistributedStore()  # (Mooncake's own crashes the process here)
    assert s.get_replica_desc("k") == [] and s.batch_get_replica_desc(["k"]) == {}


def test_replica_status_is_mooncakes() -> None:
    assert {m.name: m.value for m in ReplicaStatus} == {
        name: int(member) for name, member in ms.ReplicaStatus.__members__.items()
    }


def test_setup_shows_mooncakes_positional_form_and_both_overloads() -> None:
    sig = inspect.signature(MooncakeDistributedStore.setup)
    assert "enable_ssd_offload" in sig.parameters  # vLLM-Ascend's probe
    first = ms.MooncakeDistributedStore.setup.__doc__.splitlines()[3]
    theirs = first.split("(", 1)[1].rsplit(") -> ", 1)[0].split(", ")[1:]
    ours = [str(p) for p in list(sig.parameters.values())[1:]]
    assert ours == theirs
    doc = MooncakeDistributedStore.setup.__doc__ or ""
    assert "Overloaded function." in doc and "enable_ssd_offload: bool = False" in doc
    assert "2. setup(self: mooncake_cffi.store.MooncakeDistributedStore, config: dict)" in doc


def test_the_dict_form_still_works(cluster: LocalCluster) -> None:
    s = MooncakeDistributedStore()
    assert s.setup(cluster.client_config()) == 0
    try:
        key, m = tag("dict"), Memory(16, b"d" * 16)
        assert s.put_from(key, m.ptr, 16) == 0 and s.get(key) == b"d" * 16
        assert s.remove(key, True) == 0
    finally:
        s.close()


#: Module names of mooncake.store the drop-in exports, and those it leaves out.
EXPORTED = {
    "BufferHandle", "Descriptor", "DiskDescriptor", "MemoryDescriptor",
    "MooncakeDistributedStore", "MooncakeHostMemAllocator", "ObjectDataType",
    "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig", "SoftPinAction",
    "bind_to_numa_node",
}  # fmt: skip


def test_module_names_stacks_import_are_exported_or_absent() -> None:
    theirs = {n for n in dir(ms) if not n.startswith("_")}
    ours = {n for n in dir(store_module) if not n.startswith("_")}
    assert EXPORTED <= theirs and EXPORTED <= ours
    assert set(store_module.__all__) == EXPORTED
    with pytest.raises(ImportError):  # the names left out are absent, not stubs
        exec("from mooncake_cffi.store import EngramStore", {})


def test_bind_to_numa_node_answers_as_mooncakes() -> None:
    assert ms.bind_to_numa_node(0) is None and store_module.bind_to_numa_node(0) is None
    assert store_module.bind_to_numa_node(99) is None  # a warning, as Mooncake's
    with pytest.raises(TypeError):
        store_module.bind_to_numa_node("0")  # type: ignore[arg-type]
