"""Replica options across the C ABI: the shim builds Mooncake's C++ ReplicateConfig itself.

Checked for real on the installed wheel (scripts/wheel_venvs.sh runs this file on every
supported one):

* the layout the shim picked is the wheel's, and a store.so whose ReplicateConfig does not
  match the version given is refused at load;
* objects built by Mooncake's own binding (``mooncake.store.ReplicateConfig``, reached here,
  in test code only, through pybind11's conduit) read back field by field through the shim's
  layout, each field on its own; and Mooncake's own getters and ``str()`` read what the shim
  builds;
* a field the wheel lacks is refused, never dropped;
* on three storage nodes: ``replica_num=2`` makes two replicas, a preferred segment places
  the replica, hard and soft pins are accepted;
* :class:`mooncake_cffi.ReplicateConfig` behaves as 0.3.13.post1's pybind class, side by side.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from http_util import http_get

import mooncake_cffi
from mooncake_cffi import Client, ObjectDataType, ReplicateConfig, SoftPinAction, wheel
from mooncake_cffi.capi import ensure_mooncake_loaded, ffi, lib, replica_options
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.errors import InvalidArgumentError

VERSION = wheel.mooncake_version()
#: The layout each supported wheel has (mcs.h, mcs_load).
LAYOUTS = {
    "0.3.10.post2": "0.3.10",
    "0.3.11": "0.3.11",
    "0.3.11.post1": "0.3.11",
    "0.3.12": "0.3.12",
    "0.3.12.post1": "0.3.12",
    "0.3.13": "0.3.13",
    "0.3.13.post1": "0.3.13",
}
LAYOUT = LAYOUTS.get(VERSION, "unknown")
#: The first layout with each field (the others are in every layout).
SINCE = {
    "nof_replica_num": "0.3.11",
    "preferred_nof_segments": "0.3.11",
    "data_type": "0.3.11",
    "group_ids": "0.3.12",
    "dfs_replica_num": "0.3.13",
    "soft_pin_ttl_ms": "0.3.13",
}


def _has(field: str) -> bool:
    since = SINCE.get(field)
    return since is None or tuple(map(int, LAYOUT.split("."))) >= tuple(map(int, since.split(".")))


@pytest.fixture(scope="module", autouse=True)
def _loaded() -> None:
    ensure_mooncake_loaded()  # first: it preloads libcudart where store.so needs it


# ------------------------------------------------ Mooncake's own objects (test-only conduit)


class _TypeInfo(ctypes.Structure):
    """An Itanium std::type_info: pybind11 compares type_infos by name() only."""

    _fields_ = [("vptr", ctypes.c_void_p), ("name", ctypes.c_char_p)]


_RC_TYPE = _TypeInfo(None, b"N8mooncake15ReplicateConfigE")
_ABI_ID = re.compile(rb"__pybind11_internals_v\d+(_[A-Za-z0-9_]+?)(?:_debug)?__")


def native_pointer(obj: Any) -> int:
    """The address of the C++ object behind a ``mooncake.store.ReplicateConfig``."""
    api = ctypes.pythonapi
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    typeid = api.PyCapsule_New(ctypes.addressof(_RC_TYPE), b"St9type_info", None)
    ids = {m.group(1) for name in vars(builtins) if (m := _ABI_ID.fullmatch(name.encode()))}
    for abi_id in sorted(ids) or [b"_gcc_libstdcpp_cxxabi1018", b"_gcc_libstdcpp_cxxabi1016"]:
        capsule = obj._pybind11_conduit_v1_(abi_id, typeid, b"raw_pointer_ephemeral")
        if capsule is not None:
            return int(api.PyCapsule_GetPointer(capsule, b"N8mooncake15ReplicateConfigE"))
    raise AssertionError(f"the conduit answered none of the ABI ids {ids}")


def mooncake_store() -> Any:
    import mooncake.store

    return mooncake.store


#: Non-default values of every field a user sets (long strings: off the small-string buffer).
LONG = "segment-with-a-name-longer-than-fifteen-bytes:12345"


def _values(ms: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "replica_num": 3,
        "nof_replica_num": 2,
        "dfs_replica_num": 4,
        "soft_pin_ttl_ms": 123456789,
        "with_hard_pin": True,
        "preferred_segments": ["a:1", LONG, ""],
        "preferred_segment": LONG,
        "preferred_nof_segments": ["nof:1", LONG],
        "prefer_alloc_in_same_node": True,
        "group_ids": ["g1", "", LONG],
    }
    if hasattr(ms, "SoftPinAction"):
        values["soft_pin_action"] = ms.SoftPinAction.DISABLE
    else:
        values["with_soft_pin"] = True
    if hasattr(ms, "ObjectDataType"):
        values["data_type"] = ms.ObjectDataType.TENSOR
    return values


def _mooncake_config(**fields: Any) -> Any:
    ms = mooncake_store()
    rc = ms.ReplicateConfig()
    for name, value in fields.items():
        if hasattr(rc, name):
            setattr(rc, name, value)
    return rc


def _compare(native: Any, opts_source: Any) -> tuple[int, str]:
    diff = ffi.new("char[]", 4096)
    opts, keep = replica_options(opts_source)
    n = lib.mcs_debug_replica_compare(diff, 4096, ffi.cast("void *", native_pointer(native)), opts)
    del keep
    return n, ffi.string(diff).decode()


def test_the_layout_in_use_is_the_wheels() -> None:
    assert ffi.string(lib.mcs_replica_layout()).decode() == LAYOUT != "unknown"


def test_mooncakes_own_objects_read_through_the_shims_layout() -> None:
    """Every field set through Mooncake's binding reads back through the shim's mirror."""
    ms = mooncake_store()
    rc = _mooncake_config(**_values(ms))
    assert _compare(rc, rc) == (0, "")  # ours built from the same object, read by attribute
    assert _compare(ms.ReplicateConfig(), ReplicateConfig()) == (0, "")


@pytest.mark.parametrize(
    "field",
    [
        "replica_num",
        "nof_replica_num",
        "dfs_replica_num",
        "soft_pin",
        "soft_pin_ttl_ms",
        "with_hard_pin",
        "preferred_segments",
        "preferred_segment",
        "preferred_nof_segments",
        "prefer_alloc_in_same_node",
        "data_type",
        "group_ids",
    ],
)
def test_each_field_lines_up_on_its_own(field: str) -> None:
    """Mooncake's object with one field changed differs from the shim's in that field only."""
    ms = mooncake_store()
    values = _values(ms)
    names = ("soft_pin_action", "with_soft_pin") if field == "soft_pin" else (field,)
    name = next((n for n in names if hasattr(ms.ReplicateConfig(), n)), None)
    if name is None or not _has(field):
        pytest.skip(f"Mooncake {VERSION}'s ReplicateConfig has no {field}")
    theirs = _mooncake_config(**{name: values[name]})
    n, diff = _compare(theirs, ms.ReplicateConfig())
    shown = "with_soft_pin" if name == "with_soft_pin" else field
    shown = "soft_pin_action" if shown == "soft_pin" else shown
    assert n == 1 and diff.startswith(shown + ":"), diff
    assert _compare(theirs, theirs) == (0, "")


def test_mooncake_reads_what_the_shim_builds() -> None:
    """The shim's object assigned to Mooncake's: Mooncake's getters and str() see it."""
    ms = mooncake_store()
    source = _mooncake_config(**_values(ms))
    target = ms.ReplicateConfig()
    opts, keep = replica_options(source)
    assert lib.mcs_debug_replica_assign(ffi.cast("void *", native_pointer(target)), opts) == 0
    for name in _values(ms):
        if hasattr(target, name):
            assert getattr(target, name) == getattr(source, name), name
    assert str(target) == str(source)
    if VERSION == "0.3.13.post1":  # ours prints as Mooncake's does
        ours = ReplicateConfig(
            **{k: v for k, v in _values(ms).items() if k not in ("soft_pin_action", "data_type")}
        )
        ours.soft_pin_action = SoftPinAction.DISABLE
        ours.data_type = ObjectDataType.TENSOR
        assert str(ours) == str(target)


