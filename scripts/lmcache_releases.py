#!/usr/bin/env python3
"""Run LMCache's own tests of its ``mooncake_store`` adapter on each LMCache release.

For each release it installs that lmcache into one virtualenv (swapped in place: torch and
this package stay), takes ``tests/v1/distributed/test_mooncake_store_l2_adapter.py`` and
that folder's ``conftest.py`` from the release's sdist on PyPI (downloaded at run time,
checked against PyPI's sha256, cached; never kept in this repository), starts a local
cluster with the virtualenv's ``mcl2`` and runs the two files there, from a directory
outside the checkout, so they import the installed package as a user's would.

Releases run:

- **gated**: the tested releases (``TESTED_LMCACHE_VERSIONS`` in
  ``mooncake_cffi/lmcache/compat.py``) and every final release on the index inside the
  ``lmcache`` extra's range, newer ones too: each must pass every test but the expected
  skips (the "no C++ extension" case, which cannot hold beside this package, and RDMA);
- **reported**: the newest release on the index, when it is none of those (a pre-release,
  or past the range): run and printed with what failed, never failing the run.

On the newest gated release (``--ours``) it also runs our own LMCache tests
from the checkout (``OURS``: LMCache's parser and factory with both plugin types, and
``lmcache server`` with the documented ``mooncake_store`` JSON serving through Mooncake).

Prints a Markdown table (release, role, passed / failed / skipped, ours, seconds) and, for a
release that failed, the failing tests with their first error line.  Exit status 0 when
every gated release passed, 1 otherwise, 2 on a usage or setup error.

Usage (``scripts/test.sh`` runs it in its tests lane)::

    python3 scripts/lmcache_releases.py [--venv DIR] [--release X ...] [--no-report]

Environment: ``MOONCAKE_CFFI_PACKAGE`` (a wheel of this package for the virtualenv, as
``scripts/install_lmcache.sh`` takes), ``TORCH_VERSION`` (default 2.13.0: the CPU build in
pip's local wheel folder), ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mooncake-cffi"
INDEX = "https://pypi.org/pypi/lmcache/json"
TEST_DIR = "tests/v1/distributed"
TEST_FILES = ("test_mooncake_store_l2_adapter.py", "conftest.py")
# Skips every release's file makes beside this package: its "no C++ extension" case (this
# package supplies lmcache.lmcache_mooncake) and the RDMA cases (no RDMA device here).
EXPECTED_SKIPS = re.compile(r"extension is available|RDMA", re.IGNORECASE)
PER_RELEASE_TIMEOUT = 900.0
#: Our own tests of LMCache beside this package: its parser, factory and ``lmcache server``
#: with the documented ``mooncake_store`` JSON and both plugin types (run from the checkout).
OURS = (
    "tests/test_lmcache_factory.py",
    "tests/test_lmcache_mooncake_store.py",
    "tests/test_lmcache_cli.py",
)


def log(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


# --- versions (PEP 440's subset LMCache uses; no packaging module outside a venv) -------

_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?$")


def version_key(text: str) -> tuple:
    match = _VERSION.match(text)
    if not match:
        return ((-1,), 0, 0, 0)
    release, pre, pre_n, post, dev = match.groups()
    numbers = tuple(int(x) for x in release.split("."))
    numbers += (0,) * (4 - len(numbers))
    # a dev release sorts before its pre-releases, a pre-release before its final
    phase = {"a": 1, "b": 2, "rc": 3}.get(pre or "", 4 if dev is None else 0)
    return (numbers, phase, int(pre_n or 0), int(post or 0))


def is_prerelease(text: str) -> bool:
    match = _VERSION.match(text)
    return bool(match and (match.group(2) or match.group(5)))


def extra_range() -> tuple[str, str]:
    """The ``lmcache`` extra's bounds (``>=LOW,<HIGH``), from pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^lmcache = \["lmcache>=([^,"]+),<([^"]+)"\]', text, re.MULTILINE)
    if not match:
        raise SystemExit("pyproject.toml: no 'lmcache = [\"lmcache>=X,<Y\"]' extra")
    return match.group(1), match.group(2)


def tested_versions() -> tuple[str, ...]:
    text = (ROOT / "mooncake_cffi/lmcache/compat.py").read_text()
    match = re.search(r"TESTED_LMCACHE_VERSIONS[^=]*= \(([^)]*)\)", text)
    if not match:
        raise SystemExit("compat.py: no TESTED_LMCACHE_VERSIONS tuple")
    return tuple(re.findall(r'"([^"]+)"', match.group(1)))


