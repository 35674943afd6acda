"""Tests for mooncake_cffi.config: parsing LMCache's mooncake_store adapter JSON (no cluster)."""

from __future__ import annotations

import json
import warnings

import pytest

from mooncake_cffi.config import (
    LANES,
    StoreConfig,
    UnknownConfigKeyWarning,
    parse_adapter_specs,
)

LMCACHE_EXAMPLE = {
    "type": "mooncake_store",
    "num_workers": 4,
    "per_op_workers": {"lookup": 1, "retrieve": 1, "store": 2},
    "local_hostname": "node01",
    "metadata_server": "http://localhost:8080/metadata",
    "master_server_addr": "localhost:50051",
    "protocol": "tcp",
    "global_segment_size": "3221225472",
    "local_buffer_size": 3221225472,
}


def parse_quietly(d: dict) -> StoreConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownConfigKeyWarning)
        return StoreConfig.from_dict(d)


# -- the documented example and forwarding rules -------------------------------------------


def test_lmcache_example_accepted_verbatim() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = StoreConfig.from_dict(LMCACHE_EXAMPLE)
    assert cfg.num_workers == 4
    assert cfg.per_op_workers == {"lookup": 1, "retrieve": 1, "store": 2}
    assert cfg.setup_config == {
        "local_hostname": "node01",
        "metadata_server": "http://localhost:8080/metadata",
        "master_server_addr": "localhost:50051",
        "protocol": "tcp",
        "global_segment_size": "3221225472",
        "local_buffer_size": "3221225472",
    }


def test_lmcache_only_keys_are_never_forwarded() -> None:
    cfg = StoreConfig.from_dict(
        {
            "type": "mooncake_store",
            "num_workers": 2,
            "eviction": {"policy": "lru"},
            "per_op_workers": {"store": 1},
            "local_hostname": "h",
        }
    )
    assert cfg.setup_config == {"local_hostname": "h"}


def test_values_forwarded_as_str() -> None:
    cfg = parse_quietly(
        {
            "enable_ssd_offload": True,
            "enable_client_http_server": False,
            "local_buffer_size": 3221225472,
            "client_http_port": 9300,
            "global_segment_size": 1.5,
            "experimental_key": "enabled",
        }
    )
    assert cfg.setup_config == {
        "enable_ssd_offload": "True",
        "enable_client_http_server": "False",
        "local_buffer_size": "3221225472",
        "client_http_port": "9300",
        "global_segment_size": "1.5",
        "experimental_key": "enabled",
    }


def test_none_values_are_dropped() -> None:
    cfg = StoreConfig.from_dict({"local_hostname": "h", "rdma_devices": None, "bogus": None})
    assert cfg.setup_config == {"local_hostname": "h"}


def test_no_key_is_translated_or_defaulted() -> None:
    cfg = parse_quietly({"master_server_address": "m:1", "device_name": "mlx5_0"})
    assert cfg.setup_config == {"master_server_address": "m:1", "device_name": "mlx5_0"}
    assert StoreConfig.from_dict({}).setup_config == {}


def test_defaults() -> None:
    cfg = StoreConfig.from_dict({})
    assert cfg.num_workers == 4
    assert cfg.per_op_workers is None
    assert cfg.setup_config == {}
    assert StoreConfig() == cfg


def test_type_is_optional_in_from_dict() -> None:
    assert StoreConfig.from_dict({"num_workers": 1}).num_workers == 1


def test_unknown_adapter_type() -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"type": "x"})
    assert str(info.value) == "unknown adapter type 'x'"


# -- num_workers ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "4", None, [4]])
def test_num_workers_invalid(value: object) -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"num_workers": value})
    assert str(info.value) == "num_workers must be a positive integer"


def test_num_workers_checked_on_direct_construction() -> None:
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        StoreConfig(num_workers=0)


@pytest.mark.parametrize("value", [1025, 10**30])
def test_worker_counts_past_what_the_shim_starts_are_refused(value: int) -> None:
    # Found by review: 10**30 passed the check and ended in a bare OverflowError in Client().
    with pytest.raises(ValueError, match=f"^num_workers must be at most 1024, got {value}$"):
        StoreConfig(num_workers=value)
    with pytest.raises(ValueError, match=r"^per_op_workers\['store'\] must be at most 1024"):
        StoreConfig.from_dict({"per_op_workers": {"store": value}})


# -- per_op_workers ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[1, 2], "lookup", 3, True])
def test_per_op_workers_not_a_dict(value: object) -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"per_op_workers": value})
    assert str(info.value) == "per_op_workers must be a dict"


@pytest.mark.parametrize(
    ("value", "type_name"), [("1", "str"), (True, "bool"), (1.0, "float"), (None, "NoneType")]
)
def test_per_op_workers_non_integer(value: object, type_name: str) -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"per_op_workers": {"retrieve": value}})
    assert str(info.value) == f"per_op_workers['retrieve'] must be an integer, got {type_name}"


