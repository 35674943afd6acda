"""Namespace: key-prefix views of a client, against a real cluster; and what tenant_id does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mooncake_cffi.cluster as cluster_mod
from mooncake_cffi import Client, InvalidArgumentError, MooncakeError
from mooncake_cffi.namespace import Namespace
from mooncake_cffi.status import TENANT_NOT_REGISTERED, TENANT_QUOTA_EXCEEDED


@pytest.fixture
def client(cluster_config: dict[str, Any]) -> Iterator[Client]:
    with Client(cluster_config) as c:
        yield c


@pytest.fixture
def prefix() -> str:
    """A fresh prefix per test: the store is shared by the session and first-writer-wins."""
    return f"ns-{uuid.uuid4().hex[:12]}/"


class ExistsSpy:
    """A real client whose batch_exists calls are recorded (to count the keys asked)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.asked: list[int] = []

    def batch_exists(self, keys: list[Any]) -> list[bool]:
        self.asked.append(len(keys))
        return self.client.batch_exists(keys)


# ------------------------------------------------------------------ prefix handling


def test_prefix_must_be_non_empty_str_or_bytes_without_nul(client: Client) -> None:
    for bad in ("", b""):
        with pytest.raises(InvalidArgumentError, match="empty"):
            Namespace(client, bad)
    with pytest.raises(InvalidArgumentError, match="NUL"):
        Namespace(client, "a\0b")
    with pytest.raises(TypeError, match="str or bytes, not int"):
        Namespace(client, 7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        Namespace(client, "\udcff")
    assert Namespace(client, b"raw/").prefix == b"raw/"


def test_empty_key_is_refused_inside_a_namespace(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    with pytest.raises(InvalidArgumentError, match="key #0 is empty"):
        ns.put("", b"x")
    with pytest.raises(InvalidArgumentError, match="key #1 is empty"):
        ns.batch_get(["a", b""])
    with pytest.raises(TypeError, match="key #0 must be str or bytes"):
        ns.get(3)  # type: ignore[arg-type]


def test_keys_are_prefixed_and_local_key_strips_the_prefix(client: Client) -> None:
    ns = Namespace(client, "m/v1/")
    assert ns.key("a") == "m/v1/a"
    assert ns.key(b"a") == b"m/v1/a"
    assert Namespace(client, b"m/").key("\u00e9") == "m/\u00e9".encode()
    assert ns.local_key("m/v1/a") == "a"
    assert ns.local_key(b"m/v1/a") == b"a"
    assert ns.contains("m/v1/x") and not ns.contains("m/v2/x")
    with pytest.raises(ValueError, match="not in namespace"):
        ns.local_key("other/a")
    assert ns.namespace("layer0/").key("k") == "m/v1/layer0/k"


# ------------------------------------------------------------------ key methods


def test_a_value_put_in_a_namespace_is_stored_under_the_prefixed_key(
    client: Client, prefix: str
) -> None:
    ns = Namespace(client, prefix)
    local = f"only-{uuid.uuid4().hex}"
    ns.put(local, b"one")
    assert client.get(prefix + local) == b"one"
    assert ns.get(local) == b"one"
    assert not client.exists(local)
    assert ns.exists(local) and not ns.exists("b")
    assert ns.size(local) == 3 and ns.size("b") is None


def test_two_namespaces_keep_the_same_local_key_apart(client: Client, prefix: str) -> None:
    red, blue = Namespace(client, prefix + "red/"), Namespace(client, prefix + "blue/")
    red.put("k", b"red")
    blue.put("k", b"blue")
    assert (red.get("k"), blue.get("k")) == (b"red", b"blue")
    assert red.remove("k", force=True) is True
    assert red.get("k") is None and blue.get("k") == b"blue"


def test_put_if_absent_upsert_and_remove_work_inside_the_namespace(
    client: Client, prefix: str
) -> None:
    ns = Namespace(client, prefix)
    assert ns.put_if_absent("k", b"first") is True
    assert ns.put_if_absent("k", b"second") is False
    assert ns.get("k") == b"first"
    ns.upsert("k", b"third")
    assert ns.get("k") == b"third"
    assert ns.remove("k", force=True) is True
    assert ns.remove("k", force=True) is False


def test_batch_methods_apply_the_prefix_and_keep_key_order(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    keys = ["x", "y", "z"]
    assert ns.batch_put(keys, [b"1", b"2", b"3"]) == [0, 0, 0]
    assert ns.batch_get(["z", "missing", "x"]) == [b"3", None, b"1"]
    assert ns.batch_exists(["y", "missing"]) == [True, False]
    assert client.batch_exists([prefix + k for k in keys]) == [True, True, True]
    assert ns.batch_upsert(["x"], [b"one"]) == [0]
    assert ns.get("x") == b"one"
    assert ns.batch_remove(keys, force=True) == [0, 0, 0]
    assert ns.batch_exists(keys) == [False, False, False]


def test_put_from_and_get_into_use_prefixed_keys(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    src = bytearray(b"zero-copy value")
    assert ns.put_from(["zc"], [src]) == [0]
    dst = bytearray(64)
    (n,) = ns.get_into(["zc"], [dst])
    assert bytes(dst[:n]) == bytes(src)
    assert client.get(prefix + "zc") == bytes(src)


def test_errors_are_the_clients_own(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    with pytest.raises(InvalidArgumentError, match="more than once"):
        ns.batch_put(["d", "d"], [b"1", b"2"])


# ------------------------------------------------------------------ lookup_prefix


def test_lookup_prefix_counts_the_leading_stored_keys(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    keys = [f"chunk{i}" for i in range(40)]
    ns.batch_put(keys[:25], [b"v"] * 25)
    assert ns.lookup_prefix(keys) == 25
    assert ns.lookup_prefix(keys[:25]) == 25
    assert ns.lookup_prefix(["absent"] + keys) == 0
    assert ns.lookup_prefix([]) == 0
    ns.batch_put(keys[30:31], [b"v"])  # a hit after the first miss does not count
    assert ns.lookup_prefix(keys) == 25


def _exists_keys_asked(client: Client) -> int:
    return client.op_stats()["exists"]["keys"]


def test_lookup_prefix_asks_only_the_first_window_when_the_miss_is_early(
    client: Client, prefix: str
) -> None:
    """Counted by the shim's own per-operation counters: the keys Mooncake was asked."""
    keys = [f"{prefix}c{i}" for i in range(1024)]
    client.batch_put(keys[:600], [b"v"] * 600)
    for miss_at, answer, asked in ((1, 1, 128), (64, 64, 128), (512, 512, 1024)):
        probe = keys[:miss_at] + [f"{prefix}gap"] + keys[miss_at + 1 :]
        before = _exists_keys_asked(client)
        assert client.lookup_prefix(probe) == answer
        assert _exists_keys_asked(client) - before == asked, miss_at
    client.batch_put(keys[600:], [b"v"] * 424)
    calls = client.op_stats()["exists"]["calls"]
    assert client.lookup_prefix(keys) == 1024  # two lookups: 128, then 896
    assert client.op_stats()["exists"]["calls"] - calls == 2
    calls = client.op_stats()["exists"]["calls"]
    assert client.lookup_prefix(keys) == 1024  # after an all-hit lookup: one call
    assert client.op_stats()["exists"]["calls"] - calls == 1
    before = _exists_keys_asked(client)
    assert client.lookup_prefix(keys[:3] + [f"{prefix}gap"] + keys[4:]) == 3  # all asked once
    assert _exists_keys_asked(client) - before == 1024
    before = _exists_keys_asked(client)
    assert client.lookup_prefix(keys[:3] + [f"{prefix}gap"] + keys[4:]) == 3  # windows again
    assert _exists_keys_asked(client) - before == 128
    assert client.lookup_prefix([]) == 0


def test_namespace_lookup_prefix_is_the_clients(client: Client, prefix: str) -> None:
    ns = Namespace(client, prefix)
    ns.batch_put(["a"], [b"v"])
    assert ns.lookup_prefix(["a", "b"]) == 1
    assert ns.lookup_prefix([]) == 0
    with pytest.raises(TypeError, match="single str"):
        client.lookup_prefix("abc")


# ------------------------------------------------------------------ tenant_id


def test_tenant_id_does_not_isolate_on_a_master_in_its_default_mode(
    cluster_config: dict[str, Any], prefix: str
) -> None:
    with (
        Client({**cluster_config, "tenant_id": "alpha"}) as alpha,
        Client({**cluster_config, "tenant_id": "beta"}) as beta,
    ):
        alpha.put(prefix + "k", b"alpha's")
        assert beta.get(prefix + "k") == b"alpha's"


@pytest.fixture
def multi_tenant_cluster(
    make_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> cluster_mod.LocalCluster:
    """A cluster whose master runs in strict multi-tenant mode with tenants alpha and beta."""
    quotas = tmp_path / "tenant_quotas.yaml"
    quotas.write_text(
        "version: 1\ntenants:\n  - name: alpha\n    quota: 32MB\n  - name: beta\n    quota: 32MB\n"
    )
    local = make_cluster(
        master_args=[
            "-enable_multi_tenants=true",
            "-tenant_quota_connector_type=file",
            f"-tenant_quota_connector_uri={quotas}",
        ]
    )
    local.start()
    return local


@pytest.mark.slow
def test_tenant_id_isolates_keys_and_quota_in_strict_multi_tenant_mode_but_is_no_credential(
    multi_tenant_cluster: cluster_mod.LocalCluster,
) -> None:
    cfg = multi_tenant_cluster.client_config()
    with (
        Client({**cfg, "tenant_id": "alpha"}) as alpha,
        Client({**cfg, "tenant_id": "beta"}) as beta,
        Client({**cfg, "tenant_id": "alpha"}) as impostor,
        Client(cfg) as unregistered,
    ):
        alpha.put("k", b"alpha's")
        assert beta.get("k") is None and not beta.exists("k")
        beta.put("k", b"beta's")  # same key, another tenant: a separate object
        assert (alpha.get("k"), beta.get("k")) == (b"alpha's", b"beta's")
        # Anyone who says "alpha" is alpha: tenant_id is not authentication.
        assert impostor.get("k") == b"alpha's"
        with pytest.raises(MooncakeError) as not_registered:
            unregistered.put("k2", b"x")
        assert not_registered.value.code == TENANT_NOT_REGISTERED
        with pytest.raises(MooncakeError) as over_quota:
            alpha.put("big", bytes(40 << 20))
        assert over_quota.value.code == TENANT_QUOTA_EXCEEDED
        assert over_quota.value.name == "TENANT_QUOTA_EXCEEDED"


def test_every_key_method_takes_a_timeout(client: Client, prefix: str) -> None:
    """Before: get, exists, remove, size, the batch reads and removes, get_into and
    lookup_prefix rejected ``timeout=``."""
    ns = client.namespace(prefix)
    ns.put("t", b"value", timeout=5)
    assert ns.get("t", timeout=5) == b"value"
    assert ns.exists("t", timeout=5)
    assert ns.size("t", timeout=5) == 5
    assert ns.batch_get(["t", "none"], timeout=5) == [b"value", None]
    assert ns.batch_exists(["t"], timeout=5) == [True]
    assert ns.batch_size(["t"], timeout=5) == [5]
    buf = bytearray(8)
    assert ns.get_into(["t"], [buf], timeout=5) == [5]
    assert ns.lookup_prefix(["t", "none"], timeout=5) == 1
    assert ns.batch_remove(["none"], force=True, timeout=5) == [-704]
    assert ns.remove("t", force=True, timeout=5)
    with pytest.raises(ValueError, match="timeout"):
        ns.get("t", timeout=-1)


def test_lookup_prefix_counts_a_key_given_twice(client: Client, prefix: str) -> None:
    """Before: the README's own lookup_prefix(["k1", "k2", "nope", "k1"]) raised
    MCS_E_DUPLICATE_KEY, or returned, depending on whether the last lookup hit every key."""
    k1, k2 = f"{prefix}k1", f"{prefix}k2"
    client.batch_put([k1, k2], [b"1", b"2"])
    assert client.lookup_prefix([k1, k2, f"{prefix}nope", k1]) == 2
    keys = [f"{prefix}d{i}" for i in range(31)]
    client.batch_put(keys, [b"v"] * 31)
    assert client.lookup_prefix(keys) == 31  # every key hit: the next asks all at once
    assert client.lookup_prefix(keys + [keys[5]]) == 32
    assert client.lookup_prefix([keys[0], keys[0]] + [f"{prefix}gap"]) == 2
    assert client.lookup_prefix(keys + [keys[5]]) == 32
