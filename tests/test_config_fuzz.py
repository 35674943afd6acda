"""Whatever a user types into a config: a clean error or a working client, never a crash or
a hang.

Each case (a client config, or LMCache ``adapter_params`` for the connector) is a valid
config of the session cluster with one to three keys changed, removed or given twice (JSON
text with a repeated key), drawn from a fixed seed: empty and blank strings, NaN, infinity,
huge and negative numbers, wrong types, NUL bytes, bogus addresses and protocols.  Every case
runs in a child process (a crash must not take the suite down), which must exit on its own,
with no signal, within the connect timeout plus setup, and report either a working client (a
round trip) or an error of the kinds the package promises: ``ValueError`` / ``TypeError``
naming the problem, or a ``MooncakeError``.  Addresses stay on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytestmark = pytest.mark.slow

CONNECT_TIMEOUT = 2.0
#: The child's budget: the probe's connect timeout, Mooncake's setup, a round trip.
CASE_BUDGET = CONNECT_TIMEOUT + 8.0
CASES = 48

VALUES: list[Any] = [
    "",
    " ",
    None,
    0,
    -1,
    2**63,
    2**64 + 7,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    "nan",
    "inf",
    True,
    [],
    {},
    {"a": 1},
    "x" * 5000,
    "a\0b",
    "crc32c",
    "CRC32C",
    "127.0.0.1",
    "127.0.0.1:1",
    "127.0.0.1:99999",
    "etcd://",
    "etcd://127.0.0.1",
    "http://",
    "::::",
    "bogus",
    "RDMA",
    "1 GB",
    "64 MiB",
    "-5",
    "0",
]
KEYS = [
    "local_hostname",
    "metadata_server",
    "master_server_addr",
    "protocol",
    "global_segment_size",
    "local_buffer_size",
    "rdma_devices",
    "num_workers",
    "per_op_workers",
    "tenant_id",
    "replica_num",
    "soft_pin_ttl_ms",
    "integrity",
    "with_hard_pin",
    "preferred_segment",
    "cluster_id",
]
ADAPTER_KEYS = ["connect_timeout", "queue_timeout", "queue_capacity", "tile_keys", "op_timeout"]

CHILD = r"""
import pickle, sys, warnings
warnings.simplefilter("ignore")
kind, config, text = pickle.loads(sys.stdin.buffer.read())
try:
    from mooncake_cffi import Client, MooncakeError
    if kind == "adapter":
        from mooncake_cffi.lmcache import MooncakeConnector
        conn = MooncakeConnector(**config)
        client = conn.client
    elif text is not None:
        client = Client(text, connect_timeout=CONNECT)
    else:
        client = Client(config, connect_timeout=CONNECT)
    client.put("fuzz-key", b"v")
    assert client.get("fuzz-key") == b"v"
    client.close()
    print("ok")
except (ValueError, TypeError) as exc:
    print(f"refused {type(exc).__name__}: {exc}"[:300])
except MooncakeError as exc:
    print(f"mooncake {type(exc).__name__}: {exc}"[:300])
except BaseException as exc:
    print(f"UNEXPECTED {type(exc).__name__}: {exc}"[:300])
"""


def _cases(base: dict[str, Any]) -> list[tuple[str, dict[str, Any], str | None]]:
    rng = random.Random(22)
    out: list[tuple[str, dict[str, Any], str | None]] = []
    for i in range(CASES):
        kind = "adapter" if i % 4 == 3 else "client"
        config = dict(base)
        keys = KEYS + (ADAPTER_KEYS if kind == "adapter" else [])
        text = None
        for key in rng.sample(keys, rng.randint(1, 3)):
            if rng.random() < 0.15:
                config.pop(key, None)  # a missing key
            else:
                config[key] = rng.choice(VALUES)
        if kind == "adapter":
            config.setdefault("connect_timeout", CONNECT_TIMEOUT)
        elif i % 7 == 0:  # JSON text with a key given twice: the last one counts
            key, value = rng.choice(KEYS), rng.choice(VALUES)
            body = json.dumps(config)[1:-1]
            text = "{" + body + f", {json.dumps(key)}: {json.dumps(value)}" + "}"
        out.append((kind, config, text))
    return out


def _run(case: tuple[str, dict[str, Any], str | None]) -> tuple[int, float, str]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.replace("CONNECT", repr(CONNECT_TIMEOUT))],
        input=pickle.dumps(case),
        capture_output=True,
        timeout=CASE_BUDGET + 20,
        env={**os.environ, "MC_LOG_LEVEL": "ERROR"},
    )
    out = proc.stdout.decode(errors="replace").strip().splitlines()
    return (
        proc.returncode,
        time.monotonic() - start,
        out[-1] if out else proc.stderr.decode()[-300:],
    )


def _show(case: tuple[str, dict[str, Any], str | None]) -> str:
    kind, config, text = case
    shown = {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in config.items()}
    return f"{kind} {text or shown}"[:400]


def test_fuzzed_configs_never_crash_or_hang(cluster_config: dict[str, Any]) -> None:
    cases = _cases(cluster_config)
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(_run, cases))
    bad = []
    kinds: dict[str, int] = {}
    for case, (rc, took, line) in zip(cases, outcomes):
        kinds[line.split(" ", 1)[0]] = kinds.get(line.split(" ", 1)[0], 0) + 1
        if rc != 0:
            bad.append(f"exit {rc} ({'signal' if rc < 0 else 'error'}): {_show(case)}: {line}")
        elif took > CASE_BUDGET:
            bad.append(f"took {took:.1f} s: {_show(case)}: {line}")
        elif not line.startswith(("ok", "refused", "mooncake")):
            bad.append(f"{line}: {_show(case)}")
    print(f"\n[fuzz] {len(cases)} cases: {kinds}")
    for case, (_, took, line) in zip(cases, outcomes):
        if os.environ.get("MCS_FUZZ_VERBOSE"):
            print(f"  {took:4.1f}s {line[:150]} <- {_show(case)[:160]}")
    assert not bad, "\n".join(bad)
    assert kinds.get("ok", 0) and kinds.get("refused", 0)  # both kinds of case were reached
