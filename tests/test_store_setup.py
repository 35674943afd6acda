"""setup() of the drop-in in both of Mooncake's forms: what Mooncake accepts and refuses, with
its codes (checked side by side where Mooncake answers quickly), the TypeErrors of its
binding, and this package's own keys in the config dict."""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from store_helpers import MIB, setup_args, tag

from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.config import UnknownConfigKeyWarning
from mooncake_cffi.store import MooncakeDistributedStore

ms = pytest.importorskip("mooncake.store")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _both(setup: Callable[[Any], int]) -> dict[str, int]:
    """``setup(store)`` on a fresh store of each client; the codes (stores closed after)."""
    codes = {}
    for name, store in (
        ("theirs", ms.MooncakeDistributedStore()),
        ("ours", MooncakeDistributedStore()),
    ):
        try:
            codes[name] = setup(store)
        finally:
            store.close()
    return codes


def _dict(local: LocalCluster, **changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "local_hostname": "127.0.0.1",
        "metadata_server": local.metadata_server,
        "master_server_addr": local.master_addr,
        "protocol": "tcp",
        "global_segment_size": "0",
    }
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


DICT_CASES: dict[str, tuple[dict[str, Any], int]] = {
    "the minimal keys": ({}, 0),
    "sizes as Mooncake parses them": ({"local_buffer_size": "32 MB"}, 0),
    "values that are not strings": (
        {
            "global_segment_size": 0,
            "local_buffer_size": 16 * MIB,
            "enable_client_http_server": False,
        },
        0,
    ),
    "no local_hostname": ({"local_hostname": None}, -600),
    "no metadata_server": ({"metadata_server": None}, -600),
    "a size Mooncake cannot parse": ({"global_segment_size": "lots"}, -600),
    "a size in MiB, which Mooncake does not read": ({"local_buffer_size": "32 MiB"}, -600),
    "a negative size": ({"global_segment_size": "-5"}, -600),
    "a segment below 1 KiB": ({"global_segment_size": 1000}, -600),
    "a local buffer below 1 KiB": ({"local_buffer_size": 100}, -600),
    "a bad client_http_port": ({"client_http_port": "x"}, -600),
    "an unknown protocol": ({"protocol": "foo"}, -1),
    "a protocol in upper case": ({"protocol": "TCP"}, -1),
    "a metadata server that is down": ({"metadata_server": "http://127.0.0.1:1/metadata"}, -1),
}


@pytest.mark.parametrize("case", list(DICT_CASES))
def test_the_config_dict_form_answers_as_mooncakes(cluster: LocalCluster, case: str) -> None:
    changes, code = DICT_CASES[case]
    codes = _both(lambda s: s.setup(_dict(cluster, **changes)))
    assert codes == {"theirs": code, "ours": code}


POSITIONAL_CASES: dict[str, tuple[dict[int, Any], int]] = {
    "all seven": ({}, 0),
    "an empty local_hostname": ({0: ""}, -600),
    "an empty metadata_server": ({1: ""}, -1),
    "a segment below 1 KiB": ({2: 1000}, -600),
    "an unknown protocol": ({4: "foo"}, -1),
}


@pytest.mark.parametrize("case", list(POSITIONAL_CASES))
def test_the_positional_form_answers_as_mooncakes(cluster: LocalCluster, case: str) -> None:
    changes, code = POSITIONAL_CASES[case]
    args = list(setup_args(cluster))
    for i, v in changes.items():
        args[i] = v
    assert _both(lambda s: s.setup(*args)) == {"theirs": code, "ours": code}


def test_the_optional_trailing_arguments_and_keywords_are_taken(cluster: LocalCluster) -> None:
    args = setup_args(cluster)
    kwargs = {"tenant_id": "default", "enable_ssd_offload": False, "ssd_offload_path": ""}
    assert _both(lambda s: s.setup(*args, None, **kwargs)) == {"theirs": 0, "ours": 0}
    assert _both(lambda s: s.setup(*args[:3], local_buffer_size=MIB, protocol="tcp",
                                   rdma_devices="", master_server_addr=args[6])) == {
        "theirs": 0,
        "ours": 0,
    }  # fmt: skip


