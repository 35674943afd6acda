"""Property-based tests (hypothesis) of configuration parsing and key handling.

Config parsing must only ever succeed or raise ValueError; keys of any content
either round-trip exactly through a real cluster or get a clear error.
"""

from __future__ import annotations

import json
import uuid
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mooncake_cffi as mc
from mooncake_cffi import Client, StoreConfig

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)
config_keys = st.sampled_from(
    [
        "type",
        "num_workers",
        "per_op_workers",
        "eviction",
        "local_hostname",
        "protocol",
        "master_server_addr",
        "master_server_address",
        "metadata_server",
        "global_segment_size",
    ]
) | st.text(max_size=15)
lane_dicts = st.dictionaries(
    st.sampled_from(["lookup", "retrieve", "store", "delete", "load", ""]) | st.text(max_size=8),
    st.integers(-3, 8)
    | st.booleans()
    | st.text(max_size=3)
    | st.none()
    | st.floats(allow_nan=False),
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(config_keys, json_values, max_size=8),
    st.one_of(st.none(), lane_dicts, json_values),
    st.one_of(st.none(), st.integers(-5, 64), json_scalars),
)
def test_from_dict_only_succeeds_or_raises_value_error(base, per_op, num_workers):
    d = dict(base)
    if per_op is not None:
        d["per_op_workers"] = per_op
    if num_workers is not None:
        d["num_workers"] = num_workers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = StoreConfig.from_dict(d)
        except ValueError as exc:
            assert str(exc)  # names the problem
            return
    # accepted: the invariants of a valid config hold
    assert isinstance(cfg.num_workers, int) and not isinstance(cfg.num_workers, bool)
    assert cfg.num_workers > 0
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cfg.setup_config.items())
    assert not ({"type", "num_workers", "per_op_workers", "eviction"} & set(cfg.setup_config))
    for key, value in d.items():
        if key not in {"type", "num_workers", "per_op_workers", "eviction"}:
            if value is None:
                assert key not in cfg.setup_config
            else:
                assert cfg.setup_config[key] == str(value)
    if cfg.per_op_workers:
        assert set(cfg.per_op_workers) <= {"lookup", "retrieve", "store", "delete"}
        assert all(isinstance(v, int) and v > 0 for v in cfg.per_op_workers.values())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")))
def test_from_json_only_succeeds_or_raises_value_error(text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            StoreConfig.from_json(text)
        except ValueError:
            pass


@pytest.fixture(scope="module")
def key_client(cluster):
    with Client(cluster.client_config()) as c:
        yield c


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.text(min_size=0, max_size=300)
    | st.sampled_from(["", "\0", "a\0b", "ключ", "🔑" * 50, "x" * 5000, " ", "/..", "\n\t"])
)
def test_any_key_round_trips_or_gets_a_clear_error(key_client, key):
    if not key:
        with pytest.raises(mc.InvalidArgumentError, match="empty"):
            key_client.put(key, b"v")
        return
    if "\0" in key:
        with pytest.raises(mc.InvalidArgumentError, match="NUL"):
            key_client.put(key, b"v")
        return
    unique_key = key + "#" + uuid.uuid4().hex[:8]
    value = unique_key.encode("utf-8", "surrogatepass")
    try:
        key_client.put(unique_key, value)
    except UnicodeEncodeError:
        # lone surrogates cannot be UTF-8 encoded: a clear Python error, nothing sent
        return
    assert key_client.get(unique_key) == value
    assert key_client.exists(unique_key)
    assert key_client.remove(unique_key, force=True)


def test_config_round_trips_through_json():
    d = {
        "type": "mooncake_store",
        "num_workers": 2,
        "per_op_workers": {"store": 2},
        "local_hostname": "h",
        "metadata_server": "http://m/metadata",
        "protocol": "tcp",
    }
    cfg = StoreConfig.from_json(json.dumps(d))
    assert StoreConfig.from_dict(cfg.to_dict()) == cfg
