"""``mcl2 top``: a live view of a cluster, refreshed every ``--interval`` seconds.

On a terminal (standard input and output both terminals) it is a full-screen view drawn with
the standard library's :mod:`curses`: the master and the leader, keys, memory, clients, every
segment's used / capacity (sorted, ``s`` cycles the order, ``r`` reverses it), and per
operation the calls and keys per second and failures the master counts for all its clients,
and the calls, keys and bytes per second, failures, timeouts and p50 / p99 latency of the
clients it reads (``--scrape URL`` of a client's Prometheus endpoint, ``--probe`` for a
client it runs itself).  Space refreshes at once, a resized terminal is redrawn to its new
size, ``q`` quits (status 0) and Ctrl-C too (status 130, as for every command).  Otherwise it
prints one plain line per refresh, or with ``--json`` one JSON document per line.  What is
sampled and how rates and quantiles are computed lives in :mod:`.top_data`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import click

from mooncake_cffi.sizes import human_bytes

from .app import admin_command
from .errors import CliError
from .options import Seconds
from .output import json_lines, stdin_is_terminal, write_json, write_stdout
from .settings import Settings, pass_settings
from .top_data import (
    SORT_KEYS,
    OpSource,
    ProbeSource,
    Readings,
    Sample,
    ScrapeSource,
    op_rows,
    sample_cluster,
    sort_segments,
)

#: The keys the full-screen view answers, as its last line shows them.
KEYS_HELP = "q quit  space refresh  s sort  r reverse"
#: The operations table: headings and widths (100 columns in all).
OP_COLUMNS = (
    ("SOURCE", 18), ("OP", 10), ("LANE", 8), ("CALLS/S", 8), ("KEYS/S", 8),
    ("BYTES/S", 10), ("FAIL/S", 6), ("TMO/S", 6), ("P50", 8), ("P99", 8),
)  # fmt: skip


class Top:
    """The state of one ``mcl2 top``: where to sample, the last two samples, the order."""

    def __init__(
        self, settings: Settings, sources: list[OpSource], interval: float, sort: str
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.interval = interval
        self.sort = sort
        self.reverse = False
        self.sample: Sample | None = None
        self.rows: list[dict[str, Any]] = []
        self._before: Readings | None = None
        self._before_at = 0.0
        self.refreshes = 0

    # -- sampling ---------------------------------------------------------------------------

    def where(self) -> tuple[Any, dict[str, Any]]:
        """The admin client of this refresh and the master's address and leader."""
        from mooncake_cffi.admin import AdminClient, admin_url_for_master

        from . import ha
        from .resolve import DEFAULT_MASTER_PORT, explicit, local_cluster

        s = self.settings
        if not explicit(s) and not s.admin:
            local = local_cluster(s, for_client=False)
            index = local.leader()
            leader = local.master_roles[index] if index is not None else None
            url = local.master_metrics_url(0 if index is None else index)
            master = {"address": local.master_addr, "leader": leader}
            return AdminClient(url, timeout=s.connect_timeout), master
        if not explicit(s):
            return s.admin_client(), {"address": None, "leader": None}
        setup = s.store_config().setup_config
        address = str(setup.get("master_server_addr", f"127.0.0.1:{DEFAULT_MASTER_PORT}"))
        if ha.is_etcd(address):
            try:
                leader = ha.leader_address(address, ha.cluster_id_of(setup), s.connect_timeout)
            except ha.HaError as exc:
                raise CliError(f"{exc}; or give --admin URL") from None
            url = s.admin or admin_url_for_master(leader)
            return AdminClient(url, timeout=s.connect_timeout), {
                "address": address,
                "leader": leader,
            }
        return s.admin_client(), {"address": address, "leader": address}

    def refresh(self) -> Sample:
        """Take a sample and work out the rates since the previous one."""
        sample = sample_cluster(self.where, self.sources)
        now = time.monotonic()
        self.rows = op_rows(sample.readings, self._before, now - self._before_at)
        self._before, self._before_at = sample.readings, now
        self.sample = sample
        self.refreshes += 1
        return sample

    def segments(self) -> list[dict[str, Any]]:
        return sort_segments(self.sample.segments if self.sample else [], self.sort, self.reverse)

    def next_sort(self) -> None:
        self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]

    # -- what is shown ----------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """This refresh as one JSON document."""
        s = self.sample
        assert s is not None
        return {
            "time": _iso(s.taken),
            "interval_s": self.interval,
            "master": s.master,
            "keys": s.keys,
            "clients": s.clients,
            "memory": s.memory,
            "segments": self.segments(),
            "ops": self.rows,
            "errors": s.errors,
        }

    def line(self) -> str:
        """This refresh as one plain line."""
        s = self.sample
        assert s is not None
        parts = [_iso(s.taken)]
        m = s.master
        if m.get("address") or m.get("leader"):
            parts.append(f"master {m.get('address') or '?'} leader {m.get('leader') or 'none'}")
        if m.get("status"):
            parts.append(f"({m.get('role') or '?'}, {m['status']})")
        parts.append(f"keys {_num(s.keys)}")
        parts.append(f"mem {_memory(s.memory)}")
        parts.append(f"clients {_num(s.clients)} segments {len(s.segments)}")
        segments = sort_segments(s.segments, "use%")
        if segments and segments[0]["use_percent"] is not None:
            parts.append(f"fullest {segments[0]['name']} {segments[0]['use_percent']:.1f}%")
        text = " ".join(parts)
        for row in self.rows:
            text += (
                f" | {row['source']}{'[' + row['client'] + ']' if row['client'] else ''} "
                f"{row['op']} {_rate(row['calls_per_s'])}/s p50 {_latency(row['p50_s'])} "
                f"p99 {_latency(row['p99_s'])}"
            )
            if row["failed_per_s"]:
                text += f" fail {_rate(row['failed_per_s'])}/s"
            if row["timeouts_per_s"]:
                text += f" timeouts {_rate(row['timeouts_per_s'])}/s"
        for error in s.errors:
            text += f" | error: {error}"
        return text

    def screen(self) -> list[tuple[str, str]]:
        """The full-screen view as lines with a style: ``title``, ``header``, ``error``, ``""``."""
        s = self.sample
        assert s is not None
        m = s.master
        out: list[tuple[str, str]] = []
        out.append(
            (
                f"mcl2 top - {time.strftime('%H:%M:%S', time.localtime(s.taken))} - "
                f"every {self.interval:g} s - refresh {self.refreshes}",
                "title",
            )
        )
        role = f"{m.get('role') or '?'}, {m.get('status') or '?'}"
        if m.get("service_ready") is False:
            role += ", service NOT ready"
        out.append((f"master   {m.get('address') or '?'}  leader {m.get('leader') or 'none'}", ""))
        out.append((f"admin    {m.get('admin') or '?'}  ({role})", ""))
        out.append(
            (
                f"keys     {_num(s.keys)}   memory {_memory(s.memory)}   "
                f"clients {_num(s.clients)}   segments {len(s.segments)}",
                "",
            )
        )
        for error in s.errors:
            out.append((f"error    {error}", "error"))
        out.append(("", ""))
        arrow = "^" if self.reverse else "v"
        out.append(
            (
                f"SEGMENTS (sorted by {self.sort} {arrow})",
                "title",
            )
        )
        out.append(
            (
                _cols(("NAME", 24), ("USED", 11), ("CAPACITY", 11), ("USE%", 6), ("STATUS", 8)),
                "header",
            )
        )
        for seg in self.segments():
            pct = seg["use_percent"]
            out.append(
                (
                    _cols(
                        (str(seg["name"]), 24),
                        (human_bytes(seg["used_bytes"]), 11),
                        (human_bytes(seg["capacity_bytes"]), 11),
                        ("?" if pct is None else f"{pct:.1f}", 6),
                        (str(seg["status"] or "?"), 8),
                    ),
                    "",
                )
            )
        if not s.segments:
            out.append(("(no segment mounted)", ""))
        out.append(("", ""))
        out.append(("OPERATIONS (master: every client's requests; clients: --scrape, --probe)",
                    "title"))  # fmt: skip
        out.append((_cols(*OP_COLUMNS), "header"))
        for row in self.rows:
            source = row["source"] + (f"[{row['client']}]" if row["client"] else "")
            cells = (
                source,
                row["op"],
                row["lane"] or "-",
                _rate(row["calls_per_s"]),
                _rate(row["keys_per_s"]),
                _bytes_rate(row["bytes_per_s"]),
                _rate(row["failed_per_s"]),
                _rate(row["timeouts_per_s"]),
                _latency(row["p50_s"]),
                _latency(row["p99_s"]),
            )
            widths = [width for _, width in OP_COLUMNS]
            style = "error" if row["failed_per_s"] or row["timeouts_per_s"] else ""
            out.append((_cols(*zip(cells, widths, strict=True)), style))
        if not self.rows:
            out.append(("(no operation seen yet)", ""))
        return out