# ------------------------------------------------------------ refusals and loading


@pytest.mark.parametrize("field", sorted(SINCE))
def test_a_field_the_wheel_lacks_is_refused_by_name(cluster: LocalCluster, field: str) -> None:
    values = {
        "nof_replica_num": 1,
        "preferred_nof_segments": ["n:1"],
        "data_type": ObjectDataType.KVCACHE,
        "group_ids": ["g"],
        "dfs_replica_num": 1,
        "soft_pin_ttl_ms": 1000,
    }
    rc = ReplicateConfig(**{field: values[field]})
    with Client(cluster.client_config()) as client:
        if _has(field):  # handed to Mooncake, which answers per key
            (result,) = client.batch_put([f"has-{field}"], [b"v"], replicate_config=rc)
            assert result != lib.MCS_E_UNSUPPORTED
            return
        with pytest.raises(InvalidArgumentError, match=f"{field} needs Mooncake") as err:
            client.put(f"lacks-{field}", b"v", replicate_config=rc)
        assert err.value.code == lib.MCS_E_UNSUPPORTED
        assert not client.exists(f"lacks-{field}")
        with pytest.raises(InvalidArgumentError, match=field):
            Client(cluster.client_config(), replicate_config=rc)


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )


def test_a_version_whose_layout_does_not_match_store_so_fails_the_load() -> None:
    other = "0.3.10.post2" if LAYOUT != "0.3.10" else "0.3.13.post1"
    proc = _run_python(
        f"""
        from mooncake_cffi import wheel
        from mooncake_cffi import capi as b
        wheel.prepare_runtime()
        rc = b.lib.mcs_load(wheel.store_so_path().encode(), b"{other}")
        print(rc, b.lib.mcs_loaded(), b.last_error())
        """
    )
    assert proc.returncode == 0, proc.stderr
    rc, loaded, message = proc.stdout.strip().split(" ", 2)
    assert (int(rc), int(loaded)) == (lib.MCS_E_LOAD, 0)
    assert f"does not look like Mooncake {other}" in message


