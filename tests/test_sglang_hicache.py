"""SGLang's HiCache ``MooncakeStore`` backend (PyPI sglang, in the virtualenv of
scripts/install_sglang.sh), driven through its own class against Mooncake's
``MooncakeDistributedStore`` and the drop-in on one cluster: the same answers, the bytes
verified.  Both the embedded client (SGLang's ``setup``) and ``standalone_storage`` (a dummy
client of the storage node, Mooncake's client service, with SGLang's
``MooncakeHostTensorAllocator``).

The drop-in takes the place of ``mooncake.store`` in ``sys.modules`` (SGLang imports that
module by name), which is the one import a user changes.  Stood in for: nothing of
Mooncake's; SGLang's host KV pool is the mock of SGLang's own test module
(``create_mock_host_kv_cache``, shipped in the wheel), given the allocator SGLang's
standalone mode requires of a real pool.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sglang.srt.mem_cache.storage.mooncake_store.mooncake_store")

import mooncake.store as theirs_module  # noqa: E402
from sglang.srt.mem_cache.storage.mooncake_store import mooncake_store as sgl  # noqa: E402
from sglang.srt.mem_cache.storage.mooncake_store import test_mooncake_store as sgl_tests  # noqa: E402

import mooncake_cffi.store as ours_module  # noqa: E402
from mooncake_cffi.cluster import LocalCluster  # noqa: E402

MODULES = {"theirs": theirs_module, "ours": ours_module}
#: SGLang's own test configurations: MHA and MLA, several tensor-parallel ranks.
CONFIGS = [(False, 0, 1), (True, 0, 1), (False, 1, 4), (True, 3, 8)]


@pytest.fixture(scope="module")
def local(make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("512 MB").start()


def _config_file(tmp: Path, local: LocalCluster, standalone: bool) -> Path:
    role = local.storage_roles[0]
    path = tmp / f"mooncake-{standalone}.json"
    path.write_text(json.dumps({
        "local_hostname": "127.0.0.1",
        "metadata_server": local.metadata_server,
        "master_server_address": local.master_addr,
        "protocol": "tcp",
        "device_name": "",
        "global_segment_size": 0,
        "check_server": False,
        "standalone_storage": standalone,
        "client_server_address": f"{local.address(role)}:{local.ports[role + '_rpc']}",
    }))  # fmt: skip
    return path


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local: LocalCluster) -> Iterator[Any]:
    """``use(name, standalone)``: SGLang's config file set, and ``mooncake.store`` is
    Mooncake's module (``theirs``) or the drop-in (``ours``)."""

    def choose(name: str, standalone: bool) -> None:
        monkeypatch.setitem(sys.modules, "mooncake.store", MODULES[name])
        path = _config_file(tmp_path, local, standalone)
        monkeypatch.setenv("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", str(path))

    yield choose


def _batch(config: Any, standalone: bool) -> list[Any]:
    """SGLang's own batch case (test_batch_operation), its answers collected: set, exists,
    get, and the bytes compared page by page."""
    elements, kv_num = 256, 13
    per_page = 1 if config.is_mla_model else 2
    mock, buffer = sgl_tests.create_mock_host_kv_cache(
        1 << 22, entries_per_page=per_page, page_elements=elements
    )
    if standalone:
        mock.allocator = sgl.MooncakeHostTensorAllocator()
        shared = mock.allocator.allocate((buffer.numel(),), buffer.dtype)
        shared.copy_(buffer)
        mock.kv_buffer = buffer = shared
    store = sgl.MooncakeStore(config, mem_pool=mock)
    try:
        store.register_mem_pool_host(mock)
        keys = sgl_tests.generate_batch_query_keys(kv_num)
        out: list[Any] = [store.batch_set_v1(keys, torch.arange(kv_num))]
        out.append(store.batch_exists(keys))
        out.append(store.batch_get_v1(keys, torch.arange(kv_num, 2 * kv_num)))
        n = kv_num * per_page * elements
        out.append(bool(torch.equal(buffer[:n], buffer[n : 2 * n])))
        out.append(store.batch_exists(keys[:3] + ["never-" + keys[3]] + keys[4:]))
        missing = sgl_tests.generate_batch_query_keys(2)
        out.append(store.batch_get_v1(missing, torch.arange(2 * kv_num, 2 * kv_num + 2)))
        out.append(store.exists(keys[0]))
        out.append(store.clear())
        out.append(store.batch_exists(keys))
        return out
    finally:
        store.close()  # (SGLang's close leaves the client to its destructor)
        if standalone:
            store.store.unregister_buffer(buffer.data_ptr())
        store.store.close()
        if standalone:
            mock.allocator.allocator.free(buffer.data_ptr())


@pytest.mark.parametrize("standalone", [False, True], ids=["embedded", "standalone"])
@pytest.mark.parametrize("mla,tp_rank,tp_size", CONFIGS)
def test_sglang_batch_case_answers_as_on_mooncakes_class(
    use: Any, standalone: bool, mla: bool, tp_rank: int, tp_size: int
) -> None:
    config = sgl_tests.make_hicache_storage_config(
        is_mla_model=mla, tp_rank=tp_rank, tp_size=tp_size
    )
    answers = {}
    for name in ("theirs", "ours"):
        use(name, standalone)
        answers[name] = _batch(config, standalone)
    assert answers["ours"] == answers["theirs"], answers
    done = answers["ours"]
    assert all(done[0]) and done[1] == 13 and all(done[2]) and done[3] is True
    # exists(key) asks for the key as given, which SGLang stores per rank and part; clear()
    # right after the reads leaves the keys their read leases hold (on both classes)
    assert done[4] == 3 and not any(done[5]) and done[6] is False


@pytest.mark.parametrize("name", ["theirs", "ours"])
def test_sglang_single_case(use: Any, name: str) -> None:
    use(name, False)
    sgl_tests.test_single_operation()  # SGLang's own, asserting the bytes itself


def test_sglang_takes_the_drop_ins_allocator_for_standalone(use: Any) -> None:
    use("ours", True)
    allocator = sgl.MooncakeHostTensorAllocator()
    assert isinstance(allocator.allocator, ours_module.MooncakeHostMemAllocator)
    t = allocator.allocate((1024,), torch.float32)
    t.fill_(1.5)
    assert float(t.sum()) == 1536.0
    assert allocator.allocator.free(t.data_ptr()) == 0
