"""Bad master addresses, protocols and cluster ids are refused up front: never a crash or a hang.

An empty ``master_server_addr`` used to crash the process inside Mooncake's
``MasterClient::Connect`` (reached from ``mcs_client_create``); one without a port (``127.0.0.1``,
``" "``, a bare number) blocked ~90 s and then failed with a bare INTERNAL_ERROR; so did an
unknown ``protocol``.  Both layers refuse them now, naming the key and the value: the Python
config with a ``ValueError`` before any Mooncake call, and the shim with MCS_E_INVALID_ARG for
C callers (checked here through the raw ABI, with and without the connect probe).  Every case
runs in a child process, which must exit normally (no signal) and answer in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest

from mooncake_cffi import Client
from mooncake_cffi.capi import lib
from mooncake_cffi.cluster import ClusterError, LocalCluster
from mooncake_cffi.config import StoreConfig

#: Seconds a refused case may take in all (a child's start included).
QUICK = 20.0

BAD_MASTERS = [
    ("", "is empty"),
    (" ", "is empty"),
    ("127.0.0.1", "has no port"),
    ("50051", "has no port"),
    ("master int", "contains white space"),
    ("127.0.0.1:", "is not host:port"),
    (":50051", "is not host:port"),
    ("127.0.0.1:0", "not 1..65535"),
    ("127.0.0.1:99999", "not 1..65535"),
    ("127.0.0.1:port", "not 1..65535"),
    ("http://127.0.0.1:50051", "HA backend 'http'"),
    ("etcd://", "names no etcd endpoint"),
    ("etcd://127.0.0.1", "has no port"),
    ("127.0.0.1:50051\n", "contains white space"),
]
BAD_PROTOCOLS = [
    ("bogus", "not a transport Mooncake knows"),
    ("TCP", "must be lower case"),
    ("", "not a transport Mooncake knows"),
    ("tcp ", "not a transport Mooncake knows"),
]

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from mooncake_cffi import Client
    from mooncake_cffi import capi as b

    base, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    b.ensure_mooncake_loaded()
    ffi, lib = b.ffi, b.lib
    for layer, key, value, probe_ms in cases:
        cfg = dict(base, **{key: value})
        t0 = time.monotonic()
        if layer == "python":
            try:
                Client(cfg, connect_timeout=probe_ms / 1000).close()
                kind, text = "ok", ""
            except Exception as exc:
                kind, text = type(exc).__name__, str(exc)
        else:  # the raw C ABI: nothing of the Python config's checks
            ks = [ffi.new("char[]", k.encode()) for k in cfg]
            vs = [ffi.new("char[]", v.encode()) for v in cfg.values()]
            out = ffi.new("mcs_client **")
            rc = lib.mcs_client_create(out, ks, vs, len(cfg), ffi.NULL, probe_ms)
            kind, text = str(rc), b.last_error()
            if rc == 0:
                lib.mcs_client_free(out[0])
        print(json.dumps([layer, key, value, probe_ms, kind, text, time.monotonic() - t0]),
              flush=True)
    """
)


def _run_child(base: dict[str, str], cases: list[tuple[str, str, str, int]]) -> list[list[Any]]:
    env = dict(os.environ, MC_STORE_CLIENT_SETUP_RETRIES="1")  # bounds a regression's hang
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(base), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=QUICK * len(cases),
        env=env,
        cwd="/",
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert proc.returncode == 0, (
        f"the child ended with {proc.returncode} (a negative number is a signal) after "
        f"{len(lines)} of {len(cases)} cases, the next being {cases[len(lines) :][:1]}: "
        f"{proc.stderr[-2000:]}"
    )
    assert len(lines) == len(cases)
    assert time.monotonic() - start < QUICK * len(cases)
    return lines


@pytest.fixture(scope="module")
def base(cluster: LocalCluster) -> dict[str, str]:
    return {k: str(v) for k, v in cluster.client_config().items()}


@pytest.mark.parametrize("layer", ["python", "c"])
def test_bad_master_addresses_are_refused_at_once(base: dict[str, str], layer: str) -> None:
    cases = [(layer, "master_server_addr", v, probe) for v, _ in BAD_MASTERS for probe in (0, -1)]
    for (_, _, value, probe, kind, text, seconds), (_, why) in zip(
        _run_child(base, cases), [m for m in BAD_MASTERS for _ in (0, -1)]
    ):
        expected = "ValueError" if layer == "python" else str(lib.MCS_E_INVALID_ARG)
        assert kind == expected, (value, probe, kind, text)
        assert text.startswith(f"master_server_addr {value!r}") or (
            layer == "c" and text.startswith("master_server_addr '")
        ), text
        assert why in text, (value, text)
        assert seconds < 2.0, (value, seconds)


