"""The drop-in's surface against the installed Mooncake class: every public name is
implemented or absent (an absent one's AttributeError says what to use instead),
parameters and defaults are Mooncake's, and a store that is not set up answers (where
Mooncake's own crashes the process)."""

from __future__ import annotations

import gc
import inspect
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from store_helpers import MIB, Memory, setup_args, tag

import mooncake_cffi.replica
import mooncake_cffi.store as store_module
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import MooncakeDistributedStore
from mooncake_cffi.store.unset import UNSUPPORTED

ms = pytest.importorskip("mooncake.store")
THEIRS = ms.MooncakeDistributedStore
OURS = MooncakeDistributedStore


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_every_public_name_of_mooncakes_class_is_implemented_or_absent() -> None:
    theirs, ours = _public(THEIRS), _public(OURS)
    unsupported = set(UNSUPPORTED)
    assert not (theirs - ours) - unsupported, "add these to mooncake_cffi.store or UNSUPPORTED"
    assert not unsupported & ours, "a name is both implemented and listed as unsupported"
    assert unsupported <= theirs, "UNSUPPORTED names a method Mooncake's class does not have"
    s = OURS()
    for name in sorted(theirs):
        if name in unsupported:  # absent, as in a Mooncake without it
            assert not hasattr(s, name) and not hasattr(OURS, name), name
            assert name not in dir(s) and name not in dir(OURS), name
            assert getattr(s, name, None) is None, name
        else:  # implemented: a method of the class itself, never a stand-in that raises
            assert callable(getattr(s, name)) and name in vars(OURS), name


def test_the_module_exports_mooncakes_replica_classes() -> None:
    assert store_module.ReplicateConfig is mooncake_cffi.replica.ReplicateConfig
    assert store_module.SoftPinAction is mooncake_cffi.replica.SoftPinAction
    assert {m.name: m.value for m in store_module.SoftPinAction} == {
        name: int(member) for name, member in ms.SoftPinAction.__members__.items()
    }


def _split(params: str) -> list[str]:
    """Top-level comma-separated items of a pybind11 signature's parameter list."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _mooncake_params(name: str) -> list[tuple[str, str | None]]:
    """(name, default text or None) of each parameter of Mooncake's method, from its doc."""
    first = (getattr(THEIRS, name).__doc__ or "").strip().splitlines()[0]
    m = re.match(rf"{name}\((.*)\) -> ", first)
    assert m, first
    out = []
    for item in _split(m.group(1))[1:]:  # without self
        if item.startswith("*"):
            out.append((item, None))
            continue
        head, _, default = item.partition(" = ")
        out.append((head.split(":")[0].strip(), default or None))
    return out


SUPPORTED = sorted(_public(OURS) - set(UNSUPPORTED) - {"client", "setup"})


@pytest.mark.parametrize("name", SUPPORTED)
def test_parameters_and_defaults_are_mooncakes(name: str) -> None:
    theirs = _mooncake_params(name)
    ours = [p for p in inspect.signature(getattr(OURS, name)).parameters.values()][1:]
    assert len(ours) == len(theirs), (theirs, ours)
    for (tname, tdefault), p in zip(theirs, ours):
        if tname.startswith("*"):
            assert p.kind is p.VAR_POSITIONAL
            continue
        if re.fullmatch(r"arg\d+", tname):  # pybind11 names none: positional only
            assert p.kind is p.POSITIONAL_ONLY, (name, p)
        else:
            assert p.name == tname, (name, tname, p.name)
        if tdefault is None:
            assert p.default is p.empty, (name, p)
        elif tdefault.startswith("<mooncake.store.ReplicateConfig"):
            assert isinstance(p.default, store_module.ReplicateConfig), (name, p)
            assert str(p.default) == str(ms.ReplicateConfig())
        else:
            assert repr(p.default) == tdefault, (name, p, tdefault)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_an_absent_method_names_the_nearest_supported_call(name: str) -> None:
    for owner in (OURS(), OURS):
        with pytest.raises(AttributeError, match=re.escape(repr(name))) as exc:
            getattr(owner, name)
        assert UNSUPPORTED[name] in str(exc.value)
        assert "not supported by mooncake_cffi.store" in str(exc.value)


