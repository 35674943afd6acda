"""``mcl2 bench``: redis-benchmark for Mooncake.

It puts ``--keys N`` fresh keys of ``--size`` bytes under its own prefix, then gets and checks
them (``--ops`` chooses and orders the operations), in batches of ``--batch`` keys with
``--concurrency`` threads each keeping one batch in flight, and reports per operation ops/s,
MiB/s and the p50 / p99 / max latency of one batch call.  It refuses to start when keys exist
under its prefix, and removes every key it wrote on the way out: after success, failure,
Ctrl-C or SIGTERM.  This module holds the command and its report; the timing threads, the
warm-up and the cleanup are in :mod:`.bench_run`.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any

import click

from mooncake_cffi.sizes import human_bytes

from .app import admin_command
from .bench_run import CLEANUP_BATCH, OpResult, Runner, cleanup, warm_up
from .errors import CliError, Interrupted
from .interrupts import describe, exit_status, held_signals
from .options import SIZE
from .output import Progress, stderr_is_terminal
from .settings import Settings, pass_settings

OPS = ("put", "get", "exists")
#: The warm-up's values are at least this big, WARMUP_BATCH per call.
WARMUP_VALUE_BYTES = 1 << 20
WARMUP_BATCH = 16
#: The warm-up writes (and removes) at most this much.
WARMUP_MAX_BYTES = 256 << 20
#: Untimed calls each worker makes before a timed get / exists pass.
WARMUP_CALLS = 2


def _parse_ops(value: str) -> list[str]:
    ops = [op.strip().lower() for op in value.split(",") if op.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise click.BadParameter(
            f"unknown operation {unknown[0]!r}" if unknown else "no operation given",
            param_hint="'--ops'",
        )
    if len(set(ops)) != len(ops):
        raise click.BadParameter("an operation is named twice", param_hint="'--ops'")
    return ops


@admin_command(json_help="Print the parameters and per-operation figures as one JSON object.")
@click.option(
    "--ops",
    default="put,get,exists",
    show_default=True,
    metavar="OPS",
    help="Operations to time, comma-separated: put, get, exists (the keys are put first).",
)
@click.option(
    "-n",
    "--keys",
    "n_keys",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    metavar="N",
    help="Keys to write (and read).",
)
@click.option(
    "--size",
    type=SIZE,
    default="4KB",
    show_default=True,
    metavar="SIZE",
    help="Bytes per value: 4096, 4KB, 64KiB, 1MB.",
)
@click.option(
    "-b",
    "--batch",
    type=click.IntRange(min=1, max=65536),
    default=1,
    show_default=True,
    metavar="B",
    help="Keys per call.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1, max=256),
    default=1,
    show_default=True,
    metavar="C",
    help="Calls in flight at once (one thread each).",
)
@click.option(
    "--prefix",
    metavar="TEXT",
    help="Key prefix (default mcl2-bench/HOST-PID-RANDOM/); must hold no keys.",
)
@click.option(
    "-r",
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="R",
    help="Read every key R times in each get / exists pass (puts write each key once).",
)
@click.option(
    "--warmup/--no-warmup",
    default=True,
    show_default=True,
    help="Before timing, put and remove throw-away values as large as the run's puts "
    "(at most 256 MiB, in values of 1 MiB or more) and make two untimed calls per thread "
    "before each read pass.",
)
@pass_settings
def bench(
    settings: Settings,
    ops: str,
    n_keys: int,
    size: int,
    batch: int,
    concurrency: int,
    prefix: str | None,
    repeat: int,
    warmup: bool,
) -> None:
    """Measure put / get / exists against the cluster, like redis-benchmark.

    \b
    mcl2 bench                                   1000 x 4 KiB, batch 1
    mcl2 bench --keys 10000 --batch 16 -c 4      16 keys per call, 4 in flight
    mcl2 bench --ops put,get --size 64KiB -n 64 --batch 64
    mcl2 bench --ops exists -n 256 -b 256 -r 100 the same 256 keys, 100 calls

    Per operation it prints ops/s (keys per second over the pass), MiB/s and
    the p50 / p99 / max latency of one call of B keys. Keys are always put
    first (timed only when --ops names put); `get` reads every key back and
    counts a value of the wrong size as failed; --repeat reads them R times.
    First, unless --no-warmup, it puts and removes throw-away values as large
    in all as the run's puts (at most 256 MiB, in values of 1 MiB or more),
    so the storage nodes' memory pages are touched before the timed puts, and
    each thread makes two untimed calls before a read pass. Every key written
    is removed at the end, also after Ctrl-C; it refuses to run if keys
    already exist under the prefix. The timed calls run without --timeout's
    deadline, which would add a thread hand-off to every call measured
    (Ctrl-C still stops the run).
    """
    op_list = _parse_ops(ops)
    if prefix is None:
        prefix = f"mcl2-bench/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}/"
    if not prefix:
        raise click.BadParameter("the prefix must not be empty", param_hint="'--prefix'")
    client = settings.client()
    if client.l1_registered:
        raise CliError(
            "mcl2 bench does not stage through registered L1 memory yet: run it over tcp, "
            "without --l1-size"
        )
    keys = [f"{prefix}{i:08d}".encode() for i in range(n_keys)]
    # The warm-up writes the run's volume (at most WARMUP_MAX_BYTES) in values of at least
    # WARMUP_VALUE_BYTES, a few calls however small the run's values.
    warm_size = max(size, WARMUP_VALUE_BYTES)
    warm_bytes = min(n_keys * size, WARMUP_MAX_BYTES)
    n_warm = max(1, -(-warm_bytes // warm_size)) if warmup else 0
    warm_keys = [f"{prefix}warmup-{i:08d}".encode() for i in range(n_warm)]
    _refuse_existing(settings, client, prefix, keys + warm_keys)
    runner = Runner(client, keys, size, batch, concurrency)
    warm_runner = Runner(client, warm_keys, warm_size, WARMUP_BATCH, 1)
    plan = ["put", *(op for op in op_list if op != "put")]  # keys are written first
    results: list[OpResult] = []
    show = not settings.quiet and not settings.json and stderr_is_terminal()
    interrupted: BaseException | None = None
    warm_report: dict[str, Any] | None = None
    try:
        if warm_keys:
            warm_report = warm_up(client, warm_runner, show)
        for op in plan:
            passes = 1 if op == "put" else repeat
            with Progress(show, n_keys * passes, f"{op:<6}") as progress:
                result = runner.run(op, progress, WARMUP_CALLS if warmup else 0, passes)
            if op in op_list:
                results.append(result)
    except KeyboardInterrupt as exc:
        interrupted = exc
    finally:
        with held_signals():
            timed_left, cleanup_error = cleanup(client, sorted(runner.written))
            # Empty unless the warm-up was cut short or could not remove everything.
            warm_left, warm_error = cleanup(client, sorted(warm_runner.written))
    left, cleanup_error = timed_left + warm_left, cleanup_error or warm_error
    report = {
        "prefix": prefix,
        "keys": n_keys,
        "size": size,
        "batch": batch,
        "concurrency": concurrency,
        "repeat": repeat,
        "warmup": warm_report,
        "results": [r.as_dict() for r in results],
        "removed": len(runner.written) - timed_left,
        "left_behind": left,
    }
    if left:
        report["cleanup_error"] = cleanup_error
    if interrupted is not None:
        report["interrupted"] = describe(interrupted)
    if settings.json:
        settings.emit_json(report)
    elif not settings.quiet:
        _print_report(report)
    if interrupted is not None:
        raise Interrupted(
            f"{describe(interrupted)}: removed the {report['removed']} keys written"
            + (f"; {left} could not be removed ({cleanup_error})" if left else ""),
            exit_status(interrupted),
        )
    if left:
        raise CliError(
            f"{left} of the keys written under {prefix} could not be removed ({cleanup_error})"
        )
    failed = sum(r.failed for r in results)
    if failed:
        first = next((r.first_error for r in results if r.first_error), None)
        raise CliError(
            f"{failed} key operations failed" + (f" (first error: {first})" if first else "")
        )


def _refuse_existing(settings: Settings, client: Any, prefix: str, keys: list[bytes]) -> None:
    """Stop before writing if anything lives under the prefix (or, without the admin API,
    if any of the keys to write exists)."""
    try:
        admin = settings.admin_client()
        for found in admin.iter_keys(prefix.encode("utf-8", "surrogateescape")):
            raise CliError(
                f"keys already exist under the prefix {prefix!r} (e.g. "
                f"{found.decode(errors='replace')!r}); give another --prefix or remove them "
                f"(mcl2 ls {prefix} | mcl2 rm --force --keys-from -)"
            )
        return
    except CliError:
        raise
    except Exception as exc:
        settings.debug(f"cannot list keys through the admin API ({exc}); checking each key")
    for i in range(0, len(keys), CLEANUP_BATCH):
        chunk = keys[i : i + CLEANUP_BATCH]
        present = client.batch_exists(chunk)
        if any(present):
            key = chunk[present.index(True)]
            raise CliError(
                f"key {key.decode(errors='replace')!r} already exists under the prefix "
                f"{prefix!r}; give another --prefix"
            )


def _print_report(report: dict[str, Any]) -> None:
    click.echo(
        f"{report['keys']} keys of {human_bytes(report['size'])}, batch {report['batch']}, "
        f"concurrency {report['concurrency']}, prefix {report['prefix']}"
    )
    warm = report.get("warmup")
    if warm:
        click.echo(
            f"warm-up: put and removed {warm['keys']} x {human_bytes(warm['value_size'])} "
            f"in {warm['seconds']:.2f} s" + (f", {warm['failed']} failed" if warm["failed"] else "")
        )
    rows = [("op", "ops/s", "MiB/s", "p50 ms", "p99 ms", "max ms", "failed")]
    for r in report["results"]:
        lat = r["latency_us"]
        rows.append(
            (
                r["op"],
                f"{r['ops_per_s']:,.0f}",
                f"{r['mib_per_s']:,.1f}" if r["op"] != "exists" else "-",
                _ms(lat["p50"]),
                _ms(lat["p99"]),
                _ms(lat["max"]),
                str(r["failed"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    click.echo(f"removed {report['removed']} keys" + _left(report["left_behind"]))


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f}"


def _left(n: int) -> str:
    return f", {n} left behind" if n else ""
