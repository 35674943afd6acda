"""LMCache's own NativeConnectorL2Adapter test cases, run against our connector and a cluster.

LMCache tests its ``NativeConnectorL2Adapter`` (``tests/v1/distributed/
test_native_connector_l2_adapter.py`` in its repository) with an in-memory mock client.
The PyPI wheel ships no tests, so these are our own tests of the same behaviours, with
LMCache's real adapter wrapped around a real :class:`MooncakeConnector` and a key prefix
per test (the cluster is shared and Mooncake keeps the first value written).  Each test
names the upstream case it mirrors.  Left out: the upstream cases about key serialisation,
ObjectKey validation and other adapters' configs, which do not involve a connector.

Needs lmcache (``scripts/install_lmcache.sh``); skipped without it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("lmcache")

import torch  # noqa: E402
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)
from lmcache.v1.memory_management import (  # noqa: E402
    MemoryFormat,
    MemoryObjMetadata,
    TensorMemoryObj,
)
from lmcache_helpers import signalled  # noqa: E402

from mooncake_cffi.lmcache import MooncakeConnector  # noqa: E402

LAYOUT = {0: MemoryLayoutDesc(shapes=[], dtypes=[])}


def object_key(chunk: int, model: str = "org/test-model") -> ObjectKey:
    return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(chunk), model_name=model, kv_rank=0)


def tensor_obj(n_floats: int = 1024, fill: float = 1.0) -> TensorMemoryObj:
    data = torch.full((n_floats,), fill, dtype=torch.float32)
    meta = MemoryObjMetadata(
        shape=torch.Size([n_floats]),
        dtype=torch.float32,
        address=0,
        phy_size=n_floats * 4,
        fmt=MemoryFormat.KV_2LTD,
        ref_count=1,
    )
    return TensorMemoryObj(data, meta, parent_allocator=None)


def padded_obj(logical: int = 4000, physical: int = 4096, fill: int = 7):
    """A uint8 object whose physical slot is larger than its logical size, and its arena."""
    arena = torch.full((physical,), fill, dtype=torch.uint8)
    meta = MemoryObjMetadata(
        shape=torch.Size([logical]),
        dtype=torch.uint8,
        address=0,
        phy_size=physical,
        fmt=MemoryFormat.KV_2LTD,
        ref_count=1,
    )
    return TensorMemoryObj(arena[:logical], meta, parent_allocator=None), arena


def store(adp: NativeConnectorL2Adapter, keys: list[ObjectKey], objs: list[Any]) -> dict:
    task = adp.submit_store_task(keys, objs)
    done: dict = {}
    while task not in done:
        assert signalled(adp.get_store_event_fd()), "store did not complete"
        done.update(adp.pop_completed_store_tasks())
    return done


def lookup(adp: NativeConnectorL2Adapter, keys: list[ObjectKey]):
    task = adp.submit_lookup_and_lock_task(keys, LAYOUT)
    assert signalled(adp.get_lookup_and_lock_event_fd()), "lookup did not complete"
    return adp.query_lookup_and_lock_result(task)


def load(adp: NativeConnectorL2Adapter, keys: list[ObjectKey], objs: list[Any]):
    task = adp.submit_load_task(keys, objs)
    assert signalled(adp.get_load_event_fd()), "load did not complete"
    return adp.query_load_result(task)


@pytest.fixture
def make_adapter(cluster_config: dict[str, Any]):
    made: list[NativeConnectorL2Adapter] = []

    def factory(**kwargs: Any) -> NativeConnectorL2Adapter:
        prefix = f"upstream-{uuid.uuid4().hex[:12]}/"
        conn = MooncakeConnector(**cluster_config, key_prefix=prefix)
        adp = NativeConnectorL2Adapter(conn, **kwargs)
        made.append(adp)
        return adp

    yield factory
    for adp in made:
        adp.close()


@pytest.fixture
def adapter(make_adapter):
    return make_adapter()


# TestEventFdInterface.test_three_distinct_event_fds
def test_the_adapter_has_three_distinct_event_fds(adapter):
    fds = {
        adapter.get_store_event_fd(),
        adapter.get_lookup_and_lock_event_fd(),
        adapter.get_load_event_fd(),
    }
    assert len(fds) == 3 and min(fds) >= 0


# TestStoreInterface.test_submit_store_returns_task_id, test_store_signals_event_fd_and_completes
def test_a_store_returns_a_task_id_signals_its_fd_and_succeeds(adapter):
    task = adapter.submit_store_task([object_key(1)], [tensor_obj()])
    assert isinstance(task, int)
    assert signalled(adapter.get_store_event_fd())
    done = adapter.pop_completed_store_tasks()
    assert done[task].is_successful()


# TestStoreInterface.test_pop_clears_completed_tasks
def test_popping_completed_stores_clears_them(adapter):
    assert len(store(adapter, [object_key(1)], [tensor_obj()])) == 1
    assert adapter.pop_completed_store_tasks() == {}


# TestStoreInterface.test_multiple_store_tasks_get_unique_ids
def test_store_tasks_get_unique_ids_and_all_succeed(adapter):
    tasks = {adapter.submit_store_task([object_key(i)], [tensor_obj(fill=i)]) for i in range(5)}
    assert len(tasks) == 5
    done: dict = {}
    while len(done) < 5:
        assert signalled(adapter.get_store_event_fd())
        done.update(adapter.pop_completed_store_tasks())
    assert all(done[t].is_successful() for t in tasks)


# TestStoreInterface.test_batch_store
def test_a_batch_store_succeeds(adapter):
    keys = [object_key(i) for i in range(3)]
    done = store(adapter, keys, [tensor_obj(fill=i) for i in range(3)])
    assert all(r.is_successful() for r in done.values())


# TestLookupAndLockInterface.test_lookup_nonexistent_key / test_lookup_existing_key
def test_lookup_finds_stored_keys_only(adapter):
    store(adapter, [object_key(1)], [tensor_obj()])
    assert lookup(adapter, [object_key(1)]).test(0) is True
    assert lookup(adapter, [object_key(999)]).test(0) is False


# TestLookupAndLockInterface.test_lookup_mixed_keys
def test_lookup_of_mixed_keys_sets_only_the_stored_bits(adapter):
    store(adapter, [object_key(1)], [tensor_obj()])
    bitmap = lookup(adapter, [object_key(1), object_key(999)])
    assert (bitmap.test(0), bitmap.test(1)) == (True, False)


# TestLookupAndLockInterface.test_query_is_one_shot / test_query_unknown_task_returns_none
def test_a_lookup_result_is_returned_once_and_unknown_tasks_have_none(adapter):
    task = adapter.submit_lookup_and_lock_task([object_key(1)], LAYOUT)
    assert signalled(adapter.get_lookup_and_lock_event_fd())
    assert adapter.query_lookup_and_lock_result(task) is not None
    assert adapter.query_lookup_and_lock_result(task) is None
    assert adapter.query_lookup_and_lock_result(99999) is None


# TestUnlockInterface.test_unlock_does_not_raise / test_unlock_after_lock
def test_unlock_with_or_without_a_lock_does_not_raise(adapter):
    adapter.submit_unlock([object_key(1)])
    store(adapter, [object_key(1)], [tensor_obj()])
    assert lookup(adapter, [object_key(1)]).test(0) is True
    adapter.submit_unlock([object_key(1)])


# TestLoadInterface.test_submit_load_returns_task_id / test_load_signals_event_fd
def test_a_load_returns_a_task_id_and_signals_its_fd(adapter):
    task = adapter.submit_load_task([object_key(1)], [tensor_obj()])
    assert isinstance(task, int)
    assert signalled(adapter.get_load_event_fd())


# TestLoadInterface.test_load_existing_key_copies_data
def test_a_load_copies_the_stored_data(adapter):
    store(adapter, [object_key(1)], [tensor_obj(100, 42.0)])
    target = tensor_obj(100, 0.0)
    assert load(adapter, [object_key(1)], [target]).test(0) is True
    assert torch.all(target.tensor == 42.0)


# TestLoadInterface.test_load_nonexistent_key_fails
def test_a_load_of_a_missing_key_sets_no_bit(adapter):
    assert load(adapter, [object_key(999)], [tensor_obj()]).test(0) is False


# Not upstream (its mock checks sizes the same way): a different size is no hit.
def test_a_load_into_a_buffer_of_another_size_sets_no_bit(adapter):
    store(adapter, [object_key(1)], [tensor_obj(100)])
    assert load(adapter, [object_key(1)], [tensor_obj(50)]).test(0) is False
    assert load(adapter, [object_key(1)], [tensor_obj(200)]).test(0) is False


# TestLoadInterface.test_query_load_is_one_shot / test_query_unknown_task_returns_none
def test_a_load_result_is_returned_once_and_unknown_tasks_have_none(adapter):
    task = adapter.submit_load_task([object_key(1)], [tensor_obj()])
    assert signalled(adapter.get_load_event_fd())
    assert adapter.query_load_result(task) is not None
    assert adapter.query_load_result(task) is None
    assert adapter.query_load_result(99999) is None


# TestEndToEndWorkflow.test_store_lookup_load_workflow
def test_store_lookup_load_unlock_workflow(adapter):
    key = object_key(1)
    assert store(adapter, [key], [tensor_obj(256, 123.0)]).popitem()[1].is_successful()
    assert lookup(adapter, [key]).test(0) is True
    target = tensor_obj(256, 0.0)
    assert load(adapter, [key], [target]).test(0) is True
    assert torch.all(target.tensor == 123.0)
    adapter.submit_unlock([key])


# TestEndToEndWorkflow.test_multiple_objects_workflow
def test_workflow_with_several_objects(adapter):
    keys = [object_key(i) for i in range(5)]
    store(adapter, keys, [tensor_obj(64, i * 10.0) for i in range(5)])
    found = lookup(adapter, keys)
    assert all(found.test(i) for i in range(5))
    targets = [tensor_obj(64, 0.0) for _ in range(5)]
    loaded = load(adapter, keys, targets)
    for i in range(5):
        assert loaded.test(i) is True
        assert torch.all(targets[i].tensor == i * 10.0)


# TestClose.test_close_does_not_raise / test_close_after_operations
def test_close_after_operations_does_not_raise(make_adapter):
    adp = make_adapter()
    store(adp, [object_key(1)], [tensor_obj()])
    adp.close()


# TestDeleteInterface.test_delete_existing_key
def test_delete_removes_a_looked_up_key(adapter):
    key = object_key(1)
    store(adapter, [key], [tensor_obj()])
    assert lookup(adapter, [key]).test(0) is True  # also takes Mooncake's read lease
    adapter.submit_unlock([key])
    adapter.delete([key])
    assert lookup(adapter, [key]).test(0) is False


# TestDeleteInterface.test_delete_nonexistent_key / test_delete_empty_keys
def test_delete_of_missing_or_no_keys_does_not_raise(adapter):
    adapter.delete([object_key(999)])
    adapter.delete([])


# TestDeleteInterface.test_delete_batch
def test_delete_of_part_of_a_batch(adapter):
    keys = [object_key(i) for i in range(5)]
    store(adapter, keys, [tensor_obj(fill=i) for i in range(5)])
    adapter.delete(keys[:3])
    found = lookup(adapter, keys)
    assert [found.test(i) for i in range(5)] == [False, False, False, True, True]
    adapter.submit_unlock(keys[3:])


CAPACITY_GB = 2000 / (1024**3)  # 2000 bytes: five objects of 100 floats


# TestUsageTracking.test_get_usage_without_capacity
def test_usage_without_a_capacity_is_the_sentinel(adapter):
    usage = adapter.get_usage()
    assert (usage.usage_fraction, usage.total_capacity_bytes) == (-1.0, 0)


# TestUsageTracking.test_get_usage_starts_at_zero / test_get_usage_after_store /
# test_get_usage_after_delete
def test_usage_follows_stores_and_deletes(make_adapter):
    adp = make_adapter(max_capacity_gb=CAPACITY_GB)
    assert adp.get_usage().usage_fraction == 0.0
    store(adp, [object_key(1)], [tensor_obj(100)])
    usage = adp.get_usage()
    assert usage.total_bytes_used == 400 and usage.usage_fraction == pytest.approx(0.2)
    adp.delete([object_key(1)])
    assert adp.get_usage().total_bytes_used == 0


# TestUsageTracking.test_get_usage_store_delete_cycle
def test_usage_after_storing_three_and_deleting_two(make_adapter):
    adp = make_adapter(max_capacity_gb=CAPACITY_GB)
    keys = [object_key(i) for i in range(3)]
    store(adp, keys, [tensor_obj(100, i) for i in range(3)])
    assert adp.get_usage().total_bytes_used == 1200
    adp.delete(keys[:2])
    assert adp.get_usage().usage_fraction == pytest.approx(400 / 2000)


# TestUsageTracking.test_idempotent_store_no_double_count
def test_storing_a_key_twice_counts_its_bytes_once(make_adapter):
    adp = make_adapter(max_capacity_gb=CAPACITY_GB)
    store(adp, [object_key(1)], [tensor_obj(100)])
    store(adp, [object_key(1)], [tensor_obj(100)])
    assert adp.get_usage().total_bytes_used == 400


# TestPadBuffersToAlignment.test_padded_round_trip_preserves_logical_bytes
def test_padded_buffers_round_trip_their_logical_bytes(make_adapter):
    adp = make_adapter(pad_buffers_to_alignment=True)
    source, source_arena = padded_obj(fill=7)
    target, target_arena = padded_obj(fill=0)
    store(adp, [object_key(1)], [source])
    assert load(adp, [object_key(1)], [target]).test(0) is True
    assert torch.equal(target_arena[:4000], source_arena[:4000])


# TestPadBuffersToAlignment.test_usage_reflects_submitted_bytes
def test_usage_charges_the_padded_size_when_padding(make_adapter):
    plain = make_adapter()
    store(plain, [object_key(1)], [padded_obj()[0]])
    assert plain.get_usage().total_bytes_used == 4000
    padded = make_adapter(pad_buffers_to_alignment=True)
    store(padded, [object_key(2)], [padded_obj()[0]])
    assert padded.get_usage().total_bytes_used == 4096
