"""mcl2's key commands that read or remove: ``get``, ``exists``, ``stat`` and ``rm``
(``put`` is in :mod:`.put_cmd`).

Each reads its keys from arguments or ``--keys-from``, works in batches through one client,
and reports per key (``--json``: one document); a missing key makes the exit status 3.
Keys go to Mooncake as bytes (see :mod:`.keys`).  ``rm`` holds SIGINT / SIGTERM while a
batch is in flight, then stops and says what was removed (exit 130 / 143).
"""

from __future__ import annotations

from pathlib import Path

import click

from mooncake_cffi.sizes import human_bytes
from mooncake_cffi.status import OBJECT_HAS_LEASE, OBJECT_NOT_FOUND

from .app import key_command, keys_from_option
from .batches import CHUNK_KEYS, chunks
from .errors import EXIT_ERROR, EXIT_NOT_FOUND, Interrupted, KeyNotFound
from .files import file_name_for, write_file
from .interrupts import describe, exit_status, held_signals
from .keys import STDIN, gather_keys, key_bytes, split_usable, wire_key, wire_keys
from .output import Progress, plural, require_stdout, wants_progress, write_stdout
from .report import KeyReport
from .settings import Settings, pass_settings

LEASE_MESSAGE = (
    "has a read lease (OBJECT_HAS_LEASE): it was read in the last ~10 s; retry later or use --force"
)


# -- get ---------------------------------------------------------------------------------


@key_command(json_help="With -o or -d: print {KEY: {status: written|missing, bytes, path}}.")
@click.argument("keys", nargs=-1, metavar="KEY...")
@click.option("-o", "--output", metavar="FILE|-", help="Write the value to FILE (default: stdout).")
@click.option(
    "-d",
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write each key to DIR/KEY (created if needed); needed for several keys.",
)
@keys_from_option
@pass_settings
def get(
    settings: Settings,
    keys: tuple[str, ...],
    output: str | None,
    directory: Path | None,
    keys_from: str | None,
) -> None:
    """Write the value of KEY to stdout or a file, byte for byte.

    \b
    mcl2 get KEY > FILE            to stdout
    mcl2 get KEY -o FILE           to FILE (written only if KEY exists)
    mcl2 get K1 K2 ... -d DIR      each key to DIR/KEY, as one batch
    mcl2 get --keys-from - -d DIR  keys from stdin

    A missing key exits with status 3 (the other keys are still written).
    """
    if output is not None and directory is not None:
        raise click.UsageError("-o/--output and -d/--dir exclude each other")
    all_keys = gather_keys(keys, keys_from)
    if directory is None and (len(all_keys) > 1 or keys_from is not None):
        raise click.UsageError(
            "several keys (or --keys-from) need -d DIR to write them to; -o takes one key"
        )
    if settings.json and output in (None, STDIN) and directory is None:
        raise click.UsageError("--json needs -o FILE or -d DIR (the value would go to stdout)")
    if directory is None:
        if output in (None, STDIN):
            require_stdout()
        _get_one(settings, all_keys[0], output)
    else:
        _get_many(settings, all_keys, directory)


def _get_one(settings: Settings, key: str, output: str | None) -> None:
    (value,) = settings.transfer().get([wire_key(key)])
    if value is None:
        if settings.json:
            settings.emit_json({key: {"status": "missing"}})
        raise KeyNotFound(f"key {key!r} not found")
    if output is None or output == STDIN:
        write_stdout(value)  # a short write to a closed pipe is an error (exit 141)
        return
    write_file(Path(output), value)
    settings.debug(f"{key}: wrote {human_bytes(len(value))} to {output}")
    if settings.json:
        settings.emit_json({key: {"status": "written", "bytes": len(value), "path": output}})


def _get_many(settings: Settings, given: list[str], directory: Path) -> None:
    report = KeyReport(settings)
    keys = report.usable(given)
    names = [file_name_for(k) for k in keys]
    directory.mkdir(parents=True, exist_ok=True)
    transfer = settings.transfer() if keys else None
    written = written_bytes = 0
    with Progress(
        wants_progress(len(keys)) and not settings.quiet and not settings.json, len(keys), "get"
    ) as progress:
        for start in range(0, len(keys), CHUNK_KEYS):
            batch = keys[start : start + CHUNK_KEYS]
            assert transfer is not None
            values = transfer.get(wire_keys(batch))
            for key, name, value in zip(
                batch, names[start : start + CHUNK_KEYS], values, strict=True
            ):
                if value is None:
                    report.missing += 1
                    report.add(key, "missing")
                    report.problem(f"{key}: not found")
                    continue
                path = directory / name
                write_file(path, value)
                written += 1
                written_bytes += len(value)
                report.add(key, "written", bytes=len(value), path=str(path))
            progress.advance(len(batch))
    report.flush_problems()
    summary = (
        f"wrote {written} of {plural(len(given), 'key')} to {directory} "
        f"({human_bytes(written_bytes)})"
    )
    if report.missing:
        summary += f", {report.missing} not found"
    if report.failed:
        summary += f", {report.failed} failed"
    settings.info(summary)
    report.finish()


# -- exists ------------------------------------------------------------------------------


