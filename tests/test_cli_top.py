"""``mcl2 top`` against real clusters: in a pipe (plain lines, ``--json`` lines), and in a real
terminal (tmux: the screen read with capture-pane, keys sent with send-keys, the window
resized), with a client under load serving its metrics (``--scrape``) and mcl2's own probe
client (``--probe``).  Also: a master that dies while top watches, a scrape target that does
not answer, and the quantile arithmetic on buckets.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import MCL2, cluster_env, free_port, process_env
from mooncake_cffi.cli.top_data import quantile
from ops_load import start_load, stop_load

from mooncake_cffi.cluster import LocalCluster

needs_console = pytest.mark.skipif(not MCL2.exists(), reason="mcl2 is not installed")
needs_tmux = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")


@pytest.fixture(scope="module")
def load(cluster: LocalCluster) -> Iterator[str]:
    """A client of the session cluster under load; the URL of its metrics."""
    port = free_port()
    proc = start_load(
        cluster.client_config(), port, f"top-{uuid.uuid4().hex[:8]}", cluster.client_env()
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        stop_load(proc)


def _top(cluster: LocalCluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MCL2), "top", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=process_env(**cluster_env(cluster)),
    )


# -- in a pipe -------------------------------------------------------------------------------


@needs_console
def test_top_in_a_pipe_prints_one_plain_line_per_refresh(cluster: LocalCluster, load: str) -> None:
    done = _top(cluster, "--count", "3", "--interval", "0.5", "--scrape", load, "--probe")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    segment = cluster.segments()[0]
    for line in lines:
        assert f"master {cluster.master_addr} leader {cluster.master_addr}" in line
        assert "(leader, ok)" in line and " keys " in line and f"fullest {segment}" in line
        assert "\x1b" not in line  # no escape codes in a pipe
    scraped = load.split("//")[1].split("/")[0]
    # From the second refresh on: rates over the interval.
    assert f"| {scraped} put " in lines[1] and f"| {scraped} put -/s" not in lines[1]
    assert "| probe put " in lines[2] and "| probe put -/s" not in lines[2]


@needs_console
def test_top_shows_what_the_cluster_does_with_no_client_of_its_own(
    cluster: LocalCluster, load: str
) -> None:
    # No --scrape, no --probe: the master's counters of every client's requests.
    done = _top(cluster, "--json", "--count", "2", "--interval", "0.5")
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    ops = {(r["source"], r["op"]): r for r in last["ops"]}
    for op in ("put", "exists", "remove"):
        row = ops[("master", op)]
        assert row["window"] == "interval" and row["calls_per_s"] > 1, row
    assert ops[("master", "put")]["keys_per_s"] >= ops[("master", "put")]["calls_per_s"]


@needs_console
def test_top_json_prints_one_document_per_line(cluster: LocalCluster, load: str) -> None:
    done = _top(cluster, "--json", "--count", "3", "--interval", "0.5", "--scrape", load, "--probe")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    docs = [json.loads(line) for line in lines]
    last = docs[-1]
    assert last["master"]["address"] == cluster.master_addr
    assert last["master"]["role"] == "leader" and last["master"]["service_ready"] is True
    assert last["master"]["admin"] == cluster.metrics_url
    names = {s["name"] for s in last["segments"]}
    assert set(cluster.segments()) <= names
    for s in last["segments"]:
        assert s["capacity_bytes"] > 0 and 0 <= s["used_bytes"] <= s["capacity_bytes"]
    assert last["memory"]["capacity_bytes"] >= sum(s["capacity_bytes"] for s in last["segments"])
    ops = {(r["source"], r["op"]): r for r in last["ops"]}
    scraped = load.split("//")[1].split("/")[0]
    for op, lane in (("put", "store"), ("exists", "lookup"), ("remove", "delete")):
        row = ops[(scraped, op)]
        assert row["lane"] == lane and row["window"] == "interval"
        assert row["calls_per_s"] > 1, row
        assert 0 < row["p50_s"] <= row["p99_s"] < 5, row
    put = ops[(scraped, "put")]
    assert put["bytes_per_s"] > put["calls_per_s"] * 16 * 1024  # 4 x 16 KiB per call
    for op in ("put", "exists", "remove"):
        probe = ops[("probe", op)]
        assert probe["calls"] == 3 and 0 < probe["p50_s"] <= probe["p99_s"]
    assert docs[0]["ops"][0]["window"] == "since start"
    assert all(not d["errors"] for d in docs), [d["errors"] for d in docs]


@needs_console
def test_top_leaves_no_probe_key_behind(cluster: LocalCluster) -> None:
    done = _top(cluster, "--count", "2", "--interval", "0.2", "--probe")
    assert done.returncode == 0, done.stderr
    from mooncake_cffi.admin import AdminClient

    assert AdminClient(cluster.metrics_url).keys("mcl2-top/") == []


@needs_console
def test_top_into_a_closed_pipe_exits_141(cluster: LocalCluster) -> None:
    shell = f"'{MCL2}' top --interval 0.2 | head -n 1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    done = subprocess.run(
        ["bash", "-c", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=process_env(**cluster_env(cluster)),
    )
    assert done.stdout.strip() == "141", done.stderr


@needs_console
def test_a_scrape_target_that_does_not_answer_is_an_error_line(cluster: LocalCluster) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    done = _top(cluster, "--count", "2", "--interval", "0.2", "--scrape", url)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        assert f"error: scrape {url}: Connection refused" in line


@needs_console
@pytest.mark.parametrize("bad", ["ftp://x:1", "127.0.0.1", "http://host"])
def test_a_scrape_url_without_a_port_is_a_usage_error(cluster: LocalCluster, bad: str) -> None:
    done = _top(cluster, "--count", "1", "--scrape", bad)
    assert done.returncode == 2
    assert "--scrape" in done.stderr and "http://HOST:PORT" in done.stderr


@needs_console
def test_top_goes_on_while_the_master_is_down(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster("32 MB")
    with local:
        proc = subprocess.Popen(
            [str(MCL2), "top", "--json", "--interval", "0.5", "--count", "8"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=process_env(**cluster_env(local), MCL2_CONNECT_TIMEOUT="0.5"),
        )
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["errors"] == [] and first["master"]["status"] == "ok"
        local.kill("master")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    docs = [first] + [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 8
    assert "admin API" in docs[-1]["errors"][0]
    assert docs[-1]["segments"] == [] and docs[-1]["keys"] is None


# -- in a real terminal (tmux) -----------------------------------------------------------------


class Tmux:
    """One tmux session running a command in a real terminal of a given size."""

    def __init__(self, command: str, width: int = 130, height: int = 32) -> None:
        self.name = f"mcl2-top-{uuid.uuid4().hex[:8]}"
        # A server of its own (-L), without the user's configuration (-f /dev/null).
        self.tmux = ["tmux", "-L", self.name, "-f", "/dev/null"]
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(width),
             "-y", str(height), f"{command}; echo EXIT=$?; sleep 120"],
            check=True,
        )  # fmt: skip

    def screen(self, history: bool = False) -> list[str]:
        """The visible screen (with ``history``: from the start of the scrollback)."""
        since = ["-S", "-"] if history else []
        out = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-J", *since, "-t", self.name],  # -J: joined
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line.rstrip() for line in out.splitlines()]

    def wait_for(self, what: Callable[[list[str]], bool], timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if what(lines):
                return lines
            assert time.monotonic() < deadline, "\n".join(lines)
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def resize(self, width: int, height: int) -> None:
        subprocess.run(
            [*self.tmux, "resize-window", "-t", self.name, "-x", str(width), "-y", str(height)],
            check=True,
        )

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


@pytest.fixture
def tmux_top(cluster: LocalCluster, load: str, tmp_path: Path) -> Iterator[Callable[..., Tmux]]:
    made: list[Tmux] = []
    env = " ".join(f"{k}='{v}'" for k, v in cluster_env(cluster).items())

    def start(*args: str, width: int = 130, height: int = 32) -> Tmux:
        term = Tmux(
            f"env -u MCL2_STATE_DIR {env} '{MCL2}' top --scrape {load} " + " ".join(args),
            width,
            height,
        )
        made.append(term)
        return term

    yield start
    for term in made:
        term.close()


def _text(lines: list[str]) -> str:
    return "\n".join(lines)


@needs_console
@needs_tmux
def test_top_in_a_terminal_refreshes_sorts_resizes_and_quits_on_q(
    cluster: LocalCluster, load: str, tmux_top: Callable[..., Tmux]
) -> None:
    term = tmux_top("--probe", "--interval", "0.5")
    scraped = load.split("//")[1].split("/")[0]
    lines = term.wait_for(
        lambda ls: (
            any(line.startswith(scraped) and " put " in line for line in ls)
            and "refresh 3" in ls[0]
        )
    )
    text = _text(lines)
    assert lines[0].startswith("mcl2 top - ") and "every 0.5 s" in lines[0]
    assert f"master   {cluster.master_addr}" in text and "(leader, ok)" in text
    assert "SEGMENTS (sorted by use% v)" in text
    assert any(line.startswith(cluster.segments()[0]) for line in lines)
    assert "OPERATIONS (master" in text and "P50" in text and "P99" in text
    put = next(line for line in lines if line.startswith(scraped) and " put " in line)
    assert put.split()[2] == "store" and float(put.split()[3]) > 1  # calls per second
    assert any(line.startswith("probe") and " exists " in line for line in lines)
    assert lines[-1].startswith("q quit  space refresh  s sort")
    first = int(lines[0].split("refresh ")[1])

    term.keys("s")
    term.wait_for(lambda ls: "SEGMENTS (sorted by used v)" in _text(ls))
    term.keys("r")
    term.wait_for(lambda ls: "SEGMENTS (sorted by used ^)" in _text(ls))
    term.keys("s", "s", "s")
    term.wait_for(lambda ls: "SEGMENTS (sorted by use% ^)" in _text(ls))

    # It keeps refreshing by itself.
    term.wait_for(lambda ls: int(ls[0].split("refresh ")[1]) >= first + 2)

    term.resize(64, 14)
    small = term.wait_for(
        lambda ls: len(ls) == 14 and ls[0].startswith("mcl2 top - ") and ls[-1].startswith("q quit")
    )
    assert all(len(line) <= 64 for line in small)
    assert small[0].startswith("mcl2 top - ")
    term.resize(150, 40)
    big = term.wait_for(
        lambda ls: len(ls) == 40 and ls[0].startswith("mcl2 top - ") and ls[-1].startswith("q quit")
    )
    assert "OPERATIONS (master" in _text(big)

    term.keys("q")
    after = term.wait_for(lambda ls: "EXIT=0" in _text(ls), timeout=10)
    assert "SEGMENTS" not in _text(after)  # the terminal's screen is restored


@needs_console
@needs_tmux
def test_top_in_a_terminal_quits_on_ctrl_c(tmux_top: Callable[..., Tmux]) -> None:
    for round_ in range(3):
        term = tmux_top("--interval", "0.3")
        term.wait_for(lambda ls: "refresh 2" in (ls[0] if ls else ""))
        t0 = time.monotonic()
        term.keys("C-c")
        after = term.wait_for(lambda ls: "EXIT=" in _text(ls), timeout=10)
        took = time.monotonic() - t0
        print(f"\n[top] round {round_}: Ctrl-C quit in {took:.2f} s")
        assert "EXIT=130" in _text(after) and took < 3
        assert "Traceback" not in _text(after)


@needs_console
@needs_tmux
def test_top_in_a_terminal_with_json_still_prints_lines(tmux_top: Callable[..., Tmux]) -> None:
    term = tmux_top("--json", "--count", "2", "--interval", "0.3")
    term.wait_for(lambda ls: "EXIT=0" in _text(ls))
    lines = term.screen(history=True)
    docs = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(docs) == 2, lines and all("segments" in d for d in docs)


# -- the arithmetic --------------------------------------------------------------------------


def test_quantiles_interpolate_inside_the_bucket() -> None:
    buckets = [(0.001, 10.0), (0.002, 90.0), (0.004, 100.0), (math.inf, 100.0)]
    assert quantile(0.05, buckets) == pytest.approx(0.0005)
    assert quantile(0.5, buckets) == pytest.approx(0.0015)
    assert quantile(0.99, buckets) == pytest.approx(0.0038)
    assert quantile(0.5, [(0.001, 0.0), (math.inf, 0.0)]) is None
    assert quantile(0.99, [(0.001, 1.0), (math.inf, 10.0)]) == 0.001  # in +Inf: the last edge
    assert quantile(0.5, []) is None


@needs_console
def test_an_unreachable_etcd_fails_at_once_naming_it() -> None:
    etcd = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [str(MCL2), "top", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env=process_env(
            MCL2_MASTER=f"etcd://{etcd}",
            MCL2_METADATA_SERVER="http://127.0.0.1:8080/metadata",
            MCL2_CLUSTER_ID="top-test",
            MCL2_CONNECT_TIMEOUT="0.5",
        ),
    )
    assert done.returncode == 1, done.stderr
    assert etcd in done.stderr and "--admin URL" in done.stderr
    assert "Traceback" not in done.stderr