@pytest.mark.parametrize("layer", ["python", "c"])
def test_bad_protocols_are_refused_by_name(base: dict[str, str], layer: str) -> None:
    cases = [(layer, "protocol", v, 0) for v, _ in BAD_PROTOCOLS]
    for (_, _, value, _, kind, text, seconds), (_, why) in zip(
        _run_child(base, cases), BAD_PROTOCOLS
    ):
        assert kind == ("ValueError" if layer == "python" else str(lib.MCS_E_INVALID_ARG))
        assert text.startswith("protocol ") and why in text, (value, text)
        assert seconds < 2.0


def test_good_forms_still_connect(base: dict[str, str]) -> None:
    host, port = base["master_server_addr"].rsplit(":", 1)
    cases = [
        ("python", "protocol", "tcp", 2000),
        ("c", "master_server_addr", f"localhost:{port}", 2000),
        ("c", "master_server_addr", f"{host}:{port}", -1),
    ]
    for *_, kind, text, _ in _run_child(base, cases):
        assert kind in ("ok", "0"), text


def test_an_unreachable_master_with_a_port_still_fails_fast(base: dict[str, str]) -> None:
    (row,) = _run_child(base, [("c", "master_server_addr", "127.0.0.1:1", 500)])
    assert row[4] == str(lib.MCS_E_UNREACHABLE) and "127.0.0.1:1" in row[5]
    assert row[6] < 5.0


def test_the_python_config_names_the_key_and_the_value() -> None:
    for value, why in BAD_MASTERS:
        cfg = StoreConfig.from_dict(
            {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE"}
        )
        cfg.setup_config["master_server_addr"] = value
        with pytest.raises(ValueError, match=why) as err:
            cfg.check_connectable()
        assert str(err.value).startswith(f"master_server_addr {value!r}")
    number = StoreConfig.from_dict(
        {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "master_server_addr": 5}
    )
    with pytest.raises(ValueError, match="master_server_addr '5' has no port"):
        number.check_connectable()
    for value in ("127.0.0.1:50051", "[::1]:50051", "etcd://a:1;b:2", "redis://r:6379"):
        cfg = StoreConfig.from_dict(
            {"local_hostname": "h", "metadata_server": "P2PHANDSHAKE", "master_server_addr": value}
        )
        cfg.check_connectable()


def test_a_second_cluster_id_in_one_process_is_refused_up_front(base: dict[str, str]) -> None:
    cases = [
        ("python", "cluster_id", "first-cluster", 2000),
        ("python", "cluster_id", "second-cluster", 2000),
        ("c", "cluster_id", "second-cluster", -1),
        ("python", "cluster_id", "first-cluster", 2000),
    ]
    first, second, second_c, again = _run_child(base, cases)
    assert first[4] == "ok" and again[4] == "ok", (first, again)
    assert second[4] == "InvalidArgumentError", second
    assert second_c[4] == str(lib.MCS_E_INVALID_ARG), second_c
    for row in (second, second_c):
        assert "'second-cluster'" in row[5] and "'first-cluster'" in row[5]
        assert "once per process" in row[5]
        assert row[6] < 2.0


def test_clients_without_a_cluster_id_are_not_refused(cluster: LocalCluster) -> None:
    with Client(cluster.client_config()) as a, Client(cluster.client_config()) as b:
        assert not a.exists("no-cluster-id") and not b.exists("no-cluster-id")


@pytest.mark.usefixtures("etcd")
def test_a_second_etcd_in_one_process_is_refused_up_front(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """Mooncake keeps one etcd connection per process: a client of a second HA cluster used
    to fail after ~2 s with a bare INTERNAL_ERROR (also once the first had closed)."""
    try:
        first = make_cluster("64 MB", ha=True, masters=1).start()
    except ClusterError as exc:
        if "-enable_oplog" not in str(exc):
            raise
        pytest.skip(f"this wheel's master cannot run HA: {exc}")
    second = make_cluster("64 MB", ha=True, masters=1).start()
    code = textwrap.dedent(
        """
        import json, os, sys, time
        from mooncake_cffi import Client
        one, two = json.loads(sys.argv[1]), json.loads(sys.argv[2])
        c = Client(one)
        c.put("ha-one", b"1")
        t0 = time.monotonic()
        try:
            Client(two)
            print("accepted")
        except ValueError as exc:
            print(round(time.monotonic() - t0, 2), exc)
        print(c.get("ha-one"), flush=True)
        c.close_for_exit()  # an HA client's close waits up to 30 s (Mooncake's leader monitor)
        os._exit(0)
        """
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            json.dumps(first.client_config()),
            json.dumps(second.client_config()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    refusal, again = proc.stdout.strip().splitlines()
    seconds, message = refusal.split(" ", 1)
    assert float(seconds) < 2.0
    etcd_one = first.client_config()["master_server_addr"].removeprefix("etcd://")
    etcd_two = second.client_config()["master_server_addr"].removeprefix("etcd://")
    assert f"'{etcd_one}'" in message and f"etcd://{etcd_two}" in message, message
    assert "one etcd connection per process" in message
    assert again == "b'1'"