# --- the index --------------------------------------------------------------------------


@dataclass
class Sdist:
    version: str
    url: str
    sha256: str
    uploaded: str


def index_sdists() -> dict[str, Sdist]:
    """Every unyanked release of lmcache on PyPI that has an sdist."""
    with urllib.request.urlopen(INDEX, timeout=60) as reply:
        data = json.load(reply)
    out: dict[str, Sdist] = {}
    for ver, files in data["releases"].items():
        for entry in files:
            if entry.get("packagetype") == "sdist" and not entry.get("yanked"):
                url = urllib.parse.urljoin(INDEX, entry["url"])  # a mirror's may be relative
                out[ver] = Sdist(
                    ver, url, entry["digests"]["sha256"], entry["upload_time_iso_8601"]
                )
    return out


def fetch_sdist(sdist: Sdist) -> Path:
    """The sdist, from the cache or PyPI, its sha256 checked."""
    folder = CACHE / "lmcache-sdists"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / sdist.url.rsplit("/", 1)[-1]
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != sdist.sha256:
        log(f"downloading {sdist.url}")
        partial = path.with_suffix(".part")
        with urllib.request.urlopen(sdist.url, timeout=300) as reply, partial.open("wb") as out:
            shutil.copyfileobj(reply, out)
        digest = hashlib.sha256(partial.read_bytes()).hexdigest()
        if digest != sdist.sha256:
            partial.unlink()
            raise RuntimeError(f"{sdist.url}: sha256 {digest}, PyPI says {sdist.sha256}")
        partial.replace(path)
    return path


def extract_tests(archive: Path, into: Path) -> None:
    """The adapter's test file and its folder's conftest, alone, under ``into``."""
    target = into / TEST_DIR
    target.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        wanted = {}
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) == 2 and member.isfile():
                folder, _, name = parts[1].rpartition("/")
                if folder == TEST_DIR and name in TEST_FILES:
                    wanted[name] = member
        missing = set(TEST_FILES) - set(wanted)
        if missing:
            raise RuntimeError(f"{archive.name} has no {TEST_DIR}/{', '.join(sorted(missing))}")
        for name, member in wanted.items():
            source = tar.extractfile(member)
            assert source is not None
            (target / name).write_bytes(source.read())


# --- one release ------------------------------------------------------------------------


@dataclass
class Outcome:
    version: str
    role: str  # "gated" or "reported"
    passed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (test, first line)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (test, reason)
    seconds: float = 0.0
    problem: str = ""  # install or setup failure
    ours: str = ""  # our own tests' summary line ("" when not run)
    ours_ok: bool = True

    @property
    def upstream_failed(self) -> list[tuple[str, str]]:
        """The failures of LMCache's own tests (not of ours)."""
        return [f for f in self.failed if not f[0].startswith("ours: ")]

    @property
    def unexpected_skips(self) -> list[tuple[str, str]]:
        return [s for s in self.skipped if not EXPECTED_SKIPS.search(s[1])]

    @property
    def ok(self) -> bool:
        return (
            not self.problem
            and self.passed > 0
            and not self.failed
            and not self.unexpected_skips
            and self.ours_ok
        )


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, text=True, capture_output=True, **kwargs)


def install(venv: Path, release: str) -> str:
    """Swap lmcache ``release`` into the virtualenv; "" or why it failed."""
    python = str(venv / "bin/python")
    held = run([python, "-c", "from importlib.metadata import version; print(version('lmcache'))"])
    if held.returncode == 0 and held.stdout.strip() == release:
        return ""
    torch = os.environ.get("TORCH_VERSION", "2.13.0")
    log(f"installing lmcache {release} into {venv}")
    done = run([python, "-m", "pip", "install", "-q", f"lmcache=={release}", f"torch=={torch}"])
    if done.returncode != 0:
        return f"pip install lmcache=={release} failed: {done.stderr.strip()[-400:]}"
    return ""


