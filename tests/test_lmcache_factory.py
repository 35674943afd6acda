"""Both plugin types through LMCache's own parser and factory, as ``lmcache server`` builds them.

``add_l2_adapters_args`` -> ``parse_args_to_l2_adapters_config`` -> ``create_l2_adapter``
with ``"type": "plugin"`` (our MooncakeL2Adapter, which gets LMCache's L1 descriptor) and
``"type": "native_plugin"`` (LMCache's NativeConnectorL2Adapter over our connector); the L1
rules (rdma needs a valid descriptor, tcp registers only when asked) and the check of
LMCache's version.

Needs lmcache (``scripts/install_lmcache.sh``); skipped without it.
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any

import pytest

pytest.importorskip("lmcache")

import torch  # noqa: E402
from lmcache.v1.distributed.api import MemoryLayoutDesc  # noqa: E402
from lmcache.v1.distributed.internal_api import L1MemoryDesc  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface  # noqa: E402
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)
from lmcache_helpers import key, memory_obj, parse, signalled, spec  # noqa: E402

import mooncake_cffi.lmcache as plugin  # noqa: E402
from mooncake_cffi.lmcache import compat  # noqa: E402
from mooncake_cffi.lmcache.extension import LMCacheMooncakeClient  # noqa: E402

LAYOUT = {0: MemoryLayoutDesc(shapes=[], dtypes=[])}
# A master nobody listens on: a test that reached the network would fail differently.
UNREACHABLE = {
    "local_hostname": "127.0.0.1",
    "metadata_server": "http://127.0.0.1:1/metadata",
    "master_server_addr": "127.0.0.1:1",
}


def round_trip(adapter: L2AdapterInterface, source: list[Any], target: list[Any]) -> list[bool]:
    keys = [key(i) for i in range(len(source))]
    task = adapter.submit_store_task(keys, source)
    done: dict = {}
    while task not in done:
        assert signalled(adapter.get_store_event_fd())
        done.update(adapter.pop_completed_store_tasks())
    assert done[task].is_successful()
    task = adapter.submit_lookup_and_lock_task(keys, LAYOUT)
    assert signalled(adapter.get_lookup_and_lock_event_fd())
    found = adapter.query_lookup_and_lock_result(task)
    assert all(found.test(i) for i in range(len(keys)))
    adapter.submit_unlock(keys)
    task = adapter.submit_load_task(keys, target)
    assert signalled(adapter.get_load_event_fd())
    loaded = adapter.query_load_result(task)
    return [loaded.test(i) for i in range(len(keys))]


@pytest.fixture
def params(cluster_config: dict[str, Any]) -> dict[str, Any]:
    return dict(cluster_config, key_prefix=f"factory-{uuid.uuid4().hex[:12]}/")


def test_the_installed_lmcache_is_a_tested_release():
    assert compat.check_lmcache_version() in plugin.TESTED_LMCACHE_VERSIONS


@pytest.mark.parametrize("kind", ["plugin", "native_plugin"])
def test_lmcache_parses_and_creates_both_plugin_types(params, kind):
    mooncake_store_json = dict(params, num_workers=2, per_op_workers={"lookup": 1, "store": 1})
    config = parse(spec(kind, mooncake_store_json)).adapters[0]
    assert config.adapter_params == mooncake_store_json
    adapter = create_l2_adapter(config)
    try:
        assert isinstance(adapter, L2AdapterInterface)
        assert adapter.report_status()["is_healthy"] is True
        arena = torch.arange(8192, dtype=torch.int32).view(torch.uint8)
        out = torch.zeros(2 * 4096 * 4, dtype=torch.uint8)
        hits = round_trip(
            adapter,
            [memory_obj(arena, 0, 16384), memory_obj(arena, 16384, 16384)],
            [memory_obj(out, 0, 16384), memory_obj(out, 16384, 16384)],
        )
        assert hits == [True, True]
        assert torch.equal(out, arena)
    finally:
        adapter.close()


def test_max_capacity_gb_sits_inside_adapter_params_for_plugin(params):
    config = parse(spec("plugin", dict(params, max_capacity_gb=2))).adapters[0]
    adapter = create_l2_adapter(config)
    try:
        assert adapter.get_usage().total_capacity_bytes == 2 << 30
    finally:
        adapter.close()


def test_max_capacity_gb_sits_at_the_top_level_for_native_plugin(params):
    config = parse(spec("native_plugin", params, max_capacity_gb=2)).adapters[0]
    adapter = create_l2_adapter(config)
    try:
        assert adapter.get_usage().total_capacity_bytes == 2 << 30
    finally:
        adapter.close()


def test_tcp_round_trip_with_l1_registered(params):
    arena = torch.zeros(1 << 20, dtype=torch.uint8)
    desc = L1MemoryDesc(ptr=arena.data_ptr(), size=arena.numel(), align_bytes=1)
    config = parse(spec("plugin", dict(params, register_l1=True))).adapters[0]
    adapter = create_l2_adapter(config, l1_memory_desc=desc)
    try:
        assert adapter.report_status()["l1_registered"] is True
        assert adapter.connector.client.l1_registered is True
        arena[:65536] = torch.arange(65536, dtype=torch.int64).remainder(251).to(torch.uint8)
        hits = round_trip(
            adapter,
            [memory_obj(arena, i * 16384, 16384) for i in range(4)],
            [memory_obj(arena, 65536 + i * 16384, 16384) for i in range(4)],
        )
        assert hits == [True] * 4
        assert torch.equal(arena[65536:131072], arena[:65536])
    finally:
        adapter.close()


def test_tcp_does_not_register_the_l1_region_unless_asked(params):
    arena = torch.zeros(1 << 16, dtype=torch.uint8)
    desc = L1MemoryDesc(ptr=arena.data_ptr(), size=arena.numel(), align_bytes=1)
    adapter = create_l2_adapter(parse(spec("plugin", params)).adapters[0], l1_memory_desc=desc)
    try:
        assert adapter.report_status()["l1_registered"] is False
    finally:
        adapter.close()


def test_rdma_without_an_l1_descriptor_is_a_value_error_before_any_traffic():
    config = parse(spec("plugin", dict(UNREACHABLE, protocol="rdma"))).adapters[0]
    with pytest.raises(ValueError, match="no L1 memory descriptor"):
        create_l2_adapter(config)


@pytest.mark.parametrize("ptr, size", [(0, 4096), (4096, 0), (4096, -1)])
def test_rdma_with_an_invalid_l1_descriptor_is_a_value_error(ptr, size):
    config = parse(spec("plugin", dict(UNREACHABLE, protocol="rdma"))).adapters[0]
    desc = L1MemoryDesc(ptr=ptr, size=size, align_bytes=1)
    with pytest.raises(ValueError, match="L1 memory descriptor is invalid"):
        create_l2_adapter(config, l1_memory_desc=desc)


@pytest.mark.parametrize("kind", ["plugin", "native_plugin"])
def test_a_bad_adapter_param_fails_creation_with_its_name(kind):
    config = parse(spec(kind, dict(UNREACHABLE, num_workers=0))).adapters[0]
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        create_l2_adapter(config)


@pytest.fixture
def fresh_check():
    compat.check_lmcache_version.cache_clear()
    compat._client_calls.cache_clear()
    yield
    compat.check_lmcache_version.cache_clear()
    compat._client_calls.cache_clear()


def test_an_abstract_method_lmcache_adds_is_named(monkeypatch, fresh_check):
    # A release whose L2AdapterInterface grows a method its NativeConnectorL2Adapter leaves
    # abstract: the plugins cannot implement it blindly, so they say which it is.
    monkeypatch.setattr(
        NativeConnectorL2Adapter, "__abstractmethods__", frozenset({"submit_prefetch_task"})
    )
    with pytest.raises(compat.LMCacheVersionError, match="submit_prefetch_task") as caught:
        compat.check_lmcache_version()
    assert compat._installed() in str(caught.value)


def test_a_constructor_argument_we_cannot_give_is_named(monkeypatch, fresh_check):
    original = NativeConnectorL2Adapter.__init__

    def needs_more(self, native_client, prefetch_policy, max_capacity_gb=0):  # type: ignore[no-untyped-def]
        original(self, native_client, max_capacity_gb=max_capacity_gb)

    monkeypatch.setattr(NativeConnectorL2Adapter, "__init__", needs_more)
    with pytest.raises(compat.LMCacheVersionError, match="'prefetch_policy'"):
        compat.check_lmcache_version()


def test_an_error_reaches_the_caller_at_adapter_creation(monkeypatch, params, fresh_check):
    monkeypatch.setattr(
        NativeConnectorL2Adapter, "__abstractmethods__", frozenset({"submit_prefetch_task"})
    )
    config = parse(spec("native_plugin", params)).adapters[0]
    with pytest.raises(compat.LMCacheVersionError, match="submit_prefetch_task"):
        create_l2_adapter(config)


def test_every_client_method_lmcache_calls_is_there(fresh_check):
    calls = compat._client_calls()
    # What every release from 0.5.4 calls; read from the installed one's source.
    assert {"event_fd", "submit_batch_get", "drain_completions", "close"} <= calls
    compat.check_native_client(plugin.MooncakeConnector)
    compat.check_native_client(LMCacheMooncakeClient)


def test_a_client_method_lmcache_calls_and_we_lack_is_named(fresh_check):
    class Partial:
        def event_fd(self) -> int:
            return -1

    with pytest.raises(compat.LMCacheVersionError, match="drain_completions") as caught:
        compat.check_native_client(Partial)
    assert "event_fd" not in str(caught.value).split("lacks:")[1]


def test_the_memory_tags_match_lmcaches_own_mooncake_store(fresh_check):
    import inspect

    takes = "memory_tags" in inspect.signature(NativeConnectorL2Adapter.__init__).parameters
    arguments = compat.native_adapter_arguments(type_name="x", unknown_option=1)
    assert arguments.get("type_name") == "x" and "unknown_option" not in arguments
    assert ("memory_tags" in arguments) == takes
    if takes:  # LMCache 0.5.7 on: the adapter answers what LMCache's own factory passes
        from lmcache.v1.distributed.api import MemoryResidency, MemorySegment

        tags = arguments["memory_tags"]
        assert (tags.segment, tags.residency) == (MemorySegment.STORAGE, MemoryResidency.REMOTE)


def test_an_untested_lmcache_with_the_same_interface_only_warns(monkeypatch):
    compat.check_lmcache_version.cache_clear()
    monkeypatch.setattr(compat, "version", lambda name: "0.5.99")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert compat.check_lmcache_version() == "0.5.99"
        assert any(issubclass(w.category, compat.UntestedLMCacheWarning) for w in caught)
    finally:
        compat.check_lmcache_version.cache_clear()