@key_command(
    json_help="Print {KEY: true|false} as JSON ({status: error, error} for a key that "
    "cannot be sent)."
)
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@pass_settings
def exists(settings: Settings, keys: tuple[str, ...], keys_from: str | None) -> None:
    """Print 'KEY<TAB>true' or 'KEY<TAB>false' for each key.

    Exits with status 0 if every key exists and 3 if any is missing (with -q
    nothing is printed: test the status). Checking a key renews its read lease.
    """
    all_keys = gather_keys(keys, keys_from)
    usable, refused = split_usable(all_keys)
    found: dict[str, bool] = {}
    if usable:
        client = settings.client()
        with Progress(
            wants_progress(len(usable)) and not settings.quiet and not settings.json,
            len(usable),
            "exists",
        ) as progress:
            for batch in chunks(usable, 4 * CHUNK_KEYS):
                results = client.batch_exists(wire_keys(batch))
                for key, present in zip(batch, results, strict=True):
                    found[key] = present
                progress.advance(len(batch))
    if settings.json:
        settings.emit_json(
            {key: found[key] if key in found else _refused(refused, key) for key in all_keys}
        )
    elif not settings.quiet:
        write_stdout(
            b"".join(
                key_bytes(key) + (b"\ttrue\n" if present else b"\tfalse\n")
                for key, present in found.items()
            )
        )
    _leave(refused, missing=not all(found.values()))


# -- stat --------------------------------------------------------------------------------


@key_command(
    json_help="Print {KEY: SIZE|null} as JSON ({status: error, error} for a key that cannot "
    "be sent)."
)
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@pass_settings
def stat(settings: Settings, keys: tuple[str, ...], keys_from: str | None) -> None:
    """Print 'KEY<TAB>SIZE' (bytes) for each key, '-' for a missing one.

    Exits with status 3 if any key is missing.
    """
    all_keys = gather_keys(keys, keys_from)
    usable, refused = split_usable(all_keys)
    client = settings.client() if usable else None
    sizes = {key: client.size(wire_key(key)) for key in usable if client is not None}
    if settings.json:
        settings.emit_json(
            {key: sizes[key] if key in sizes else _refused(refused, key) for key in all_keys}
        )
    elif not settings.quiet:
        write_stdout(
            b"".join(
                key_bytes(key) + f"\t{'-' if size is None else size}\n".encode()
                for key, size in sizes.items()
            )
        )
    _leave(refused, missing=any(size is None for size in sizes.values()))


def _refused(refused: dict[str, str], key: str) -> dict[str, str]:
    return {"status": "error", "error": refused[key]}


def _leave(refused: dict[str, str], missing: bool) -> None:
    """Name the keys not sent on stderr, and leave with status 1 (any refused) or 3 (a key
    missing); return otherwise."""
    for key, why in refused.items():
        click.echo(f"{key!r}: {why}", err=True)
    if refused:
        click.get_current_context().exit(EXIT_ERROR)
    if missing:
        click.get_current_context().exit(EXIT_NOT_FOUND)


# -- rm ----------------------------------------------------------------------------------


@key_command(json_help="Print {KEY: {status: removed|absent|leased|error}} as JSON.")
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@click.option(
    "-f", "--force", is_flag=True, help="Remove keys even under a read lease (OBJECT_HAS_LEASE)."
)
@click.option(
    "--missing-ok/--strict",
    default=True,
    show_default=True,
    help="Whether a key that is not there is fine, or exits with status 3.",
)
@pass_settings
def rm(
    settings: Settings,
    keys: tuple[str, ...],
    keys_from: str | None,
    force: bool,
    missing_ok: bool,
) -> None:
    """Remove keys.

    Mooncake refuses to remove a key read in the last ~10 s (its read lease,
    OBJECT_HAS_LEASE); --force removes it anyway. A missing key is reported as
    absent and is not an error unless --strict.
    """
    all_keys = gather_keys(keys, keys_from)
    report = KeyReport(settings)
    usable = report.usable(all_keys)
    client = settings.client() if usable else None
    removed = absent = leased = 0
    signals = held_signals()
    try:
        with Progress(
            wants_progress(len(all_keys)) and not settings.quiet and not settings.json,
            len(all_keys),
            "rm",
        ) as progress:
            for batch in chunks(usable, 4 * CHUNK_KEYS):
                assert client is not None
                with signals:
                    results = client.batch_remove(wire_keys(batch), force=force)
                for key, status in zip(batch, results, strict=True):
                    if status >= 0:
                        removed += 1
                        report.add(key, "removed")
                    elif status == OBJECT_NOT_FOUND:
                        absent += 1
                        report.add(key, "absent")
                    elif status == OBJECT_HAS_LEASE:
                        leased += 1
                        report.failed += 1
                        report.add(key, "leased", error="OBJECT_HAS_LEASE", code=status)
                        report.problem(f"{key}: {LEASE_MESSAGE}")
                    else:
                        report.error(key, status, "remove")
                progress.advance(len(batch))
                signals.check()
    except KeyboardInterrupt as exc:
        report.flush_problems()
        if settings.json:
            settings.emit_json(report.records)
        rest = len(all_keys) - len(report.records)
        raise Interrupted(
            f"{describe(exc)}: removed {removed} of {plural(len(all_keys), 'key')}"
            + (f", {absent} absent" if absent else "")
            + (f"; {rest} not sent" if rest else ""),
            exit_status(exc),
        ) from None
    if not missing_ok:
        report.missing = absent
    if len(all_keys) == 1 and not settings.json and not settings.quiet:
        key = all_keys[0]
        status = report.records[key]["status"]
        if status == "removed":
            click.echo(f"{key}: removed", err=True)
        elif status == "absent":
            click.echo(f"{key}: absent (not in the store)", err=True)
    elif not settings.quiet and not settings.json:
        if absent and len(all_keys) > 1:
            for key, record in report.records.items():
                if record["status"] == "absent":
                    report.problem(f"{key}: absent (not in the store)")
        report.flush_problems()
        summary = f"removed {removed} of {plural(len(all_keys), 'key')}"
        if absent:
            summary += f", {absent} absent"
        if leased:
            summary += f", {leased} under a read lease (retry later or use --force)"
        other = report.failed - leased
        if other:
            summary += f", {other} failed"
        settings.info(summary)
    report.finish()
