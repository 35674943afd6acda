"""Calls on keys alone take the build's C functions (``_capi/fastcall.c``): one key without
a buffer, or a list of str keys.  Bytes keys, a deadline or a key that cannot be encoded
take the general way.  Both ways must give the same answers and errors, through both faces,
and a closed client must refuse them alike."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from store_helpers import setup_args

import mooncake_cffi as mc
from mooncake_cffi import capi
from mooncake_cffi.cluster import LocalCluster
from mooncake_cffi.store import MooncakeDistributedStore


def _key(what: str) -> str:
    return f"single-key/{what}/{uuid.uuid4().hex[:8]}"


def _outcome(call: Any, *args: Any, **kwargs: Any) -> Any:
    """A call's answer, or the type of what it raised."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:  # compared by type: both ways must raise the same
        return type(exc)


def test_the_build_has_the_c_path() -> None:
    assert capi.FAST_CALLS


def test_client_answers_alike_through_both_ways(cluster_config: dict[str, Any]) -> None:
    with mc.Client(cluster_config) as c:
        here, gone = _key("here"), _key("gone")
        c.put(here, b"x" * 3000)
        for key, present in ((here, True), (gone, False)):
            # str without a deadline: the C path; bytes, or a deadline: the general way.
            for form in (key, key.encode()):
                assert c.exists(form) is present
                assert c.exists(form, timeout=5.0) is present
                assert c.size(form) == (3000 if present else None)
                assert c.size(form, timeout=5.0) == (3000 if present else None)
        assert c.remove(here, force=True) is True
        assert c.remove(here, force=True) is False
        assert c.remove(here.encode(), force=True) is False
        assert not c.exists(here)
        # Keys the shim refuses, or that cannot be encoded: the same answer or error as the
        # general way's.
        for odd in ("", "bad\0key", "surrogate-\ud800", "x" * 70000):
            for call, args in ((c.exists, ()), (c.size, ()), (c.remove, (True,))):
                assert _outcome(call, odd, *args) == _outcome(call, odd, *args, timeout=5.0)
        assert _outcome(c.exists, "surrogate-\ud800") is mc.InvalidArgumentError
    with pytest.raises(mc.ClosedError):
        c.exists(here)
    with pytest.raises(mc.ClosedError):
        c.size(here)
    with pytest.raises(mc.ClosedError):
        c.remove(here)


def test_drop_in_answers_alike_for_str_and_bytes_keys(cluster: LocalCluster) -> None:
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    try:
        here, gone = _key("drop-in-here"), _key("drop-in-gone")
        assert s.put(here, b"y" * 1234) == 0
        for key in (here, gone):
            assert s.is_exist(key) == s.is_exist(key.encode())
            assert s.get_size(key) == s.get_size(key.encode())
        assert (s.is_exist(here), s.get_size(here)) == (1, 1234)
        assert (s.is_exist(gone), s.get_size(gone)) == (0, -704)
        for odd in ("", "bad\0key"):
            assert s.is_exist(odd) == s.is_exist(odd.encode())
            assert s.get_size(odd) == s.get_size(odd.encode())
            assert s.remove(odd, True) == s.remove(odd.encode(), True)
        assert _outcome(s.is_exist, "surrogate-\ud800") is UnicodeEncodeError
        assert s.remove(here, True) == 0
        assert s.remove(here, True) == -704
    finally:
        s.close()
    assert s.is_exist(here) < 0 and s.get_size(here) < 0


def test_drop_in_batches_answer_alike_through_both_ways(cluster: LocalCluster) -> None:
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    try:
        keys = [_key(f"batch-{i}") for i in range(40)]
        assert s.put_batch(keys[:20], [b"z" * 100] * 20) == 0
        as_bytes = [k.encode() for k in keys]  # the general way
        assert s.batch_is_exist(keys) == s.batch_is_exist(as_bytes) == [1] * 20 + [0] * 20
        assert s.batch_is_exist(tuple(keys)) == s.batch_is_exist(keys)  # not a list: general
        # Batches the shim refuses as a whole are answered key by key, alike both ways.
        none = _key("none")
        for odd in ([keys[0], ""], [keys[0], keys[0]], [keys[0], "bad\0key"]):
            odd_bytes = [k.encode() for k in odd]
            assert s.batch_is_exist(odd) == s.batch_is_exist(odd_bytes), odd
            absent = [none if k == keys[0] else k for k in odd]  # removes change nothing
            absent_bytes = [k.encode() for k in absent]
            assert s.batch_remove(absent, True) == s.batch_remove(absent_bytes, True), odd
        assert s.batch_remove(keys, True) == [0] * 20 + [-704] * 20
        assert s.batch_is_exist(keys) == [0] * 40
    finally:
        s.close()
    assert s.batch_is_exist(keys) == [] or min(s.batch_is_exist(keys)) < 0