def test_an_unknown_version_loads_but_refuses_writes(cluster: LocalCluster) -> None:
    cfg = json.dumps(cluster.client_config())
    proc = _run_python(
        f"""
        import json
        from mooncake_cffi import Client, wheel
        from mooncake_cffi import capi as b
        from mooncake_cffi.errors import InvalidArgumentError
        wheel.prepare_runtime()
        assert b.lib.mcs_load(wheel.store_so_path().encode(), b"9.9.9") == 0, b.last_error()
        print(b.ffi.string(b.lib.mcs_replica_layout()).decode())
        with Client(json.loads({cfg!r})) as c:
            print(c.exists("unknown-layout-key"))
            try:
                c.put("unknown-layout-key", b"v")
            except InvalidArgumentError as exc:
                print(exc.code, exc.message)
        """
    )
    assert proc.returncode == 0, proc.stderr
    layout, exists, refusal = proc.stdout.strip().splitlines()
    assert (layout, exists) == ("unknown", "False")
    assert refusal.startswith(str(lib.MCS_E_UNSUPPORTED)) and "9.9.9" in refusal


# ------------------------------------------------------------- on three storage nodes


def replica_segments(local: LocalCluster, key: str) -> list[str]:
    """The segments of ``key``'s replicas, from the master's ``/query_key``: a JSON object
    with ``data`` (0.3.12 on), or one JSON object per replica and line (before)."""
    code, body = http_get(f"{local.metrics_url}/query_key?key={key}")
    assert code == 200, body
    try:
        doc: Any = json.loads(body)
    except ValueError:
        doc = [json.loads(line) for line in body.splitlines() if line.strip()]
    if isinstance(doc, dict):
        doc = doc["data"] if "data" in doc else [doc]
    return [r["transport_endpoint_"] for r in doc]


@pytest.mark.parametrize("kind", ["ours", "mooncakes"])
def test_replica_num_2_makes_two_replicas(three_nodes: LocalCluster, kind: str) -> None:
    rc = ReplicateConfig(replica_num=2) if kind == "ours" else _mooncake_config(replica_num=2)
    with Client(three_nodes.client_config()) as client:
        for i in range(6):
            client.put(f"two-{kind}-{i}", b"x" * 10_000, replicate_config=rc)
            segments = replica_segments(three_nodes, f"two-{kind}-{i}")
            assert len(segments) == 2 and len(set(segments)) == 2, segments
        client.put(f"one-{kind}", b"x" * 10_000)  # the client's default: one replica
        assert len(replica_segments(three_nodes, f"one-{kind}")) == 1