def test_a_name_mooncake_never_had_is_a_plain_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_call'$"):
        OURS().no_such_call  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'no_such_call'$"):
        OURS.no_such_call  # noqa: B018


def test_vllms_session_probe_answers_what_the_class_has() -> None:
    # vLLM's store worker takes the session path when all seven are there and callable.
    names = (
        "batch_put_session_start",
        "batch_put_from_multi_buffer_ranges",
        "batch_put_session_end",
        "batch_put_session_revoke",
        "batch_get_session_start",
        "batch_get_into_multi_buffer_ranges",
        "batch_get_session_end",
    )
    s = OURS()
    probe = all(callable(getattr(s, n, None)) for n in names)
    assert probe is all(n not in UNSUPPORTED for n in names)


def test_setup_with_a_shared_engine_is_refused_saying_why_and_what_to_do() -> None:
    with pytest.raises(NotImplementedError, match="engine") as exc:
        OURS().setup("127.0.0.1", "http://127.0.0.1:1/metadata", 0, MIB, "tcp", "", "h:1", object())
    assert "without engine" in str(exc.value)


def test_a_store_that_is_not_set_up_answers_instead_of_crashing() -> None:
    s = OURS()
    m = Memory(64)
    answers = {
        "health_check": s.health_check(),
        "close": s.close(),
        "get": s.get("k"),
        "get_batch": s.get_batch(["a", "b"]),
        "get_buffer": s.get_buffer("k"),
        "batch_get_buffer": s.batch_get_buffer(["a", "b"]),
        "is_exist": s.is_exist("k"),
        "batch_is_exist": s.batch_is_exist(["a", "b"]),
        "get_size": s.get_size("k"),
        "remove": s.remove("k"),
        "batch_remove": s.batch_remove(["a"]),
        "remove_all": s.remove_all(),
        "remove_by_regex": s.remove_by_regex("a"),
        "put": s.put("k", b"v"),
        "put_batch": s.put_batch(["k"], [b"v"]),
        "upsert_batch": s.upsert_batch(["k"], [b"v"]),
        "put_from": s.put_from("k", m.ptr, 8),
        "batch_put_from": s.batch_put_from(["k"], [m.ptr], [8]),
        "batch_upsert_from": s.batch_upsert_from(["k"], [m.ptr], [8]),
        "get_into": s.get_into("k", m.ptr, 8),
        "batch_get_into": s.batch_get_into(["k"], [m.ptr], [8]),
        "multi_put": s.batch_put_from_multi_buffers(["k"], [[m.ptr]], [[8]]),
        "multi_get": s.batch_get_into_multi_buffers(["k"], [[m.ptr]], [[8]]),
        "ranges": s.get_into_ranges([m.ptr], [["k"]], [[[0]]], [[[0]]], [[[1]]]),
        "register_buffer": s.register_buffer(m.ptr, 64),
        "unregister_buffer": s.unregister_buffer(m.ptr),
        "put_parts": s.put_parts("k", b"a"),
        "get_hostname": s.get_hostname(),
        "client": s.client,
    }
    assert answers == {
        "health_check": 1,
        "close": 0,
        "get": b"",  # these three are Mooncake's own answers; it crashes on the others
        "get_batch": [b""],
        "put_from": -600,
        "get_buffer": None,
        "batch_get_buffer": [None, None],
        "is_exist": -600,
        "batch_is_exist": [-600, -600],
        "get_size": -600,
        "remove": -600,
        "batch_remove": [-600],
        "remove_all": -600,
        "remove_by_regex": -600,
        "put": -600,
        "put_batch": -600,
        "upsert_batch": -600,
        "batch_put_from": [-600],
        "batch_upsert_from": [-600],
        "get_into": -600,
        "batch_get_into": [-600],
        "multi_put": [],
        "multi_get": [-600],
        "ranges": [[[-600]]],
        "register_buffer": -600,
        "unregister_buffer": -600,
        "put_parts": -600,
        "get_hostname": "",
        "client": None,
    }