def test_a_local_hostname_with_a_port_is_taken_as_mooncake_takes_it(cluster: LocalCluster) -> None:
    ports = iter((_free_port(), _free_port()))
    codes = _both(lambda s: s.setup(_dict(cluster, local_hostname=f"127.0.0.1:{next(ports)}")))
    assert codes == {"theirs": 0, "ours": 0}


@pytest.mark.parametrize(
    "args",
    [
        ("127.0.0.1",),
        ("127.0.0.1", "meta", 0, 0, "tcp", ""),  # one argument short
        ("127.0.0.1", "meta", -1, 0, "tcp", "", "h:1"),  # a negative size
        ("127.0.0.1", "meta", 1.5, 0, "tcp", "", "h:1"),  # a float size
        (1, "meta", 0, 0, "tcp", "", "h:1"),
        ([("local_hostname", "h")],),  # not a dict
    ],
)
def test_arguments_of_the_wrong_shape_raise_type_error_in_both(args: tuple[Any, ...]) -> None:
    for store in (ms.MooncakeDistributedStore(), MooncakeDistributedStore()):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            store.setup(*args)


def test_an_unreachable_master_fails_fast_with_mooncakes_code(cluster: LocalCluster) -> None:
    # Mooncake's own setup answers -1 too, after ~90 s of retries (4 s with
    # MC_STORE_CLIENT_SETUP_RETRIES=1); the drop-in probes the master first.
    store = MooncakeDistributedStore()
    started = time.monotonic()
    assert store.setup(_dict(cluster, master_server_addr="127.0.0.1:1")) == -1
    assert store.setup(*setup_args(cluster)[:6], "127.0.0.1") == -1  # no port
    assert time.monotonic() - started < 10
    assert store.health_check() == 1 and store.client is None


def test_our_keys_configure_the_client_and_never_reach_mooncake(cluster: LocalCluster) -> None:
    store = MooncakeDistributedStore()
    cfg = _dict(
        cluster,
        num_workers=2,
        per_op_workers={"lookup": 1, "store": 2},
        op_timeout=5.0,
        connect_timeout=1.0,
        coalesce_keys=8,
    )
    assert store.setup(cfg) == 0
    try:
        client = store.client
        assert client is not None and client.op_timeout == 5.0
        stats = client.stats()
        assert stats["lookup"]["workers"] == 1 and stats["store"]["workers"] == 2
        assert not {"num_workers", "op_timeout", "per_op_workers"} & set(client.config.setup_config)
        key = tag("opts")
        assert store.put(key, b"v") == 0 and store.get(key) == b"v"  # through the deadline path
        assert store.batch_is_exist([key, key + "x"]) == [1, 0]
    finally:
        store.close()
    with pytest.raises(ValueError, match="num_workers"):
        MooncakeDistributedStore().setup(_dict(cluster, num_workers=0))


def test_replica_keys_are_ignored_as_mooncake_ignores_them(cluster: LocalCluster) -> None:
    store = MooncakeDistributedStore()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert store.setup(_dict(cluster, replica_num=3, master_server_address="x:1")) == 0
    try:
        messages = [str(w.message) for w in seen if issubclass(w.category, UnknownConfigKeyWarning)]
        assert any("replica_num" in m and "ignored" in m for m in messages), messages
        assert any("did you mean 'master_server_addr'" in m for m in messages), messages
        assert store.client is not None
        assert "replica_num" not in store.client.config.setup_config
        assert store.client.parts.native.default_replicate_config.replica_num == 1
    finally:
        store.close()


def test_a_second_setup_replaces_the_first_client(cluster: LocalCluster) -> None:
    store = MooncakeDistributedStore()
    assert store.setup(*setup_args(cluster)) == 0
    first = store.client
    assert store.setup(*setup_args(cluster)) == 0
    try:
        assert first is not None and first.closed and store.client is not first
        key = tag("again")
        assert store.put(key, b"v") == 0 and store.get(key) == b"v"
        assert store.init_all("tcp", "", 16 * MIB) == -600  # set up: as Mooncake's
    finally:
        store.close()
    assert store.client is None and store.get("k") == b""