@pytest.mark.parametrize("value", [0, -2])
def test_per_op_workers_not_positive(value: int) -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"per_op_workers": {"retrieve": value}})
    assert str(info.value) == f"per_op_workers['retrieve'] must be a positive integer, got {value}"


def test_per_op_workers_unknown_lane() -> None:
    with pytest.raises(ValueError) as info:
        StoreConfig.from_dict({"per_op_workers": {"lookup": 1, "prefetch": 2}})
    message = str(info.value)
    assert "'prefetch'" in message
    for lane in LANES:
        assert lane in message


def test_per_op_workers_partial_and_full() -> None:
    assert StoreConfig.from_dict({"per_op_workers": {"store": 3}}).per_op_workers == {"store": 3}
    full = {lane: i + 1 for i, lane in enumerate(LANES)}
    assert StoreConfig.from_dict({"per_op_workers": full}).per_op_workers == full
    assert StoreConfig.from_dict({"per_op_workers": None}).per_op_workers is None


def test_per_op_workers_is_copied() -> None:
    lanes = {"store": 1}
    cfg = StoreConfig.from_dict({"per_op_workers": lanes})
    lanes["store"] = 99
    assert cfg.per_op_workers == {"store": 1}


# -- input shape ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[], "{}", 3, None])
def test_non_dict_input(value: object) -> None:
    with pytest.raises(ValueError, match="JSON object"):
        StoreConfig.from_dict(value)  # type: ignore[arg-type]


def test_keys_must_be_strings() -> None:
    with pytest.raises(ValueError, match="keys must be strings"):
        StoreConfig.from_dict({1: "x"})  # type: ignore[dict-item]


def test_setup_config_must_be_strings() -> None:
    with pytest.raises(ValueError, match="setup_config"):
        StoreConfig(setup_config={"local_buffer_size": 1})  # type: ignore[dict-item]


# -- from_json / to_dict ---------------------------------------------------------------------


def test_from_json_matches_from_dict() -> None:
    text = json.dumps(LMCACHE_EXAMPLE)
    assert StoreConfig.from_json(text) == StoreConfig.from_dict(LMCACHE_EXAMPLE)


@pytest.mark.parametrize("text", ["{", "", "{'a': 1}", '{"a": 1,}', "nope"])
def test_from_json_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid JSON: .+line 1, column"):
        StoreConfig.from_json(text)


def test_from_json_not_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        StoreConfig.from_json("[1, 2]")


def test_from_json_errors_are_from_dict_errors() -> None:
    with pytest.raises(ValueError, match="^num_workers must be a positive integer$"):
        StoreConfig.from_json('{"num_workers": 0}')


def test_to_dict_round_trip() -> None:
    cfg = StoreConfig.from_dict(LMCACHE_EXAMPLE)
    d = cfg.to_dict()
    assert d["type"] == "mooncake_store"
    assert d["num_workers"] == 4
    assert d["per_op_workers"] == {"lookup": 1, "retrieve": 1, "store": 2}
    assert d["local_buffer_size"] == "3221225472"
    assert StoreConfig.from_dict(d) == cfg
    assert StoreConfig.from_json(json.dumps(d)) == cfg


def test_to_dict_without_lanes() -> None:
    d = StoreConfig(num_workers=2, setup_config={"protocol": "tcp"}).to_dict()
    assert d == {"type": "mooncake_store", "num_workers": 2, "protocol": "tcp"}


# -- warnings for keys Mooncake does not read ------------------------------------------------


def test_known_keys_do_not_warn() -> None:
    known = {
        "local_hostname": "h",
        "metadata_server": "http://m/metadata",
        "master_server_addr": "m:1",
        "protocol": "rdma",
        "rdma_devices": "",
        "global_segment_size": "0",
        "local_buffer_size": "16 MB",
        "ipc_socket_path": "/tmp/s",
        "tenant_id": "t",
        "enable_client_http_server": False,
        "client_http_port": 9300,
        "enable_ssd_offload": False,
        "ssd_offload_path": "/tmp/ssd",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = StoreConfig.from_dict({**known, "type": "mooncake_store", "eviction": None})
    assert set(cfg.setup_config) == set(known)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("master_server_address", "master_server_addr"),
        ("device_name", "rdma_devices"),
        ("local_host_name", "local_hostname"),
        ("metadata_servr", "metadata_server"),
        ("Protocol", "protocol"),
        ("num_worker", "num_workers"),
    ],
)
def test_unknown_key_warns_with_suggestion(key: str, suggestion: str) -> None:
    with pytest.warns(UnknownConfigKeyWarning) as record:
        cfg = StoreConfig.from_dict({key: "v"})
    assert cfg.setup_config == {key: "v"}  # still forwarded as-is
    assert len(record) == 1
    assert str(record[0].message) == (
        f"config key {key!r} is not read by Mooncake and will be ignored by it; "
        f"did you mean {suggestion!r}?"
    )


