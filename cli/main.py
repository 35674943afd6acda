"""mcl2: the admin command line for Mooncake Store (``put``, ``get``, ``exists``, ``rm``,
``stat``, and ``cluster up|down|status`` for a local cluster on 127.0.0.1).

Exit statuses: 0 success, 1 error, 2 usage, 3 a key not found (see :mod:`.errors`).

:func:`main` is the console script.  It runs the click group, then closes the Mooncake
client the fast way (``close_for_exit``) and leaves with ``os._exit``, which skips Mooncake's
0.3-1 s teardown; the master forgets the client when its TTL passes.  Calling the group
itself (as click's ``CliRunner`` does) closes the client normally instead.
"""

from __future__ import annotations

import errno
import os
import stat as stat_module
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from mooncake_cffi.status import NO_AVAILABLE_HANDLE, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND

from .context import Settings, connection_options, output_options, pass_settings
from .context import state_dir_option as _state_dir_option
from .errors import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CliError,
    KeyNotFound,
    StoreError,
)
from .keys import (
    CHUNK_BYTES,
    CHUNK_KEYS,
    STDIN,
    Progress,
    chunks,
    file_name_for,
    gather_keys,
    human_bytes,
    iter_regular_files,
    plural,
    read_lines,
    split_pair,
    wants_progress,
    write_file,
)

__all__ = ["cli", "main"]

#: Per-key problem lines printed before "... and N more" (--json lists them all).
MAX_KEY_LINES = 50

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

LEASE_MESSAGE = (
    "has a read lease (OBJECT_HAS_LEASE): it was read in the last ~10 s; retry later or use --force"
)


class Mcl2Group(click.Group):
    """A click group that turns library exceptions into ClickExceptions (no tracebacks)."""

    def invoke(self, ctx: click.Context) -> Any:
        from mooncake_cffi.cluster import ClusterError
        from mooncake_cffi.errors import MooncakeError

        try:
            return super().invoke(ctx)
        except MooncakeError as exc:
            raise StoreError.wrap(exc) from None
        except ClusterError as exc:
            raise CliError(str(exc)) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # click turns a closed pipe into a quiet exit 1
            where = f"{exc.filename}: " if exc.filename else ""
            raise CliError(f"{where}{exc.strerror or exc}") from None


def _version() -> str:
    try:
        from mooncake_cffi import __version__

        return __version__
    except Exception:  # pragma: no cover - broken installation
        return "unknown"


