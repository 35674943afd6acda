"""LMCache's own ``"type": "mooncake_store"`` adapter on a pip install, over this package.

PyPI's lmcache lacks ``lmcache.lmcache_mooncake``; the startup hook of this package serves
``mooncake_cffi.lmcache.extension`` under that name. These tests drive LMCache's own
parser, factory and ``NativeConnectorL2Adapter`` with its documented JSON, verbatim, the
flows of LMCache's own tests of that adapter (config parsing, registration, store ->
lookup -> load, batches, present and missing keys, delete), both constructor forms LMCache
uses, and the hook's own promises: a real extension wins, an interpreter that never
imports lmcache loads nothing of ours.

Needs lmcache (``scripts/install_lmcache.sh``); skipped without it.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

pytest.importorskip("lmcache")

import torch  # noqa: E402
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey  # noqa: E402
from lmcache.v1.distributed.internal_api import L1MemoryDesc  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)
from lmcache_helpers import (  # noqa: E402
    DOCUMENTED,
    key,
    memory_obj,
    parse,
    readable,
    signalled,
)

LAYOUT = {0: MemoryLayoutDesc(shapes=[], dtypes=[])}
UNREACHABLE = {
    "local_hostname": "127.0.0.1",
    "metadata_server": "http://127.0.0.1:1/metadata",
    "master_server_addr": "127.0.0.1:1",
}


def store(adapter: Any, keys: list[ObjectKey], objs: list[Any]) -> bool:
    task = adapter.submit_store_task(keys, objs)
    done: dict[Any, Any] = {}
    while task not in done:
        assert signalled(adapter.get_store_event_fd())
        done.update(adapter.pop_completed_store_tasks())
    return bool(done[task].is_successful())


def lookup(adapter: Any, keys: list[ObjectKey]) -> list[bool]:
    task = adapter.submit_lookup_and_lock_task(keys, LAYOUT)
    assert signalled(adapter.get_lookup_and_lock_event_fd())
    found = adapter.query_lookup_and_lock_result(task)
    adapter.submit_unlock([k for i, k in enumerate(keys) if found.test(i)])
    return [found.test(i) for i in range(len(keys))]


def load(adapter: Any, keys: list[ObjectKey], objs: list[Any]) -> list[bool]:
    task = adapter.submit_load_task(keys, objs)
    assert signalled(adapter.get_load_event_fd())
    loaded = adapter.query_load_result(task)
    return [loaded.test(i) for i in range(len(keys))]


@pytest.fixture
def documented(cluster_config: dict[str, Any]) -> dict[str, Any]:
    """LMCache's documented JSON for the session cluster, with a key prefix of this test's
    (the cluster is shared and its first writer wins)."""
    return {
        "type": "mooncake_store",
        **DOCUMENTED,
        **cluster_config,
        "key_prefix": f"builtin-{uuid.uuid4().hex[:12]}/",
    }


def test_lmcache_lmcache_mooncake_is_served_by_this_package():
    import lmcache.lmcache_mooncake as ext

    from mooncake_cffi.lmcache import extension

    assert ext.LMCacheMooncakeClient is extension.LMCacheMooncakeClient
    assert ext.L1RegistrationConfig is extension.L1RegistrationConfig
    assert ext.__spec__.origin == "mooncake_cffi"


def test_the_documented_json_parses_and_creates_lmcaches_own_adapter(documented):
    config = parse(json.dumps(documented)).adapters[0]
    assert config.num_workers == 4
    assert config.per_op_workers == {"lookup": 1, "retrieve": 1, "store": 2}
    adapter = create_l2_adapter(config)
    try:
        assert type(adapter) is NativeConnectorL2Adapter
        # LMCache names the adapter after the native client's class, as with its own build.
        assert adapter.report_status() == {"is_healthy": True, "type": "LMCacheMooncakeClient"}
        client = adapter._client.connector.client
        assert client.config.per_op_workers == {"lookup": 1, "retrieve": 1, "store": 2}
        assert "preregister_l1_memory" not in client.config.setup_config
    finally:
        adapter.close()


def test_store_lookup_load_and_delete_through_the_documented_type(documented):
    adapter = create_l2_adapter(parse(json.dumps(documented)).adapters[0])
    try:
        arena = torch.arange(16384, dtype=torch.int32).view(torch.uint8)  # 64 KiB
        keys = [key(i) for i in range(4)]
        assert store(adapter, keys, [memory_obj(arena, i * 16384, 16384) for i in range(4)])
        missing = [key(100), key(101)]
        assert lookup(adapter, [keys[0], missing[0], keys[3], missing[1]]) == [
            True,
            False,
            True,
            False,
        ]
        out = torch.zeros(65536, dtype=torch.uint8)
        targets = [memory_obj(out, i * 16384, 16384) for i in range(4)]
        targets.append(memory_obj(torch.zeros(16384, dtype=torch.uint8), 0, 16384))
        got = load(adapter, keys + missing[:1], targets)
        assert got == [True, True, True, True, False]
        assert torch.equal(out, arena)
        # A load whose buffer differs in size from the value is no hit.
        assert load(
            adapter, keys[:1], [memory_obj(torch.zeros(8192, dtype=torch.uint8), 0, 8192)]
        ) == [False]
        adapter.delete(keys[:2])
        assert lookup(adapter, keys) == [False, False, True, True]
    finally:
        adapter.close()


def test_both_constructor_forms_and_l1_registration(cluster_config):
    from lmcache.lmcache_mooncake import L1RegistrationConfig, LMCacheMooncakeClient

    as_strings = {k: str(v) for k, v in cluster_config.items()}
    prefix = f"forms-{uuid.uuid4().hex[:12]}/"
    region = (ctypes.c_ubyte * 65536)()
    base = ctypes.addressof(region)
    # lmcache 0.5.6: keywords, with an L1RegistrationConfig (tcp: not registered).
    reg = L1RegistrationConfig()
    reg.enabled, reg.base, reg.size = True, base, 65536
    old = LMCacheMooncakeClient(
        config=dict(as_strings, key_prefix=prefix, preregister_l1_memory="True"),
        num_workers=2,
        l1_registration=reg,
        per_op_workers={"lookup": 1},
    )
    try:
        assert old.connector.client.l1_registered is False
        assert old.connector.client.config.per_op_workers == {"lookup": 1}
    finally:
        old.close()
        old.close()  # idempotent
    # LMCache's newer binding: positional, a preregistered region (registered here because
    # this package's register_l1 asks for it on tcp); buffers inside it move bytes.
    new = LMCacheMooncakeClient(
        dict(as_strings, key_prefix=prefix, register_l1="true", op_timeout="10"), 2, base, 65536
    )
    try:
        assert new.connector.client.l1_registered is True
        view = memoryview(region).cast("B")
        view[:4096] = bytes(range(256)) * 16
        sid = new.submit_batch_set(["a"], [view[:4096]])
        gid = None
        done: dict[int, Any] = {}
        while sid not in done or (gid is not None and gid not in done):
            assert readable(new.event_fd())
            for c in new.drain_completions():
                done[c[0]] = c
                if c[0] == sid:
                    assert c[1], c
                    gid = new.submit_batch_get(["a"], [view[8192:12288]])
        assert done[gid][1:] == (True, "", [True])
        assert bytes(view[8192:12288]) == bytes(view[:4096])
        # A buffer outside the registered region fails its batch, named; it never crashes.
        outside = bytearray(4096)
        bad = new.submit_batch_get(["a"], [memoryview(outside)])
        while True:
            assert readable(new.event_fd())
            failed = [c for c in new.drain_completions() if c[0] == bad]
            if failed:
                break
        assert failed[0][1] is False and failed[0][2]
    finally:
        new.close()


def test_rdma_without_an_l1_region_is_lmcaches_value_error():
    config = parse(json.dumps({"type": "mooncake_store", **UNREACHABLE, "protocol": "rdma"}))
    with pytest.raises(ValueError, match="no L1 memory descriptor"):
        create_l2_adapter(config.adapters[0])
    desc = L1MemoryDesc(ptr=0, size=4096, align_bytes=1)
    with pytest.raises(ValueError, match="invalid"):
        create_l2_adapter(config.adapters[0], l1_memory_desc=desc)


def test_an_unreachable_master_fails_creation_naming_the_address():
    from mooncake_cffi.errors import MooncakeError

    config = parse(json.dumps({"type": "mooncake_store", **UNREACHABLE})).adapters[0]
    with pytest.raises(MooncakeError, match="127.0.0.1:1"):
        create_l2_adapter(config)


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **env),
        check=False,
    )


def test_a_real_extension_of_lmcaches_own_wins(tmp_path):
    (tmp_path / "lmcache_mooncake.py").write_text("ORIGIN = 'lmcache build'\n")
    out = run(
        f"import lmcache; lmcache.__path__.append({str(tmp_path)!r})\n"
        "import lmcache.lmcache_mooncake as m\n"
        "print(getattr(m, 'ORIGIN', None), hasattr(m, 'LMCacheMooncakeClient'))"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["lmcache", "build", "False"]


def test_an_interpreter_that_never_imports_lmcache_loads_nothing_of_ours():
    out = run(
        "import sys\n"
        "print(sorted(m for m in sys.modules if m.startswith(('mooncake', 'lmcache'))))\n"
        "print(sum(getattr(f, '__module__', '') == '_mooncake_cffi_startup'"
        " for f in sys.meta_path))"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "1"]