def _cols(*cells: tuple[str, int]) -> str:
    return " ".join(text[:width].ljust(width) for text, width in cells).rstrip()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).astimezone().isoformat(timespec="seconds")


def _num(value: Any) -> str:
    return "?" if value is None else f"{value:,}"


def _memory(memory: dict[str, int | None]) -> str:
    used, capacity = memory.get("used_bytes"), memory.get("capacity_bytes")
    text = f"{human_bytes(used)}/{human_bytes(capacity)}"
    if capacity:
        text += f" ({100.0 * (used or 0) / capacity:.1f}%)"
    return text


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _bytes_rate(value: float | None) -> str:
    return "-" if value is None else human_bytes(value)


def _latency(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


# -- the three ways of showing it -------------------------------------------------------------


def _ticks(top: Top, count: int | None) -> Iterator[None]:
    """Refresh ``count`` times (None: until interrupted), ``top.interval`` apart."""
    n = 0
    while count is None or n < count:
        if n:
            time.sleep(top.interval)
        top.refresh()
        n += 1
        yield None


def _run_lines(top: Top, count: int | None, as_json: bool) -> None:
    with json_lines():
        for _ in _ticks(top, count):
            if as_json:
                write_json(top.document())
            else:
                write_stdout((top.line() + "\n").encode())


def _run_screen(top: Top, count: int | None) -> None:
    import curses

    def draw(screen: Any) -> None:
        screen.erase()
        height, width = screen.getmaxyx()
        styles = {"title": curses.A_BOLD, "header": curses.A_REVERSE, "error": curses.A_BOLD}
        lines = top.screen()
        for y, (text, style) in enumerate(lines[: max(0, height - 1)]):
            try:
                screen.addnstr(y, 0, text, max(0, width - 1), styles.get(style, curses.A_NORMAL))
            except curses.error:
                pass
        if height > 1:
            try:
                screen.addnstr(height - 1, 0, KEYS_HELP, max(0, width - 1), curses.A_REVERSE)
            except curses.error:
                pass
        screen.refresh()

    def main(screen: Any) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        screen.keypad(True)
        top.refresh()
        due = time.monotonic() + top.interval
        while True:
            draw(screen)
            screen.timeout(max(0, int((due - time.monotonic()) * 1000)))
            key = screen.getch()
            if key in (ord("q"), ord("Q")):
                return
            if key == curses.KEY_RESIZE:
                curses.update_lines_cols()
                continue
            if key == ord("s"):
                top.next_sort()
                continue
            if key == ord("r"):
                top.reverse = not top.reverse
                continue
            if key in (-1, ord(" ")) or time.monotonic() >= due:
                if count is not None and top.refreshes >= count:
                    return
                top.refresh()
                due = time.monotonic() + top.interval

    # ncurses prefers $LINES / $COLUMNS to the terminal's size, also after a resize: they
    # describe the terminal as it was when some shell exported them, so they go.
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)
    curses.wrapper(main)


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