def test_a_client_default_from_the_config_makes_its_replicas(three_nodes: LocalCluster) -> None:
    cfg = {**three_nodes.client_config(), "replica_num": 3, "with_hard_pin": True}
    with Client(cfg) as client:
        client.put("default-three", b"y" * 1000)
        assert len(set(replica_segments(three_nodes, "default-three"))) == 3


@pytest.mark.parametrize("how", ["preferred_segment", "preferred_segments"])
def test_a_preferred_segment_places_the_replica(three_nodes: LocalCluster, how: str) -> None:
    segments = three_nodes.segments()
    assert len(segments) == 3
    with Client(three_nodes.client_config()) as client:
        for target in segments:
            value = [target] if how == "preferred_segments" else target
            rc = ReplicateConfig(**{how: value})
            key = f"placed-{how}-{target}"
            client.put(key, b"z" * 4096, replicate_config=rc)
            assert replica_segments(three_nodes, key) == [target]


def test_hard_and_soft_pins_are_accepted(three_nodes: LocalCluster) -> None:
    configs = {
        "hard": ReplicateConfig(with_hard_pin=True),
        "soft": ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE),
        "unpin": ReplicateConfig(soft_pin_action=SoftPinAction.DISABLE),
        "mooncake-hard": _mooncake_config(with_hard_pin=True),
    }
    if _has("soft_pin_ttl_ms"):
        configs["soft-ttl"] = ReplicateConfig(
            soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=60_000
        )
    with Client(three_nodes.client_config()) as client:
        for name, rc in configs.items():
            assert client.batch_put([f"pin-{name}"], [b"p" * 2048], replicate_config=rc) == [0]
            assert client.get(f"pin-{name}") == b"p" * 2048
            client.upsert(f"pin-{name}", b"q" * 2048, replicate_config=rc)
            assert client.get(f"pin-{name}") == b"q" * 2048


def test_group_ids_go_with_each_key(three_nodes: LocalCluster) -> None:
    if not _has("group_ids"):
        pytest.skip(f"Mooncake {VERSION} has no group ids")
    keys = [f"grouped-{i}" for i in range(5)]
    rc = ReplicateConfig(group_ids=["ga", "ga", "", "gb", "gb"])
    with Client(three_nodes.client_config(), tile_keys=2) as client:
        results = client.batch_put(keys, [b"v" * 100] * 5, replicate_config=rc)
        assert results == [0] * 5
        assert client.batch_get(keys) == [b"v" * 100] * 5
        with pytest.raises(InvalidArgumentError, match="one per key"):
            client.batch_put(["g-x", "g-y"], [b"1", b"2"], replicate_config=rc)


# ------------------------------------------------- our classes next to Mooncake's own

needs_default_wheel = pytest.mark.skipif(
    VERSION != "0.3.13.post1", reason="the classes mirror Mooncake 0.3.13.post1's"
)


@needs_default_wheel
def test_attributes_and_defaults_are_mooncakes() -> None:
    ms = mooncake_store()
    theirs, ours = ms.ReplicateConfig(), ReplicateConfig()
    public = sorted(a for a in dir(theirs) if not a.startswith("_"))
    assert public == sorted(a for a in dir(ours) if not a.startswith("_"))
    for name in public:
        a, b = getattr(theirs, name), getattr(ours, name)
        if hasattr(a, "name") and hasattr(a, "value"):  # enums: same member
            assert (a.name, int(a)) == (b.name, int(b)), name
        else:
            assert a == b and type(a) is type(b), name
    assert str(ours) == str(theirs)
    assert re.fullmatch(
        r"<mooncake_cffi\.replica\.ReplicateConfig object at 0x[0-9a-f]+>", repr(ours)
    )
    assert re.fullmatch(r"<mooncake\.store\.ReplicateConfig object at 0x[0-9a-f]+>", repr(theirs))
    for enum_name in ("SoftPinAction", "ObjectDataType"):
        theirs_enum, ours_enum = getattr(ms, enum_name), getattr(mooncake_cffi, enum_name)
        assert [(k, int(v)) for k, v in theirs_enum.__members__.items()] == [
            (k, int(v)) for k, v in ours_enum.__members__.items()
        ]
        member = next(iter(ours_enum.__members__))
        assert repr(getattr(ours_enum, member)) == repr(getattr(theirs_enum, member))
        assert str(getattr(ours_enum, member)) == str(getattr(theirs_enum, member))
        assert (getattr(ours_enum, member) == 0) == (getattr(theirs_enum, member) == 0)