@click.group(cls=Mcl2Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(_version(), "-V", "--version", prog_name="mcl2")
@connection_options(top_level=True)
@output_options(
    json_help="Print results as JSON on stdout (put, get -o/-d, exists, rm, stat, cluster status)."
)
def cli() -> None:
    """Put, get, check and remove keys in a Mooncake Store, and run a local cluster.

    \b
    With no --master/--metadata-server/--config (or MCL2_* variables),
    mcl2 talks to the local cluster that `mcl2 cluster up` started.

    \b
    Exit status: 0 success, 1 error, 2 usage error, 3 a key was not found.
    See `man mcl2` for details and examples.
    """


keys_from_option = click.option(
    "--keys-from", metavar="FILE|-", help="Read keys, one per line, from FILE (- for stdin)."
)


def key_command(json_help: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A data command: registered on ``cli`` with the connection and output options."""

    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = connection_options(top_level=False)(f)
        return _own_options_first(cli.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


def _own_options_first(command: click.Command, own: int) -> click.Command:
    """List a command's own parameters before the shared ones in its --help."""
    shared = command.params[: len(command.params) - own]
    command.params = command.params[len(shared) :] + shared
    return command


class KeyReport:
    """Per-key outcomes of a command: the JSON record of each key, and capped problem lines."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.records: dict[str, dict[str, Any]] = {}
        self.lines: list[str] = []
        self.extra_lines = 0
        self.failed = 0
        self.missing = 0

    def add(self, key: str, status: str, **fields: Any) -> None:
        self.records[key] = {"status": status, **fields}

    def problem(self, line: str) -> None:
        if len(self.lines) < MAX_KEY_LINES:
            self.lines.append(line)
        else:
            self.extra_lines += 1

    def error(self, key: str, code: int, doing: str, detail: str = "") -> None:
        from mooncake_cffi import error_name

        name = error_name(code)
        self.failed += 1
        self.add(key, "error", error=name, code=code)
        self.problem(f"{key}: {doing} failed: {name} ({code}){detail}")

    def flush_problems(self) -> None:
        for line in self.lines:
            click.echo(line, err=True)
        if self.extra_lines:
            click.echo(f"... and {self.extra_lines} more (--json lists every key)", err=True)
        self.lines.clear()
        self.extra_lines = 0

    def finish(self) -> None:
        """Print the JSON (if asked for) and the problem lines; leave with the right status."""
        self.flush_problems()
        if self.settings.json:
            self.settings.emit_json(self.records)
        if self.failed:
            click.get_current_context().exit(EXIT_ERROR)
        if self.missing:
            click.get_current_context().exit(EXIT_NOT_FOUND)


# -- put ---------------------------------------------------------------------------------


def _put_items(
    args: Sequence[str], directory: Path | None, prefix: str, keys_from: str | None
) -> list[tuple[str, str]]:
    """(key, source) pairs; a source is a file path or ``-`` for stdin."""
    items: list[tuple[str, str]] = []
    single = (
        directory is None
        and keys_from is None
        and 1 <= len(args) <= 2
        and ("=" not in args[0] or (len(args) == 2 and "=" not in args[1]))
    )
    if single:
        key = args[0]
        if len(args) == 2:
            items.append((key, args[1]))
        else:
            if sys.stdin is None or _stdin_is_terminal():
                raise click.UsageError(
                    "no FILE given and stdin is a terminal: give FILE, or pipe the value in "
                    "(`-` reads stdin explicitly)"
                )
            items.append((key, STDIN))
    else:
        for arg in args:
            items.append(split_pair(arg, "argument"))
    if directory is not None:
        files = list(iter_regular_files(directory))
        if not files:
            raise click.BadParameter(f"{directory} has no regular files", param_hint="'--dir'")
        items.extend((prefix + path.name, str(path)) for path in files)
    if keys_from is not None:
        for n, line in enumerate(read_lines(keys_from), start=1):
            items.append(split_pair(line, f"--keys-from line {n}"))
    if not items:
        raise click.UsageError(
            "nothing to put: give KEY [FILE|-], KEY=FILE..., --dir or --keys-from"
        )
    seen: dict[str, str] = {}
    for key, source in items:
        if not key:
            raise click.UsageError("empty key: Mooncake keys need at least one character")
        if key in seen:
            raise click.UsageError(
                f"key {key!r} is given twice ({seen[key]} and {source}); one batch can hold "
                "each key once"
            )
        seen[key] = source
    stdin_users = sum(1 for _, s in items if s == STDIN) + (1 if keys_from == STDIN else 0)
    if stdin_users > 1:
        raise click.UsageError("stdin (-) can be read only once")
    return items


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _source_sizes(items: Sequence[tuple[str, str]]) -> list[int]:
    """Sizes of the files to put (checked before connecting); -1 for stdin, a pipe, a device."""
    sizes = []
    for key, source in items:
        if source == STDIN:
            sizes.append(-1)
            continue
        try:
            st = os.stat(source)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {source} (for key {key!r}): {exc.strerror}", param_hint="FILE"
            ) from None
        if stat_module.S_ISDIR(st.st_mode):
            raise click.BadParameter(
                f"{source} (for key {key!r}) is a directory (use --dir DIR)", param_hint="FILE"
            )
        if not stat_module.S_ISREG(st.st_mode):  # <(command), /dev/stdin...: size unknown
            sizes.append(-1)
            continue
        if st.st_size == 0:
            raise click.BadParameter(
                f"{source} (for key {key!r}) is empty: Mooncake cannot store 0 bytes",
                param_hint="FILE",
            )
        sizes.append(st.st_size)
    return sizes


def _read_source(source: str) -> bytes:
    if source == STDIN:
        return sys.stdin.buffer.read()
    with open(source, "rb") as fh:
        return fh.read()


def _byte_chunks(sizes: Sequence[int]) -> list[range]:
    """Index ranges of at most CHUNK_KEYS items and about CHUNK_BYTES bytes each."""
    out: list[range] = []
    start = 0
    total = 0
    for i, size in enumerate(sizes):
        size = max(size, 0)
        if i > start and (i - start >= CHUNK_KEYS or total + size > CHUNK_BYTES):
            out.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


@key_command(json_help="Print {KEY: {status: stored|exists|error, bytes}} as JSON.")
@click.argument("args", nargs=-1, metavar="KEY [FILE|-] | KEY=FILE...")
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="DIR",
    help="Put every regular file in DIR, keyed by its file name.",
)
@click.option("--prefix", default="", metavar="TEXT", help="With --dir: prepend TEXT to each key.")
@click.option(
    "--keys-from",
    metavar="FILE|-",
    help="Read 'KEY<TAB>FILE' or 'KEY=FILE' lines from FILE (- for stdin).",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace keys that exist (default: keep the stored value)."
)
@pass_settings
def put(
    settings: Settings,
    args: tuple[str, ...],
    directory: Path | None,
    prefix: str,
    keys_from: str | None,
    overwrite: bool,
) -> None:
    """Store a file or stdin under KEY; several keys go as one batch.

    \b
    mcl2 put KEY FILE          store FILE
    mcl2 put KEY [-]           store stdin
    mcl2 put K1=F1 K2=F2 ...   several files (split at the first '=')
    mcl2 put --dir DIR         every regular file in DIR, key = file name
    mcl2 put --keys-from -     'KEY<TAB>FILE' lines from stdin

    Mooncake keeps the first value written: a key that exists is reported
    and kept, unless --overwrite replaces it.
    """
    items = _put_items(args, directory, prefix, keys_from)
    sizes = _source_sizes(items)
    transfer = settings.transfer(l1_min=max(sizes))
    report = KeyReport(settings)
    single = len(items) == 1
    stored_keys = stored_bytes = kept = 0
    known_bytes = sum(s for s in sizes if s > 0)
    with Progress(
        wants_progress(len(items), known_bytes) and not settings.quiet and not settings.json,
        len(items),
        "put",
    ) as progress:
        for span in _byte_chunks(sizes):
            keys = [items[i][0] for i in span]
            values = [_read_source(items[i][1]) for i in span]
            for key, value in zip(keys, values, strict=True):
                if not value:
                    raise CliError(f"{key}: the value is empty: Mooncake cannot store 0 bytes")
            results = transfer.put(keys, values, overwrite)
            for key, value, status in zip(keys, values, results, strict=True):
                if status == 0:
                    stored_keys += 1
                    stored_bytes += len(value)
                    report.add(key, "stored", bytes=len(value))
                elif status == 1:  # mooncake_cffi.EXISTED
                    kept += 1
                    report.add(key, "exists", bytes=len(value))
                    report.problem(f"{key}: exists, kept (use --overwrite to replace)")
                elif status == NO_AVAILABLE_HANDLE:
                    report.error(key, status, "put", no_space_hint(settings, len(value)))
                else:
                    report.error(key, status, "put")
            progress.advance(len(keys))
    if single and not report.failed and stored_keys:
        settings.info(f"{items[0][0]}: stored ({human_bytes(stored_bytes)})")
        report.flush_problems()
    else:
        report.flush_problems()
        if not single:
            summary = (
                f"stored {stored_keys} of {plural(len(items), 'key')} ({human_bytes(stored_bytes)})"
            )
            if kept:
                summary += f", {kept} existing kept"
            if report.failed:
                summary += f", {report.failed} failed"
            settings.info(summary)
    report.finish()


def no_space_hint(settings: Settings, size: int) -> str:
    """Why NO_AVAILABLE_HANDLE, with the segment sizes of the local cluster when it is used."""
    hint = f": the cluster's memory segments have no room for this {human_bytes(size)} value"
    memory = None
    if settings.uses_local_cluster:
        try:
            local = _load_local(settings)
            memory = local.status().get("memory") if local is not None else None
        except Exception:
            memory = None
    if memory and memory.get("total_bytes"):
        hint += (
            f" (local cluster: {human_bytes(memory.get('used_bytes'))} used of "
            f"{human_bytes(memory['total_bytes'])}); remove keys, or restart it with a larger "
            "`mcl2 cluster up --segment-size`"
        )
    else:
        hint += "; remove keys, or give the storage nodes larger segments"
    return hint


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
        _get_one(settings, all_keys[0], output)
    else:
        _get_many(settings, all_keys, directory)


def _get_one(settings: Settings, key: str, output: str | None) -> None:
    (value,) = settings.transfer().get([key])
    if value is None:
        if settings.json:
            settings.emit_json({key: {"status": "missing"}})
        raise KeyNotFound(f"key {key!r} not found")
    if output is None or output == STDIN:
        out = sys.stdout.buffer
        out.write(value)
        out.flush()
        return
    write_file(Path(output), value)
    settings.debug(f"{key}: wrote {human_bytes(len(value))} to {output}")
    if settings.json:
        settings.emit_json({key: {"status": "written", "bytes": len(value), "path": output}})


def _get_many(settings: Settings, keys: list[str], directory: Path) -> None:
    names = [file_name_for(k) for k in keys]
    directory.mkdir(parents=True, exist_ok=True)
    transfer = settings.transfer()
    report = KeyReport(settings)
    written = written_bytes = 0
    with Progress(
        wants_progress(len(keys)) and not settings.quiet and not settings.json, len(keys), "get"
    ) as progress:
        for start in range(0, len(keys), CHUNK_KEYS):
            batch = keys[start : start + CHUNK_KEYS]
            values = transfer.get(batch)
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
        f"wrote {written} of {plural(len(keys), 'key')} to {directory} "
        f"({human_bytes(written_bytes)})"
    )
    if report.missing:
        summary += f", {report.missing} not found"
    settings.info(summary)
    report.finish()


# -- exists ------------------------------------------------------------------------------


@key_command(json_help="Print {KEY: true|false} as JSON.")
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@pass_settings
def exists(settings: Settings, keys: tuple[str, ...], keys_from: str | None) -> None:
    """Print 'KEY<TAB>true' or 'KEY<TAB>false' for each key.

    Exits with status 0 if every key exists and 3 if any is missing (with -q
    nothing is printed: test the status). Checking a key renews its read lease.
    """
    all_keys = gather_keys(keys, keys_from)
    client = settings.client()
    found: dict[str, bool] = {}
    with Progress(
        wants_progress(len(all_keys)) and not settings.quiet and not settings.json,
        len(all_keys),
        "exists",
    ) as progress:
        for batch in chunks(all_keys, 4 * CHUNK_KEYS):
            results = client.batch_exists(list(batch))
            for key, present in zip(batch, results, strict=True):
                found[key] = present
            progress.advance(len(batch))
    if settings.json:
        settings.emit_json(found)
    elif not settings.quiet:
        out = sys.stdout
        for key, present in found.items():
            out.write(f"{key}\t{'true' if present else 'false'}\n")
        out.flush()
    if not all(found.values()):
        click.get_current_context().exit(EXIT_NOT_FOUND)


# -- stat --------------------------------------------------------------------------------


@key_command(json_help="Print {KEY: SIZE|null} as JSON.")
@click.argument("keys", nargs=-1, metavar="KEY...")
@keys_from_option
@pass_settings
def stat(settings: Settings, keys: tuple[str, ...], keys_from: str | None) -> None:
    """Print 'KEY<TAB>SIZE' (bytes) for each key, '-' for a missing one.

    Exits with status 3 if any key is missing.
    """
    all_keys = gather_keys(keys, keys_from)
    client = settings.client()
    sizes = {key: client.size(key) for key in all_keys}
    if settings.json:
        settings.emit_json(sizes)
    elif not settings.quiet:
        for key, size in sizes.items():
            click.echo(f"{key}\t{'-' if size is None else size}")
    if any(size is None for size in sizes.values()):
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
    client = settings.client()
    report = KeyReport(settings)
    removed = absent = leased = 0
    with Progress(
        wants_progress(len(all_keys)) and not settings.quiet and not settings.json,
        len(all_keys),
        "rm",
    ) as progress:
        for batch in chunks(all_keys, 4 * CHUNK_KEYS):
            results = client.batch_remove(list(batch), force=force)
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


# -- cluster -----------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """Run a throw-away Mooncake cluster on 127.0.0.1.

    `up` starts mooncake_master (with its HTTP metadata server) and one
    storage node from the installed Mooncake wheel, and records their ports,
    PIDs and logs in the state directory; `status` reports health, keys and
    memory; `down` stops exactly what `up` started.
    """


def cluster_command(json_help: str | None = None) -> Callable[[Callable[..., Any]], click.Command]:
    def decorate(f: Callable[..., Any]) -> click.Command:
        own = len(getattr(f, "__click_params__", []))
        f = output_options(json_help=json_help)(f)
        f = _state_dir_option(top_level=False)(f)
        return _own_options_first(cluster.command(context_settings=CONTEXT_SETTINGS)(f), own)

    return decorate


def _load_local(settings: Settings) -> Any:
    from mooncake_cffi.cluster import LocalCluster

    return LocalCluster.load(settings.resolved_state_dir)


@cluster_command(json_help="Print the cluster's status as JSON.")
@click.option(
    "--segment-size",
    default="1 GB",
    show_default=True,
    metavar="SIZE",
    help="Memory the storage node contributes: '1 GB', '512MB', bytes (K/M/G/T = 1024^n).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Give up if the cluster does not answer within this long.",
)
@pass_settings
def up(settings: Settings, segment_size: str, timeout: float) -> None:
    """Start a local cluster (or say that one is running) and wait until it answers."""
    from mooncake_cffi.cluster import LocalCluster

    state_dir = settings.resolved_state_dir
    previous = _load_local(settings)
    if previous is not None and previous.is_running():
        if settings.json:
            settings.emit_json({"started": False, **previous.status()})
        elif not settings.quiet:
            click.echo(f"a local cluster is already running in {state_dir}")
            _print_addresses(previous)
        return
    if previous is not None and (previous._alive("master") or previous._alive("storage")):
        raise CliError(
            f"part of a local cluster is still running in {state_dir} (pids {previous.pids}); "
            "run `mcl2 cluster down` first"
        )
    try:
        local = LocalCluster(state_dir, segment_size=segment_size)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--segment-size'") from None
    settings.debug(f"starting a local cluster in {state_dir}")
    local.start(timeout=timeout)
    if settings.json:
        settings.emit_json({"started": True, **local.status()})
    elif not settings.quiet:
        click.echo(f"local cluster up in {state_dir}")
        _print_addresses(local)


def _print_addresses(local: Any) -> None:
    rows = [
        ("master", f"{local.master_addr} (pid {local.pids.get('master')})"),
        ("metadata", local.metadata_server),
        ("admin", local.metrics_url),
        ("storage", f"pid {local.pids.get('storage')}, segment {local.segment_size}"),
        ("logs", f"{local.master_log}, {local.storage_log}"),
    ]
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")


@cluster_command(json_help="Print what was stopped as JSON.")
@pass_settings
def down(settings: Settings) -> None:
    """Stop the processes `mcl2 cluster up` started (and nothing else)."""
    state_dir = settings.resolved_state_dir
    local = _load_local(settings)
    if local is None:
        if settings.json:
            settings.emit_json({"stopped": False, "state_dir": str(state_dir)})
        else:
            settings.info(f"no local cluster in {state_dir}")
        return
    pids = dict(local.pids)
    was_running = {role: local._alive(role) for role in ("master", "storage")}
    local.stop()
    if settings.json:
        settings.emit_json(
            {"stopped": any(was_running.values()), "state_dir": str(state_dir), "pids": pids}
        )
    elif not settings.quiet:
        stopped = [
            f"{role} (pid {pids[role]})" for role in ("storage", "master") if was_running[role]
        ]
        if stopped:
            click.echo(f"stopped {' and '.join(stopped)}; logs kept in {state_dir}")
        else:
            click.echo(f"the local cluster in {state_dir} was not running; state cleared")


@cluster_command(json_help="Print the status as JSON.")
@pass_settings
def status(settings: Settings) -> None:
    """Show health, key count and memory use of the local cluster.

    Exits with status 0 when it is running and healthy, 1 otherwise.
    """
    state_dir = settings.resolved_state_dir
    local = _load_local(settings)
    if local is None:
        if settings.json:
            settings.emit_json({"state_dir": str(state_dir), "running": False, "healthy": False})
            click.get_current_context().exit(EXIT_ERROR)
        raise CliError(f"no local cluster in {state_dir} (run `mcl2 cluster up`)")
    info = local.status()
    if settings.json:
        settings.emit_json(info)
    elif not settings.quiet:
        _print_status(info)
    if not info.get("healthy"):
        click.get_current_context().exit(EXIT_ERROR)


def _print_status(info: dict[str, Any]) -> None:
    state = "running" if info["running"] else "NOT running"
    health = "healthy" if info["healthy"] else "unhealthy"
    click.echo(f"local cluster in {info['state_dir']}: {state}, {health}")
    procs = info.get("processes") or {}

    def proc(role: str) -> str:
        p = procs.get(role) or {}
        alive = "up" if p.get("alive") else "DOWN"
        return f"pid {p.get('pid')} {alive}"

    memory = info.get("memory") or {}
    total, used = memory.get("total_bytes"), memory.get("used_bytes")
    mem = f"{human_bytes(used)} used of {human_bytes(total)}"
    if total:
        mem += f" ({100.0 * (used or 0) / total:.1f}%)"
    rows = [
        ("master", f"{info.get('master_addr')} ({proc('master')})"),
        ("storage", f"{proc('storage')}, segment {info.get('segment_size')}"),
        ("metadata", info.get("metadata_server")),
        ("admin", info.get("metrics_url")),
        ("keys", _or_unknown(info.get("key_count"))),
        ("memory", mem),
        ("clients", _or_unknown(info.get("active_clients"))),
        ("logs", f"{info['logs']['master']}, {info['logs']['storage']}"),
    ]
    for name, value in rows:
        click.echo(f"  {name:<9} {value}")
    for error in info.get("errors") or []:
        click.echo(f"  problem   {error}")


def _or_unknown(value: Any) -> str:
    return "?" if value is None else str(value)


# -- entry point -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """The ``mcl2`` console script: run, close Mooncake's client fast, and ``os._exit``."""
    settings = Settings(fast_exit=True)
    code: int = EXIT_OK
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="mcl2", obj=settings)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    finally:
        try:
            settings.close()  # normally closed already, with the command's context
        except Exception:
            code = code or EXIT_ERROR
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more can be said
            code = code or EXIT_ERROR
    if "mooncake.store" in sys.modules:
        # Mooncake was loaded: skip its atexit teardown (0.3-1 s), like close_for_exit did.
        os._exit(code)
    sys.exit(code)


def _exit_code(value: Any) -> int:
    if value is None:
        return EXIT_OK
    if isinstance(value, int):
        return value
    try:
        sys.stderr.write(f"{value}\n")
    except Exception:
        pass
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    main()