def test_a_second_setup_refused_before_connecting_leaves_the_store_working(
    cluster: LocalCluster,
) -> None:
    store = MooncakeDistributedStore()
    assert store.setup(*setup_args(cluster)) == 0
    first = store.client
    try:
        key = tag("kept")
        assert store.put(key, b"v") == 0
        host, meta, *rest = setup_args(cluster)
        assert store.setup("", meta, *rest) == -600  # refused: no local_hostname
        assert store.setup({"local_hostname": "127.0.0.1"}) == -600  # no metadata_server
        with pytest.raises(ValueError, match="fail_open"):
            store.setup({**cluster.client_config(), "fail_open": "sometimes"})
        assert store.client is first and first is not None and not first.closed
        assert store.get(key) == b"v"
    finally:
        store.close()


def test_our_keys_from_the_environment_serve_the_positional_form(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOONCAKE_CFFI_STORE_OPTIONS", '{"op_timeout": 7, "num_workers": 3}')
    store = MooncakeDistributedStore()
    assert store.setup(*setup_args(cluster)) == 0
    try:
        assert store.client is not None and store.client.op_timeout == 7
        assert store.client.config.num_workers == 3
    finally:
        store.close()
    assert store.setup(_dict(cluster, op_timeout=2)) == 0  # the call's dict wins
    try:
        assert store.client is not None and store.client.op_timeout == 2
    finally:
        store.close()
    for bad in ("{not json", '["op_timeout"]', '{"protocol": "tcp"}'):
        monkeypatch.setenv("MOONCAKE_CFFI_STORE_OPTIONS", bad)
        with pytest.raises(ValueError, match="MOONCAKE_CFFI_STORE_OPTIONS"):
            MooncakeDistributedStore().setup(*setup_args(cluster))


def test_a_store_dropped_without_close_unmounts_its_segment_at_once(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """Mooncake's class tears its client down when its last reference goes; so must ours,
    without waiting for a garbage-collector pass (a reference cycle would keep the client
    and its segment: values would go on landing in memory its owner has let go of)."""
    import gc

    from mooncake_cffi import AsyncClient, Client
    from mooncake_cffi.admin import AdminClient

    local = make_cluster("32 MB").start()
    admin = AdminClient(local.metrics_url)
    alone = admin.segment_names()

    def segments_return_to_the_storage_node() -> bool:
        deadline = time.monotonic() + 5
        while admin.segment_names() != alone and time.monotonic() < deadline:
            time.sleep(0.05)
        return admin.segment_names() == alone

    def drop_store(make: Callable[[], Any]) -> None:
        store = make()
        assert (
            store.setup(
                "127.0.0.1", local.metadata_server, 16 * MIB, MIB, "tcp", "", local.master_addr
            )
            == 0
        )
        key = tag("dropped")
        assert store.put(key, b"v" * 5000) == 0 and store.get(key) == b"v" * 5000
        assert store.batch_is_exist([key, key + "-not"]) == [1, 0]  # the drop-in's C lookup
        assert len(admin.segment_names()) == len(alone) + 1

    cfg = local.client_config(global_segment_size="16 MB")

    def drop_client() -> None:
        c = Client(cfg, op_timeout=5)
        c.put(tag("c"), b"v")
        assert c.batch_get([tag("c"), tag("c")]) == [None, None]
        assert len(admin.segment_names()) == len(alone) + 1

    def drop_async_client() -> None:
        import asyncio

        async def use() -> None:
            ac = AsyncClient(cfg)
            await ac.put(tag("a"), b"v")
            assert await ac.get(tag("a")) is None

        asyncio.run(use())

    gc.collect()
    gc.disable()
    try:
        for name, drop in (
            ("Mooncake's store", lambda: drop_store(ms.MooncakeDistributedStore)),
            ("the drop-in", lambda: drop_store(MooncakeDistributedStore)),
            ("Client", drop_client),
            ("AsyncClient", drop_async_client),
        ):
            drop()
            assert segments_return_to_the_storage_node(), f"{name}: {admin.segment_names()}"
    finally:
        gc.enable()
