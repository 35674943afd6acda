"""``mcl2 put``: store files or stdin under keys, in batches through one client.

The (key, source) pairs come from arguments, ``--dir`` or ``--keys-from``, and are checked
(duplicate keys, empty files, stdin read once) before connecting; values are read and sent
in batches of at most :data:`~.keys.CHUNK_KEYS` keys and about :data:`~.keys.CHUNK_BYTES`
bytes.  ``--replicas N`` writes N copies and checks through the admin API how many were
made.  SIGINT / SIGTERM are held while a batch is in flight, then the command stops and says
what was stored (exit 130 / 143).
"""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mooncake_cffi.sizes import human_bytes
from mooncake_cffi.status import NO_AVAILABLE_HANDLE

from .app import key_command, load_local
from .batches import byte_chunks
from .errors import CliError, Interrupted
from .files import iter_regular_files
from .interrupts import describe, exit_status, held_signals
from .keys import STDIN, read_lines, split_pair, wire_key, wire_keys
from .output import Progress, binary_stdin, plural, require_stdin, stdin_is_terminal, wants_progress
from .report import KeyReport
from .settings import Settings, pass_settings

if TYPE_CHECKING:
    from mooncake_cffi import Client


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
            if stdin_is_terminal():
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
    stdin_users = [k for k, s in items if s == STDIN]
    if len(stdin_users) + (1 if keys_from == STDIN else 0) > 1:
        raise click.UsageError("stdin (-) can be read only once")
    if stdin_users:
        require_stdin(f"the value of {stdin_users[0]!r}")
    return items


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
        return binary_stdin("the value").read()
    with open(source, "rb") as fh:
        return fh.read()


@key_command(
    json_help="Print {KEY: {status: stored|exists|error, bytes}} as JSON (with --replicas, "
    "stored keys also get replicas: the memory copies the master lists)."
)
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
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    metavar="N",
    help="Write N copies of each value, on distinct storage nodes (Mooncake's replica_num; "
    "default: the config's replica_num, else 1).",
)
@pass_settings
def put(
    settings: Settings,
    args: tuple[str, ...],
    directory: Path | None,
    prefix: str,
    keys_from: str | None,
    overwrite: bool,
    replicas: int | None,
) -> None:
    """Store a file or stdin under KEY; several keys go as one batch.

    \b
    mcl2 put KEY FILE          store FILE
    mcl2 put KEY [-]           store stdin
    mcl2 put K1=F1 K2=F2 ...   several files (split at the first '=')
    mcl2 put --dir DIR         every regular file in DIR, key = file name
    mcl2 put --keys-from -     'KEY<TAB>FILE' lines from stdin
    mcl2 put --replicas 2 ...  two copies of each value, on distinct nodes

    Mooncake keeps the first value written: a key that exists is reported
    and kept, unless --overwrite replaces it.
    """
    items = _put_items(args, directory, prefix, keys_from)
    report = KeyReport(settings)
    usable = set(report.usable([key for key, _ in items]))
    items = [item for item in items if item[0] in usable]
    if not items:  # every key was refused: nothing to send
        report.finish()
        return
    total = len(items) + len(report.records)
    sizes = _source_sizes(items)
    single = total == 1
    stored_keys = stored_bytes = kept = 0
    known_bytes = sum(s for s in sizes if s > 0)
    signals = held_signals()
    try:
        transfer = settings.transfer(l1_min=max(sizes))
        checker = None
        if replicas is not None:
            transfer.client = _Replicated(transfer.client, replicas)
            checker = _ReplicaCheck(settings, replicas, overwrite)
        with Progress(
            wants_progress(len(items), known_bytes) and not settings.quiet and not settings.json,
            len(items),
            "put",
        ) as progress:
            for span in byte_chunks(sizes):
                keys = [items[i][0] for i in span]
                values = [_read_source(items[i][1]) for i in span]
                for key, value in zip(keys, values, strict=True):
                    if not value:
                        raise CliError(f"{key}: the value is empty: Mooncake cannot store 0 bytes")
                with signals:
                    results = transfer.put(wire_keys(keys), values, overwrite)
                stored_keys, stored_bytes, kept = _record_puts(
                    settings, report, keys, values, results, (stored_keys, stored_bytes, kept)
                )
                if checker is not None:
                    checker.check(report, [k for k, r in zip(keys, results, strict=True) if r == 0])
                progress.advance(len(keys))
                signals.check()
    except KeyboardInterrupt as exc:
        report.flush_problems()
        if settings.json:
            settings.emit_json(report.records)
        done = f"stored {stored_keys} of {plural(total, 'key')} ({human_bytes(stored_bytes)})"
        if kept:
            done += f", {kept} existing kept"
        rest = total - len(report.records)
        raise Interrupted(
            f"{describe(exc)}: {done}; {rest} not sent" if rest else f"{describe(exc)}: {done}",
            exit_status(exc),
        ) from None
    if single and not report.failed and stored_keys:
        settings.info(f"{items[0][0]}: stored ({human_bytes(stored_bytes)})")
        report.flush_problems()
    else:
        report.flush_problems()
        if not single:
            summary = (
                f"stored {stored_keys} of {plural(total, 'key')} ({human_bytes(stored_bytes)})"
            )
            if kept:
                summary += f", {kept} existing kept"
            if report.failed:
                summary += f", {report.failed} failed"
            settings.info(summary)
    report.finish()


