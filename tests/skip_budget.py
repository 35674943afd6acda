"""What the suite skipped, and why, said at the end of every run; and skips a tier forbids.

Every run ends with the skipped tests grouped by reason (a module skipped whole counts as
one, named by its path). ``MOONCAKE_CFFI_TESTS_REQUIRE=torch,lmcache`` (a comma-separated
list of words) makes a skip whose reason names one of them fail the run: a tier that has
installed torch must run the tests that need it, not skip them because an import broke.
``scripts/test.sh`` sets it where those modules are installed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import pytest

REQUIRE_ENV = "MOONCAKE_CFFI_TESTS_REQUIRE"
#: (node id, reason) of each skip this process saw (under pytest-xdist, the controller sees
#: the tests' skips; a module skipped whole is seen by the worker that collected it).
_skips: list[tuple[str, str]] = []


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _required() -> list[str]:
    return [w.strip() for w in os.environ.get(REQUIRE_ENV, "").split(",") if w.strip()]


def forbidden(skips: list[tuple[str, str]], required: list[str]) -> list[tuple[str, str]]:
    """The skips whose reason names a required word."""
    return [(n, r) for n, r in skips if any(word in r for word in required)]


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skips.append((report.nodeid, _reason(report)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _reason(report)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _skips:
        return
    by_reason: dict[str, list[str]] = defaultdict(list)
    for nodeid, reason in _skips:
        by_reason[reason].append(nodeid)
    terminalreporter.section(f"skipped: {len(_skips)}, by reason")
    for reason, nodes in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        terminalreporter.write_line(f"{len(nodes):4d}  {reason}  (e.g. {nodes[0]})")
    bad = forbidden(_skips, _required())
    if bad:
        terminalreporter.section(f"skips that {REQUIRE_ENV} forbids", red=True)
        for nodeid, reason in bad:
            terminalreporter.write_line(f"{nodeid}: {reason}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED) and forbidden(_skips, _required()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