def test_a_buffer_handle_holds_the_local_buffer_until_it_and_its_views_are_dropped(
    cluster: LocalCluster,
) -> None:
    s = OURS()
    assert s.setup(*setup_args(cluster, local_buffer_size=1 * MIB)) == 0
    try:
        a, b = tag("held-a"), tag("held-b")
        assert s.put(a, b"a" * (600 << 10)) == 0 and s.put(b, b"b" * (600 << 10)) == 0
        first = s.get_buffer(a)
        assert first is not None and first.size() == 600 << 10 and len(first) == first.size()
        assert first.ptr() != 0 and bytes(first[:3]) == b"aaa"
        view = memoryview(first)
        assert s.get_buffer(b) is None  # the 1 MiB local buffer holds the first value
        del first
        gc.collect()
        assert s.get_buffer(b) is None  # the view still holds it
        assert bytes(view[-3:]) == b"aaa"
        del view
        gc.collect()
        second = s.get_buffer(b)
        assert second is not None and bytes(memoryview(second)[:2]) == b"bb"
        assert s.get(a) == b"a" * (600 << 10)  # a get of a value larger than the buffer reads it
    finally:
        s.close()


def test_the_tensor_calls_without_torch_name_what_to_install() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from mooncake_cffi.store import MooncakeDistributedStore\n"
        "try:\n"
        "    MooncakeDistributedStore().put_tensor('k', object())\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "IMPORT-ERROR" in out.stdout and "pip install torch" in out.stdout, out


def test_answers_are_plain_ints_lists_and_bytes(cluster: LocalCluster) -> None:
    s = OURS()
    assert s.setup(*setup_args(cluster)) == 0
    try:
        key = tag("types")
        answers: list[Any] = [s.put(key, b"v"), s.is_exist(key), s.get_size(key), s.get(key)]
        answers += [s.batch_is_exist([key]), s.get_batch([key])]
        assert [type(a) for a in answers] == [int, int, int, bytes, list, list]
        assert type(answers[4][0]) is int and type(answers[5][0]) is bytes
    finally:
        s.close()


def test_a_buffer_handle_stays_valid_after_close_until_it_is_dropped(cluster: LocalCluster) -> None:
    s = OURS()
    assert s.setup(*setup_args(cluster)) == 0
    key = tag("after-close")
    assert s.put(key, b"still here") == 0
    handle, client = s.get_buffer(key), s.client
    assert s.remove(key, True) == 0
    assert s.close() == 0 and s.client is None and s.get(key) == b""
    assert client is not None and not client.closed  # the handle's memory is Mooncake's
    assert bytes(handle) == b"still here" and bytes(memoryview(handle)) == b"still here"
    del handle
    gc.collect()
    deadline = time.monotonic() + 10
    while not client.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.closed


def test_close_racing_batch_get_buffer_never_frees_a_live_handles_memory(
    cluster: LocalCluster,
) -> None:
    # close() while a batch_get_buffer runs: the handles that call returns must point at
    # memory Mooncake still holds (the client stays open until they are dropped), in every
    # round, wherever the close lands in the call.
    import random
    import threading

    values = {tag(f"race{i}"): bytes([i]) * (256 << 10) for i in range(8)}
    keys = list(values)
    seed = OURS()
    assert seed.setup(*setup_args(cluster)) == 0
    try:
        assert seed.put_batch(keys, list(values.values())) == 0
    finally:
        seed.close()
    rng = random.Random(47)
    hits = 0
    for _ in range(30):
        s = OURS()
        assert s.setup(*setup_args(cluster)) == 0
        client = s.client
        got: list[list[Any]] = []
        started = threading.Event()

        def read(store: Any = s, out: list[list[Any]] = got, go: threading.Event = started) -> None:
            go.set()
            while store.client is not None:
                out.append(store.batch_get_buffer(keys))

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(10)
        time.sleep(rng.uniform(0, 0.02))  # where in a call the close lands: many places
        assert s.close() == 0
        reader.join(30)
        assert not reader.is_alive()
        live = [h for batch in got for h in batch if h is not None]
        if live:
            hits += 1
            assert client is not None and not client.closed, "closed under live handles"
            assert all(bytes(h) == values[k] for batch in got for k, h in zip(keys, batch) if h)
        del live
        got.clear()  # the last handles dropped
        gc.collect()
        deadline = time.monotonic() + 10
        while client is not None and not client.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client is not None and client.closed, "the last handle dropped closes it"
    assert hits >= 10, f"only {hits} of 30 rounds read anything before the close"
