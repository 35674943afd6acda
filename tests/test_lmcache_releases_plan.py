"""Which LMCache releases ``scripts/lmcache_releases.py`` gates and which it only reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lmcache_releases.py"
_spec = importlib.util.spec_from_file_location("lmcache_releases", SCRIPT)
assert _spec and _spec.loader
releases = importlib.util.module_from_spec(_spec)
sys.modules["lmcache_releases"] = releases  # its dataclasses look themselves up there
_spec.loader.exec_module(releases)


def index(*versions: str) -> dict:
    # upload order = argument order
    return {
        v: releases.Sdist(v, f"https://example.invalid/{v}.tar.gz", "0" * 64, f"2026-{i + 1:02d}")
        for i, v in enumerate(versions)
    }


def test_the_tested_releases_are_gated_and_match_the_extra() -> None:
    tested = releases.tested_versions()
    low, high = releases.extra_range()
    assert tested and tested[0] == low
    pairs = releases.plan(index(*tested), [], True)
    assert pairs == [(v, "gated") for v in tested]


def test_a_new_final_inside_the_range_is_gated_and_a_newer_prerelease_reported() -> None:
    tested = releases.tested_versions()
    pairs = releases.plan(index(*tested, "0.5.7", "0.5.8rc1"), [], True)
    assert ("0.5.7", "gated") in pairs
    assert pairs[-1] == ("0.5.8rc1", "reported")
    assert releases.plan(index(*tested, "0.5.8rc1"), [], False)[-1][1] == "gated"


def test_a_release_past_the_range_is_only_reported() -> None:
    pairs = releases.plan(index(*releases.tested_versions(), "0.6.0"), [], True)
    assert pairs[-1] == ("0.6.0", "reported")
    assert ("0.6.0", "gated") not in pairs


def test_versions_sort_as_pep_440_does() -> None:
    ordered = ["0.5.6rc4.dev27", "0.5.6rc5", "0.5.6", "0.5.6.post1", "0.5.7rc2", "0.5.7"]
    assert sorted(reversed(ordered), key=releases.version_key) == ordered
    assert releases.is_prerelease("0.5.7rc2") and not releases.is_prerelease("0.5.7")


def test_only_the_expected_skips_are_allowed() -> None:
    outcome = releases.Outcome("0.5.6", "gated", passed=35)
    outcome.skipped = [("a::b", "C++ Mooncake extension is available"), ("c::d", "RDMA-specific")]
    assert outcome.ok
    outcome.skipped.append(("e::f", "MOONCAKE_LOCAL_HOSTNAME not set"))
    assert not outcome.ok
