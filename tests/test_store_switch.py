"""``MOONCAKE_CFFI_DROP_IN=1``: a stack's ``from mooncake.store import
MooncakeDistributedStore`` gets the drop-in, with no change to the stack's code.

Each case runs a fresh interpreter (the switch acts at interpreter start) against the session
cluster, importing only ``mooncake.store`` as a stack does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

#: What a stack does: import Mooncake's module, set up its class positionally, use it.
STACK = """
import json, sys
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
cfg = json.loads(sys.argv[1])
store = MooncakeDistributedStore()
rc = store.setup(cfg["local_hostname"], cfg["metadata_server"], 0, 16 << 20, "tcp", "",
                 cfg["master_server_addr"])
key = sys.argv[2]
config = ReplicateConfig()
config.replica_num = 1
put = store.put(key, b"switched" * 512, config)
got = store.get(key)
out = {"class": MooncakeDistributedStore.__module__, "setup": rc, "put": put,
       "read": got == b"switched" * 512, "replicate_config": ReplicateConfig.__module__}
if MooncakeDistributedStore.__module__.startswith("mooncake_cffi"):
    import mooncake_cffi.failover
    stats = mooncake_cffi.failover.read_failover_stats()
    out["failover"] = {"active": stats["active"], "seen": stats["seen"]}
    out["fail_open"] = type(store._x).__name__
store.close()
print(json.dumps(out))
"""


def stack(cluster_config: dict[str, Any], **env: str) -> tuple[dict[str, Any], str]:
    environ = {k: v for k, v in os.environ.items() if k != "MOONCAKE_CFFI_DROP_IN"}
    result = subprocess.run(
        [sys.executable, "-c", STACK, json.dumps(cluster_config), f"switch-{uuid.uuid4().hex}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(environ, **env),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_switch_gives_a_stack_the_drop_in_with_read_failover(cluster_config):
    out, _ = stack(cluster_config, MOONCAKE_CFFI_DROP_IN="1")
    assert out["class"] == "mooncake_cffi.store.distributed_store"
    assert (out["setup"], out["put"], out["read"]) == (0, 0, True)
    # Mooncake's other names stay Mooncake's, and work with the drop-in.
    assert out["replicate_config"].startswith("mooncake")
    assert not out["replicate_config"].startswith("mooncake_cffi")
    # Mooncake's module was imported first, yet the shim came before its binding.
    assert out["failover"] == {"active": True, "seen": True}
    assert out["fail_open"] == "FailOpen"


def test_without_the_switch_a_stack_keeps_mooncakes_class(cluster_config):
    for env in ({}, {"MOONCAKE_CFFI_DROP_IN": "0"}):
        out, _ = stack(cluster_config, **env)
        assert out["class"].startswith("mooncake") and "cffi" not in out["class"], env
        assert (out["setup"], out["put"], out["read"]) == (0, 0, True)


def test_a_value_the_switch_cannot_read_is_reported_and_changes_nothing(cluster_config):
    out, err = stack(cluster_config, MOONCAKE_CFFI_DROP_IN="maybe")
    assert "cffi" not in out["class"]
    assert "MOONCAKE_CFFI_DROP_IN='maybe' is neither 1, fallback nor 0" in err


#: A drop-in that cannot load: its binding made unimportable before the stack's import.
BROKEN = "import sys; sys.modules['mooncake_cffi._capi.binding'] = None\n"


def broken_stack(cluster_config: dict[str, Any], value: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "MOONCAKE_CFFI_DROP_IN"}
    return subprocess.run(
        [sys.executable, "-c", BROKEN + STACK, json.dumps(cluster_config), f"b-{uuid.uuid4().hex}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(environ, MOONCAKE_CFFI_DROP_IN=value),
        check=False,
    )


def test_a_drop_in_asked_for_that_cannot_load_fails_the_import_saying_why(cluster_config):
    result = broken_stack(cluster_config, "1")
    assert result.returncode != 0, result.stdout
    assert "ImportError: MOONCAKE_CFFI_DROP_IN=1 asks for mooncake-cffi's drop-in" in result.stderr
    assert "mooncake_cffi._capi.binding" in result.stderr  # what failed to load
    assert "MOONCAKE_CFFI_DROP_IN=fallback" in result.stderr  # and what else to do


def test_fallback_runs_mooncakes_class_with_a_logged_warning(cluster_config):
    result = broken_stack(cluster_config, "fallback")
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "cffi" not in out["class"] and (out["setup"], out["read"]) == (0, True)
    assert "MOONCAKE_CFFI_DROP_IN=fallback: the drop-in cannot load" in result.stderr


def test_fallback_where_the_drop_in_loads_is_the_drop_in(cluster_config):
    out, _ = stack(cluster_config, MOONCAKE_CFFI_DROP_IN="fallback")
    assert out["class"] == "mooncake_cffi.store.distributed_store"
