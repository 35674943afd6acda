"""One-key calls without a buffer take the build's C function (``_capi/fastcall.c``); a key
that is not a str, a deadline or a key that cannot be encoded takes the general way.  Both
ways must give the same answers and errors, through both faces, and a closed client must
refuse them alike."""

from __future__ import annotations

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