@admin_command(json_help="Print one JSON document per refresh, one per line (never full-screen).")
@click.option(
    "--interval",
    type=Seconds(min=0.1, max=3600),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    metavar="N",
    help="Stop after N refreshes (default: until q or Ctrl-C).",
)
@click.option(
    "--scrape",
    multiple=True,
    metavar="URL",
    help="A client's Prometheus endpoint (mooncake_cffi.metrics), http://HOST:PORT[/metrics], "
    "for its per-operation rates and latencies; repeatable.",
)
@click.option(
    "--probe",
    is_flag=True,
    help="Also run a client of mcl2's own, which puts, checks, gets and removes one 4 KiB "
    "key per refresh, and show its operations.",
)
@click.option(
    "--sort",
    type=click.Choice(SORT_KEYS),
    default=SORT_KEYS[0],
    show_default=True,
    help="Order of the segments (the s key cycles it on a terminal).",
)
@pass_settings
def top(
    settings: Settings,
    interval: float,
    count: int | None,
    scrape: tuple[str, ...],
    probe: bool,
    sort: str,
) -> None:
    """Watch a cluster live: the master and its leader, keys, memory, clients,
    every segment's use, the rates per operation of all its clients as the
    master counts them, and the rates and p50 / p99 latencies per operation of
    the clients it reads (--scrape URL, --probe).

    \b
    mcl2 top                                   the local cluster
    mcl2 top --scrape http://10.0.0.5:9400     with an application's metrics
    mcl2 top --probe --count 5 | cat           five plain lines
    mcl2 top --json --count 1                  one JSON document

    On a terminal it is full screen: q quits, space refreshes, s cycles the
    segments' order, r reverses it; the view follows the terminal's size.
    When standard input or output is not a terminal it prints one line per
    refresh (with --json: one JSON document per line). Rates are per second
    over the last interval (the first refresh shows totals and latencies
    since each client started). A master that stops answering is shown as an
    error line, and the view goes on.
    """
    sources: list[OpSource] = []
    for url in scrape:
        try:
            sources.append(ScrapeSource(url, settings.connect_timeout))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--scrape'") from None
    top_view = Top(settings, sources, interval, sort)
    top_view.where()  # a cluster that cannot be found fails here, as for every command
    if probe:
        source = ProbeSource(settings.client())
        click.get_current_context().find_root().call_on_close(source.close)
        sources.append(source)
    if settings.json or not (_stdout_is_terminal() and stdin_is_terminal()):
        _run_lines(top_view, count, settings.json)
    else:
        _run_screen(top_view, count)