class _Replicated:
    """A client whose writes (the ``batch_put`` / ``batch_upsert`` / ``put_from`` calls of
    :class:`~.transfer.Transfer`) make ``replicas`` copies; every other call is the client's.

    The ReplicateConfig keeps the client's other defaults (soft pin, preferred segment) and
    goes with each call, so ``mcl2 shell`` can mix ``put --replicas`` with plain puts over
    one client.
    """

    def __init__(self, client: Client, replicas: int) -> None:
        self.client = client
        self.replicas = replicas
        self.replicate_config = client.config.replicate_config()
        self.replicate_config.replica_num = replicas

    def batch_put(self, keys: Any, values: Any, **options: Any) -> list[int]:
        return self.client.batch_put(
            keys, values, replicate_config=self.replicate_config, **options
        )

    def batch_upsert(self, keys: Any, values: Any, **options: Any) -> list[int]:
        return self.client.batch_upsert(
            keys, values, replicate_config=self.replicate_config, **options
        )

    def put_from(self, keys: Any, buffers: Any, **options: Any) -> list[int]:
        return self.client.put_from(
            keys, buffers, replicate_config=self.replicate_config, **options
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class _ReplicaCheck:
    """After each batch of ``put --replicas N``, ask the master's admin API how many memory
    copies each stored key got, record it (``replicas`` in --json) and name keys with fewer.

    Mooncake stores fewer copies without an error when there are fewer storage nodes than
    N, and an --overwrite with a value of the same size rewrites the existing copies in
    place.  When the admin API cannot be read, the check is skipped (said with -v).
    """

    def __init__(self, settings: Settings, wanted: int, overwrite: bool) -> None:
        self.settings = settings
        self.wanted = wanted
        self.why = "fewer storage nodes than that"
        if overwrite:
            self.why += ", or it replaced a value of the same size, whose copies are rewritten"
        self.admin: Any = None
        self.skipped = False

    def check(self, report: KeyReport, stored: Sequence[str]) -> None:
        from mooncake_cffi.admin import AdminClient, AdminError

        keys = [k for k in stored if AdminClient.can_query(wire_key(k))]
        if not keys or self.skipped:
            return
        try:
            if self.admin is None:
                self.admin = self.settings.admin_client()
            found = self.admin.query(wire_keys(keys))
        except (AdminError, ValueError, click.ClickException) as exc:
            self.skipped = True
            message = exc.format_message() if isinstance(exc, click.ClickException) else exc
            self.settings.debug(f"replica counts not checked: {message}")
            return
        for key in keys:
            info = found.get(wire_key(key))
            count = 0 if info is None else sum(r.kind == "memory" for r in info.replicas)
            report.records[key]["replicas"] = count
            if count < self.wanted:
                report.problem(f"{key}: stored with {count} of {self.wanted} replicas ({self.why})")


def _record_puts(
    settings: Settings,
    report: KeyReport,
    keys: Sequence[str],
    values: Sequence[bytes],
    results: Sequence[int],
    counts: tuple[int, int, int],
) -> tuple[int, int, int]:
    """Add one put batch's per-key outcomes to ``report``; (stored keys, bytes, kept)."""
    stored_keys, stored_bytes, kept = counts
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
    return stored_keys, stored_bytes, kept


def no_space_hint(settings: Settings, size: int) -> str:
    """Why NO_AVAILABLE_HANDLE, with the segment sizes of the local cluster when it is used."""
    hint = f": the cluster's memory segments have no room for this {human_bytes(size)} value"
    memory = None
    if settings.uses_local_cluster:
        try:
            local = load_local(settings)
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