def start_cluster(venv: Path, state: Path) -> dict:
    done = run(
        [str(venv / "bin/mcl2"), "cluster", "up", "--state-dir", str(state), "--json", "-q"],
        timeout=180,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mcl2 cluster up failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def stop_cluster(venv: Path, state: Path) -> None:
    run([str(venv / "bin/mcl2"), "cluster", "down", "--state-dir", str(state)], timeout=120)


def read_junit(path: Path, outcome: Outcome) -> None:
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".rsplit(".", 2)
        test = "::".join(name[-2:])
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            first = (failure.get("message") or failure.text or "").strip().splitlines()
            outcome.failed.append((test, first[0][:300] if first else ""))
        elif skipped is not None:
            outcome.skipped.append((test, skipped.get("message") or ""))
        else:
            outcome.passed += 1


def run_ours(venv: Path, outcome: Outcome) -> None:
    """Our own LMCache tests (``OURS``) on the installed release, from the checkout."""
    env = dict(os.environ, LMCACHE_DISABLE_BANNER="1")
    argv = [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *OURS]
    try:
        done = run(argv, cwd=ROOT, env=env, timeout=PER_RELEASE_TIMEOUT)
    except subprocess.TimeoutExpired:
        outcome.ours, outcome.ours_ok = f"ran over {PER_RELEASE_TIMEOUT:.0f} s", False
        return
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else f"exit {done.returncode}"
    outcome.ours = re.sub(r", \d+ warnings?", "", summary).split(" in ")[0]
    outcome.ours_ok = done.returncode == 0
    if not outcome.ours_ok:
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        outcome.failed.extend(("ours: " + line.split(" ", 1)[-1], "") for line in failed[:20])


def test_release(venv: Path, sdist: Sdist, role: str, ours: bool) -> Outcome:
    outcome = Outcome(sdist.version, role)
    started = time.monotonic()
    outcome.problem = install(venv, sdist.version)
    if outcome.problem:
        return outcome
    with tempfile.TemporaryDirectory(prefix=f"lmcache-{sdist.version}-") as tmp:
        work = Path(tmp)
        try:
            extract_tests(fetch_sdist(sdist), work / "src")
            cluster = start_cluster(venv, work / "cluster")
        except (
            RuntimeError,
            OSError,
            ValueError,
            subprocess.TimeoutExpired,
            tarfile.TarError,
        ) as exc:
            outcome.problem = str(exc)
            return outcome
        try:
            env = dict(
                os.environ,
                MOONCAKE_LOCAL_HOSTNAME="127.0.0.1",
                MOONCAKE_METADATA_SERVER=cluster["metadata_server"],
                MOONCAKE_MASTER_SERVER_ADDRESS=cluster["master_addr"],
                MOONCAKE_PROTOCOL="tcp",
                LMCACHE_DISABLE_BANNER="1",
            )
            env.pop("PYTHONPATH", None)
            env.pop("MOONCAKE_RUN_RDMA_TESTS", None)
            junit = work / "junit.xml"
            argv = [
                str(venv / "bin/python"),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-c",
                os.devnull,
                "--rootdir",
                str(work / "src"),
                "--timeout",
                "300",
                f"--junitxml={junit}",
                f"{TEST_DIR}/{TEST_FILES[0]}",
            ]
            try:
                done = run(argv, cwd=work / "src", env=env, timeout=PER_RELEASE_TIMEOUT)
            except subprocess.TimeoutExpired:
                outcome.problem = f"pytest ran over {PER_RELEASE_TIMEOUT:.0f} s"
                return outcome
            if junit.exists():
                read_junit(junit, outcome)
            if not junit.exists() or (done.returncode not in (0, 1) and not outcome.failed):
                outcome.problem = f"pytest exited {done.returncode}: {done.stdout[-600:]}"
        finally:
            stop_cluster(venv, work / "cluster")
    if ours and not outcome.problem:
        run_ours(venv, outcome)
    outcome.seconds = time.monotonic() - started
    return outcome


# --- the plan and the report ------------------------------------------------------------


def newest(index: dict[str, Sdist]) -> Sdist:
    """The release uploaded last (a pre-release too)."""
    return max(index.values(), key=lambda s: (s.uploaded, version_key(s.version)))


def plan(index: dict[str, Sdist], asked: list[str], report: bool) -> list[tuple[str, str]]:
    """(release, role) pairs, oldest first."""
    if asked:
        return [(v, "gated") for v in asked]
    low, high = extra_range()
    gated = set(tested_versions())
    for ver in index:
        if (
            not is_prerelease(ver)
            and version_key(low) <= version_key(ver) < version_key(high)
            and version_key(ver) > version_key(max(gated, key=version_key))
        ):
            gated.add(ver)  # a final release the extra installs: it must pass
    pairs = [(v, "gated") for v in sorted(gated, key=version_key)]
    if report and index:
        last = newest(index).version
        if last not in gated:
            pairs.append((last, "reported"))
    return pairs


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| LMCache (PyPI) | role | LMCache's own adapter tests | our LMCache tests | seconds |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.problem:
            result = f"not run: {o.problem.splitlines()[0][:120]}"
        else:
            result = f"{o.passed} passed, {len(o.upstream_failed)} failed, {len(o.skipped)} skipped"
            if o.skipped:
                reasons = sorted({"RDMA" if "RDMA" in r else "no-extension" for _, r in o.skipped})
                result += f" ({', '.join(reasons)})" if not o.unexpected_skips else ""
        verdict = "ok" if o.ok else ("FAILED" if o.role == "gated" else "fails (reported only)")
        ours = o.ours or "-"
        rows.append(f"| {o.version} | {o.role} | {result}: {verdict} | {ours} | {o.seconds:.0f} |")
    return "\n".join(rows)


def details(outcomes: list[Outcome]) -> str:
    lines = []
    for o in outcomes:
        if o.ok:
            continue
        lines.append(f"\nlmcache {o.version} ({o.role}):")
        if o.problem:
            lines.append(f"  {o.problem}")
        for test, first in o.failed:
            lines.append(f"  FAILED {test}: {first}")
        for test, reason in o.unexpected_skips:
            lines.append(f"  unexpected skip {test}: {reason}")
    return "\n".join(lines)


def ensure_venv(venv: Path) -> None:
    """The runner's virtualenv, made or refreshed by scripts/install_lmcache.sh."""
    env = dict(os.environ, MOONCAKE_CFFI_LMCACHE_VENV=str(venv), LMCACHE_VERSION="any")
    done = subprocess.run(
        [str(ROOT / "scripts/install_lmcache.sh")], env=env, stdout=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        raise SystemExit(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--venv",
        type=Path,
        default=CACHE / "venv-lmcache-releases",
        help="the virtualenv whose lmcache is swapped (default: %(default)s)",
    )
    parser.add_argument(
        "--release",
        action="append",
        default=[],
        metavar="X",
        help="run only these releases, all gated (repeatable)",
    )
    parser.add_argument("--no-report", action="store_true", help="skip the newest-release report")
    parser.add_argument(
        "--ours",
        choices=("newest", "all", "none"),
        default="newest",
        help="where to run our own LMCache tests too (OURS: its parser, factory and "
        "lmcache server cases): on the newest gated release (the LMCache tier runs them "
        "on 0.5.6), on every release, or on none (default: %(default)s)",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="use --venv as it is (no scripts/install_lmcache.sh refresh of this package)",
    )
    parser.add_argument(
        "--newest-gated",
        action="store_true",
        help="print the newest gated release and exit (the engine tier runs route b on it)",
    )
    args = parser.parse_args()
    try:
        index = index_sdists()
    except OSError as exc:
        print(f"error: cannot read {INDEX}: {exc}", file=sys.stderr)
        return 2
    pairs = plan(index, args.release, not args.no_report)
    if args.newest_gated:
        print(([v for v, role in pairs if role == "gated"] or [""])[-1])
        return 0
    missing = [v for v, _ in pairs if v not in index]
    if missing:
        print(f"error: no sdist of lmcache {', '.join(missing)} on PyPI", file=sys.stderr)
        return 2
    if not args.no_install:
        ensure_venv(args.venv)
    gated = [v for v, role in pairs if role == "gated"]
    last_gated = gated[-1] if gated else None
    outcomes = []
    for ver, role in pairs:
        log(f"lmcache {ver} ({role}): LMCache's own mooncake_store adapter tests")
        ours = args.ours == "all" or (args.ours == "newest" and ver == last_gated)
        outcome = test_release(args.venv, index[ver], role, ours)
        outcomes.append(outcome)
        log(
            f"lmcache {ver}: {outcome.passed} passed, {len(outcome.upstream_failed)} failed, "
            f"{len(outcome.skipped)} skipped in {outcome.seconds:.0f} s"
            + (f"; {outcome.problem.splitlines()[0]}" if outcome.problem else "")
            + (f"; ours: {outcome.ours}" if outcome.ours else "")
        )
    print(table(outcomes))
    if index:
        last = newest(index)
        print(f"\nnewest lmcache on PyPI: {last.version} (uploaded {last.uploaded[:10]})")
    extra = details(outcomes)
    if extra:
        print(extra)
    return 0 if all(o.ok for o in outcomes if o.role == "gated") else 1


if __name__ == "__main__":
    sys.exit(main())