def test_unknown_key_without_close_match() -> None:
    with pytest.warns(UnknownConfigKeyWarning) as record:
        StoreConfig.from_dict({"experimental_key": "enabled"})
    assert str(record[0].message) == (
        "config key 'experimental_key' is not read by Mooncake and will be ignored by it"
    )


def test_warning_is_a_user_warning() -> None:
    assert issubclass(UnknownConfigKeyWarning, UserWarning)


@pytest.mark.parametrize(
    "call",
    [
        lambda: StoreConfig.from_dict({"master_server_address": "x"}),
        lambda: StoreConfig.from_json('{"master_server_address": "x"}'),
        lambda: parse_adapter_specs(['{"type": "mooncake_store", "master_server_address": "x"}']),
    ],
    ids=["from_dict", "from_json", "parse_adapter_specs"],
)
def test_warning_points_at_the_caller(call) -> None:
    with pytest.warns(UnknownConfigKeyWarning) as record:
        call()
    assert record[0].filename == __file__


# -- parse_adapter_specs -------------------------------------------------------------------


def test_parse_adapter_specs_ok() -> None:
    specs = [
        json.dumps(LMCACHE_EXAMPLE),
        '{"type": "mooncake_store", "num_workers": 2, "local_hostname": "a"}',
    ]
    configs = parse_adapter_specs(specs)
    assert configs[0] == StoreConfig.from_dict(LMCACHE_EXAMPLE)
    assert configs[1] == StoreConfig(num_workers=2, setup_config={"local_hostname": "a"})
    assert parse_adapter_specs([]) == []


def test_parse_adapter_specs_invalid_json() -> None:
    with pytest.raises(ValueError, match=r"^Invalid JSON for --l2-adapter #2\b"):
        parse_adapter_specs(['{"type": "mooncake_store"}', "{not json"])


def test_parse_adapter_specs_missing_type() -> None:
    with pytest.raises(ValueError) as info:
        parse_adapter_specs(['{"num_workers": 1}'])
    assert str(info.value) == "--l2-adapter #1: missing 'type' field"


def test_parse_adapter_specs_unknown_type() -> None:
    with pytest.raises(ValueError) as info:
        parse_adapter_specs(['{"type": "mooncake_store"}', '{"type": "redis"}'])
    assert str(info.value) == "--l2-adapter #2: unknown adapter type 'redis'"


def test_parse_adapter_specs_prefixes_field_errors() -> None:
    with pytest.raises(ValueError) as info:
        parse_adapter_specs(['{"type": "mooncake_store", "per_op_workers": {"retrieve": 0}}'])
    assert str(info.value) == (
        "--l2-adapter #1: per_op_workers['retrieve'] must be a positive integer, got 0"
    )


def test_parse_adapter_specs_not_an_object() -> None:
    with pytest.raises(ValueError, match=r"^--l2-adapter #1: must be a JSON object"):
        parse_adapter_specs(["[1]"])


def test_parse_adapter_specs_rejects_a_single_string() -> None:
    with pytest.raises(TypeError):
        parse_adapter_specs('{"type": "mooncake_store"}')  # type: ignore[arg-type]


# -- protocol and check_connectable ----------------------------------------------------------


def test_protocol_property() -> None:
    assert StoreConfig().protocol == "tcp"
    assert StoreConfig(setup_config={"protocol": "RDMA"}).protocol == "rdma"


def connectable(**extra: str) -> StoreConfig:
    base = {"local_hostname": "127.0.0.1", "metadata_server": "http://127.0.0.1:8080/metadata"}
    return StoreConfig(setup_config={**base, **extra})


def test_check_connectable_ok() -> None:
    connectable().check_connectable()
    connectable(local_hostname="node01").check_connectable()
    connectable(local_hostname="fe80::1").check_connectable()  # bare IPv6, no port


@pytest.mark.parametrize("missing", ["local_hostname", "metadata_server"])
def test_check_connectable_missing(missing: str) -> None:
    cfg = connectable()
    del cfg.setup_config[missing]
    with pytest.raises(ValueError, match=missing):
        cfg.check_connectable()


def test_check_connectable_missing_both_and_empty() -> None:
    with pytest.raises(ValueError, match="'local_hostname' and 'metadata_server'"):
        StoreConfig().check_connectable()
    with pytest.raises(ValueError, match="local_hostname"):
        connectable(local_hostname="").check_connectable()


@pytest.mark.parametrize(
    ("hostname", "host"), [("node01:12345", "node01"), ("[fe80::1]:8000", "[fe80::1]")]
)
def test_check_connectable_rejects_port(hostname: str, host: str) -> None:
    with pytest.raises(ValueError) as info:
        connectable(local_hostname=hostname).check_connectable()
    message = str(info.value)
    assert "duplicate registration" in message
    assert "drop the port" in message
    assert repr(host) in message
