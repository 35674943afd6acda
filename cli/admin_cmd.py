"""mcl2's look inside a cluster, through the master's admin HTTP API: ``ls``, ``info``,
``segments`` and ``metrics`` (``doctor`` lives in :mod:`.doctor_cmd`).

All of them read :class:`mooncake_cffi.admin.AdminClient` only (no Mooncake client is set
up), from ``--admin URL`` or the default the settings derive (:meth:`Settings.admin_url`).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import click

from mooncake_cffi.sizes import human_bytes

from .app import admin_command, keys_from_option
from .errors import EXIT_ERROR, EXIT_NOT_FOUND
from .keys import gather_keys, key_bytes, show_key, unusable, wire_key
from .output import write_stdout, writes_json_lines
from .settings import Settings, pass_settings

#: Bytes of output gathered before one write to standard output.
_OUT_CHUNK = 64 * 1024


def _write_lines(lines: Iterable[bytes]) -> None:
    """Write lines (without newline) to standard output in chunks."""
    buf: list[bytes] = []
    size = 0
    for line in lines:
        buf.append(line)
        buf.append(b"\n")
        size += len(line) + 1
        if size >= _OUT_CHUNK:
            write_stdout(b"".join(buf))
            buf, size = [], 0
    if buf:
        write_stdout(b"".join(buf))


def _write_json_array(items: Iterable[Any]) -> None:
    """One JSON array on standard output, written as it is produced (on one line inside
    :func:`~.output.json_lines`)."""
    one_line = writes_json_lines()
    opening, between, closing = (b"[", b",", b"]") if one_line else (b"[\n  ", b",\n  ", b"\n]")
    sep = (",", ":") if one_line else None

    def lines() -> Iterator[bytes]:
        first = True
        for item in items:
            yield (opening if first else between) + json.dumps(item, separators=sep).encode()
            first = False
        yield b"[]" if first else closing

    buf: list[bytes] = []
    size = 0
    for part in lines():
        buf.append(part)
        size += len(part)
        if size >= _OUT_CHUNK:
            write_stdout(b"".join(buf))
            buf, size = [], 0
    buf.append(b"\n")
    write_stdout(b"".join(buf))


# -- ls ------------------------------------------------------------------------------------


@admin_command(
    json_help="Print the keys as one JSON array (with -l: objects with key, size, replicas)."
)
@click.argument("prefix", required=False, default="", metavar="[PREFIX]")
@click.option("-l", "--long", "long_", is_flag=True, help="Add each key's size and replica count.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    metavar="N",
    help="List only the first N keys (in sorted order).",
)
@pass_settings
def ls(settings: Settings, prefix: str, long_: bool, limit: int | None) -> None:
    """List the keys in the cluster, sorted bytewise, one per line.

    \b
    mcl2 ls                 every key
    mcl2 ls user/           keys starting with 'user/'
    mcl2 ls -l --limit 10   'KEY<TAB>SIZE<TAB>REPLICAS' for the first 10

    Exits with status 0 even when no key matches. Keys are printed as the
    bytes stored (a key holding a newline looks like two keys: the master's
    listing cannot tell them apart).
    """
    admin = settings.admin_client()
    found = admin.iter_keys(wire_key(prefix))
    keys = heapq.nsmallest(limit, found) if limit is not None else sorted(found)
    if not long_:
        if settings.json:
            _write_json_array(show_key(k) for k in keys)
        else:
            _write_lines(keys)
        return
    queryable = [k for k in keys if admin.can_query(k)]
    infos = admin.query(queryable)

    def described(key: bytes) -> tuple[int | None, int | None]:
        info = infos.get(key)
        if info is None:  # removed since the listing, or not queryable over HTTP
            return None, None
        return info.size, len(info.replicas)

    if settings.json:
        _write_json_array(
            {"key": show_key(k), "size": size, "replicas": n}
            for k in keys
            for size, n in [described(k)]
        )
        return

    def rows() -> Iterator[bytes]:
        for key in keys:
            size, n = described(key)
            yield b"%s\t%s\t%s" % (
                key,
                b"-" if size is None else str(size).encode(),
                b"-" if n is None else str(n).encode(),
            )

    _write_lines(rows())


# -- info ----------------------------------------------------------------------------------


@admin_command(
    json_help="Print {KEY: {status: found|missing|error, size, replicas: [...]}} as JSON "
    "(error: a key that cannot be asked about, with why)."
)
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@pass_settings
def info(settings: Settings, keys: tuple[str, ...], keys_from: str | None) -> None:
    """Show where each key is stored: its size and every replica (kind,
    segment, transport endpoint, protocol, segment status).

    Exits with status 3 if any key is missing, 1 if a key cannot be asked
    about (the admin API cannot carry keys with spaces, control characters
    or '&').
    """
    all_keys = gather_keys(keys, keys_from)
    admin = settings.admin_client()
    wire = {key: wire_key(key) for key in all_keys}
    unsendable = [key for key in all_keys if not admin.can_query(wire[key])]
    infos = admin.query([wire[k] for k in all_keys if k not in unsendable])
    segments = {s.endpoint: s for s in admin.segments() if s.endpoint}
    records: dict[str, Any] = {}
    for key in all_keys:
        if key in unsendable:
            records[key] = {
                "status": "error",
                "error": unusable(key)
                or "the admin API cannot carry this key (space, control byte or '&')",
            }
            continue
        found = infos.get(wire[key])
        if found is None:
            records[key] = {"status": "missing"}
            continue
        replicas = []
        for r in found.replicas:
            segment = segments.get(r.endpoint) if r.endpoint else None
            replicas.append(
                {
                    "kind": r.kind,
                    "segment": segment.name if segment is not None else None,
                    "endpoint": r.endpoint,
                    "protocol": r.protocol,
                    "status": segment.status if segment is not None else "unknown segment",
                    "address": r.address,
                    "path": r.path,
                }
            )
        records[key] = {"status": "found", "size": found.size, "replicas": replicas}
    if settings.json:
        settings.emit_json({show_key(k): v for k, v in records.items()})
    elif not settings.quiet:
        _print_info(records)
    if any(r["status"] == "error" for r in records.values()):
        for key, r in records.items():
            if r["status"] == "error":
                click.echo(f"{show_key(key)!r}: {r['error']}", err=True)
        click.get_current_context().exit(EXIT_ERROR)
    if any(r["status"] == "missing" for r in records.values()):
        click.get_current_context().exit(EXIT_NOT_FOUND)


def _print_info(records: dict[str, Any]) -> None:
    lines: list[bytes] = []
    for key, r in records.items():
        if r["status"] == "error":
            continue
        if r["status"] == "missing":
            lines.append(key_bytes(key) + b": not found")
            continue
        size = r["size"]
        lines.append(key_bytes(key))
        lines.append(f"  size      {human_bytes(size)} ({size} bytes)".encode())
        lines.append(f"  replicas  {len(r['replicas'])}".encode())
        for rep in r["replicas"]:
            where = rep["path"] or f"endpoint {rep['endpoint']}"
            lines.append(
                f"    {rep['kind']:<7} segment {rep['segment'] or '?'}  {where}  "
                f"{rep['protocol'] or '?'}  status {rep['status'] or '?'}".encode()
            )
    _write_lines(lines)


# -- segments ------------------------------------------------------------------------------


@admin_command(json_help="Print the segments as a JSON array of objects.")
@pass_settings
def segments(settings: Settings) -> None:
    """List the storage segments mounted in the master: name, transport
    endpoint, protocol, capacity, used bytes and status.

    Exits with status 0 even when none is mounted (`mcl2 doctor` fails then).
    """
    admin = settings.admin_client()
    found = admin.segments()
    if settings.json:
        settings.emit_json(
            [
                {
                    "name": s.name,
                    "endpoint": s.endpoint,
                    "protocol": s.protocol,
                    "capacity_bytes": s.capacity_bytes,
                    "used_bytes": s.used_bytes,
                    "status": s.status,
                    **s.extra,
                }
                for s in found
            ]
        )
        return
    if settings.quiet:
        return
    if not found:
        settings.info("no segments mounted")
        return
    header = ("NAME", "ENDPOINT", "PROTOCOL", "CAPACITY", "USED", "USE%", "STATUS")
    rows = [header]
    for s in found:
        pct = f"{100.0 * (s.used_bytes or 0) / s.capacity_bytes:.1f}" if s.capacity_bytes else "?"
        rows.append(
            (
                s.name,
                s.endpoint or "?",
                s.protocol or "?",
                human_bytes(s.capacity_bytes),
                human_bytes(s.used_bytes),
                pct,
                s.status or "?",
            )
        )
    _print_table(rows)


def _print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


# -- metrics -------------------------------------------------------------------------------


@admin_command(json_help="Print the figures as one JSON object.")
@click.option("--raw", is_flag=True, help="Print the master's Prometheus text as it is.")
@pass_settings
def metrics(settings: Settings, raw: bool) -> None:
    """Show the master's main figures: keys, memory used / capacity, segments,
    clients, request counts, failures, evictions and health.

    Request counts include every key of batch requests; failures include
    lookups of missing keys. --raw prints all of /metrics (Prometheus text).
    """
    admin = settings.admin_client()
    if raw:
        if settings.json:
            raise click.UsageError("--raw and --json exclude each other")
        write_stdout(admin.metrics_text().encode())
        return
    figures = admin.metrics().summary()
    health = admin.health()
    figures["health"] = {
        "status": health.get("status"),
        "role": health.get("role"),
        "service_ready": health.get("service_ready"),
    }
    if settings.json:
        settings.emit_json(figures)
        return
    if settings.quiet:
        return
    memory = figures["memory"]
    used, capacity = memory["used_bytes"], memory["capacity_bytes"]
    mem = f"{human_bytes(used)} used of {human_bytes(capacity)}"
    if capacity:
        mem += f" ({100.0 * (used or 0) / capacity:.1f}%)"
    req = figures["requests"]
    h = figures["health"]
    ready = "service ready" if h["service_ready"] else "service NOT ready"
    rows = [
        ("keys", _num(figures["keys"])),
        ("memory", mem),
        ("segments", _num(figures["segments"])),
        ("clients", _num(figures["clients"])),
        ("requests", ", ".join(f"{op} {_num(n)}" for op, n in req.items())),
        ("failures", _num(figures["failures"])),
        ("evictions", _num(figures["evictions"])),
        ("health", f"{h['status']} ({h['role'] or '?'}, {ready})"),
    ]
    for name, value in rows:
        click.echo(f"{name:<10} {value}")


def _num(value: Any) -> str:
    return "?" if value is None else f"{value:,}"