def test_drop_in_lookup_is_whole_in_c_and_hands_on_what_it_cannot_answer(
    cluster: LocalCluster,
) -> None:
    """The drop-in's lookups are one C function (``Runner.lookups``) while the breaker
    is closed and every node is known up. Each condition it reads, withdrawn in turn, must
    send the lookup the Python way: a check of the hits, the breaker's answer, or the
    general call, with the same answers."""
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    try:
        x = s._x
        assert type(x.exists).__name__ == "Lookups"
        keys = [_key(f"whole-{i}") for i in range(6)]
        assert s.put_batch(keys[:3], [b"q" * 64] * 3) == 0
        want = [1, 1, 1, 0, 0, 0]
        live, health, breaker = x.live, x.live.health, x.breaker
        assert s.batch_is_exist(keys) == want  # warms: the first lookup is checked
        deadline = time.monotonic() + 10
        while not live.trusted() and time.monotonic() < deadline:
            time.sleep(0.02)  # every node known up (the probe's first answers)
        live.discover_at = time.monotonic() + 60  # no discovery check due meanwhile
        checks = live.checks
        assert s.batch_is_exist(keys) == want and live.checks == checks  # trusted: C alone
        # The next discovery check is due: the hits are checked.
        live.discover_at = 0.0
        assert s.batch_is_exist(keys) == want and live.checks == checks + 1
        # A node not known up: the monitor's clock withdrawn (until its next probe answers,
        # which may come first: then again, a bounded number of times).
        assert live.discover_at > time.monotonic()
        for _ in range(50):
            health.up_until = 0.0
            assert s.batch_is_exist(keys) == want
            if live.checks > checks + 1:
                break
        assert live.checks == checks + 2
        # A timed-out batch waiting to be reaped: the general way, same answers.
        native = x.calls.native
        native.orphans[-1] = None
        try:
            assert s.batch_is_exist(keys) == want
        finally:
            del native.orphans[-1]
        # A batch the shim refuses whole is answered key by key, as the general way does.
        assert s.batch_is_exist([keys[0], ""]) == s.batch_is_exist([keys[0].encode(), b""])
        # The breaker open: its code for every key, at once, counted as refused.
        breaker.open, refused = True, breaker.refused
        try:
            assert s.batch_is_exist(keys) == [breaker.code] * 6
            assert breaker.refused == refused + 1
        finally:
            breaker.open = False
        assert s.batch_is_exist(keys[:1]) == [1] and s.batch_is_exist([]) == []
        # is_exist takes the same C function, and the same ways out of it.
        assert type(x.exists_one).__name__ == "Lookups"
        deadline = time.monotonic() + 10
        while not health.healthy() and time.monotonic() < deadline:
            time.sleep(0.02)  # the monitor's clock back, at its next probe answer
        live.discover_at = time.monotonic() + 60
        checks = live.checks
        assert (s.is_exist(keys[0]), s.is_exist(keys[4])) == (1, 0) and live.checks == checks
        live.discover_at = 0.0
        assert s.is_exist(keys[4]) == 0 and live.checks == checks  # a miss needs no check
        assert s.is_exist(keys[0]) == 1 and live.checks == checks + 1
        breaker.open = True
        try:
            assert s.is_exist(keys[0]) == breaker.code
        finally:
            breaker.open = False
        assert s.is_exist("") == s.is_exist(b"") and s.is_exist("bad\0key") == s.is_exist(
            b"bad\0key"
        )
        with pytest.raises(TypeError):
            x.exists(keys, keys)
    finally:
        s.close()
    assert s.batch_is_exist(keys) == [-600] * 6 and s.is_exist(keys[0]) == -600


def test_client_key_batches_answer_alike_through_both_ways(
    cluster_config: dict[str, Any],
) -> None:
    with mc.Client(cluster_config) as c:
        keys = [_key(f"client-batch-{i}") for i in range(10)]
        c.batch_put(keys[:5], [b"w" * 10] * 5)
        assert c.batch_size(keys) == c.batch_size(keys, timeout=5.0) == [10] * 5 + [None] * 5
        with pytest.raises(mc.MooncakeError) as fast:
            c.batch_size([keys[0], keys[0]])
        with pytest.raises(mc.MooncakeError) as general:
            c.batch_size([keys[0], keys[0]], timeout=5.0)
        assert type(fast.value) is type(general.value)
        assert c.batch_remove(keys, force=True) == [0] * 5 + [-704] * 5
        assert c.batch_remove(keys, force=True, timeout=5.0) == [-704] * 10
    with pytest.raises(mc.ClosedError):
        c.batch_remove(keys)