_ASSIGNMENTS: list[tuple[str, Any]] = [
    (name, value)
    for name, values in {
        "replica_num": [2, 0, True, -1, 2**64, 2**64 - 1, 2.0, "2", None],
        "dfs_replica_num": [1, -3, 1.5],
        "soft_pin_ttl_ms": [None, 5, 0, -5, 5.0, "5", True, 2**64],
        "with_hard_pin": [True, 1, 0, None, 2, 2.5, "x", [1]],
        "prefer_alloc_in_same_node": [False, 1, "yes"],
        "preferred_segments": [["a", "b"], ("a",), [], "ab", b"ab", [1], None, {"a": 1}],
        "preferred_nof_segments": [["n"], [None]],
        "preferred_segment": ["a", "", None, 1],
        "group_ids": [["a", ""], None, [], "g", [2]],
        "soft_pin_action": ["ENABLE", 1, None],
        "data_type": [2, "TENSOR"],
    }.items()
    for value in values
]


@needs_default_wheel
@pytest.mark.parametrize(("name", "value"), _ASSIGNMENTS)
def test_assignments_convert_or_fail_as_mooncakes_do(name: str, value: Any) -> None:
    theirs, ours = mooncake_store().ReplicateConfig(), ReplicateConfig()
    outcomes = []
    for obj in (theirs, ours):
        try:
            setattr(obj, name, value)
            outcomes.append(("ok", getattr(obj, name)))
        except Exception as exc:  # the same exception type for the same input
            outcomes.append((type(exc).__name__, "incompatible function arguments" in str(exc)))
    assert outcomes[0] == outcomes[1]
    assert str(theirs) == str(ours)


@needs_default_wheel
def test_enum_members_are_assigned_as_mooncakes_are() -> None:
    ms = mooncake_store()
    theirs, ours = ms.ReplicateConfig(), ReplicateConfig()
    theirs.soft_pin_action, ours.soft_pin_action = ms.SoftPinAction.ENABLE, SoftPinAction.ENABLE
    theirs.data_type, ours.data_type = ms.ObjectDataType.WEIGHT, ObjectDataType.WEIGHT
    assert str(theirs) == str(ours)
    ours.soft_pin_action = ms.SoftPinAction.DISABLE  # Mooncake's members are taken too
    assert ours.soft_pin_action is SoftPinAction.DISABLE


@needs_default_wheel
def test_lists_read_back_as_copies_and_unknown_attributes_fail() -> None:
    theirs, ours = mooncake_store().ReplicateConfig(), ReplicateConfig()
    for obj in (theirs, ours):
        obj.preferred_segments.append("x")
        assert obj.preferred_segments == []
        with pytest.raises(AttributeError):
            obj.no_such_field = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        ReplicateConfig(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        mooncake_store().ReplicateConfig(1)


def test_our_config_is_converted_once_until_it_changes() -> None:
    rc = ReplicateConfig(replica_num=2)
    first, _ = replica_options(rc)
    assert replica_options(rc)[0] is first
    rc.replica_num = 3
    again, _ = replica_options(rc)
    assert again is not first and again.replica_num == 3


def test_foreign_objects_are_read_by_attribute_and_checked() -> None:
    class Plain:
        replica_num = 2
        with_soft_pin = True  # an older Mooncake's flag
        preferred_segments = ("a:1",)

    opts, _ = replica_options(Plain())
    assert (opts.replica_num, opts.soft_pin_action, opts.preferred_segments.n) == (2, 1, 1)

    class Bad:
        replica_num = 2.5

    with pytest.raises(TypeError, match="replicate_config.replica_num must be an int"):
        replica_options(Bad())
    with pytest.raises(TypeError, match="mooncake_cffi.ReplicateConfig or an object"):
        replica_options({"replica_num": 2})
