"""``mcl2 bench``: redis-benchmark for Mooncake.

It puts ``--keys N`` fresh keys of ``--size`` bytes under its own prefix, then gets and checks
them (``--ops`` chooses and orders the operations), in batches of ``--batch`` keys with
``--concurrency`` threads each keeping one batch in flight, and reports per operation ops/s,
MiB/s and the p50 / p99 / max latency of one batch call.  It refuses to start when keys exist
under its prefix, and removes every key it wrote on the way out: after success, failure,
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from mooncake_cffi.status import OBJECT_NOT_FOUND

from .app import admin_command
from .context import Settings, pass_settings
from .errors import CliError, Interrupted
from .interrupts import describe, exit_status, held_signals
from .keys import Progress, human_bytes, stderr_is_terminal
from .options import SIZE

OPS = ("put", "get", "exists")
#: Keys per remove batch during cleanup.
CLEANUP_BATCH = 1024
#: How long cleanup retries keys Mooncake refuses to remove.
CLEANUP_RETRY_SECONDS = 5.0
#: The warm-up writes (and removes) at most this much.
WARMUP_MAX_BYTES = 256 << 20
#: Untimed calls each worker makes before a timed get / exists pass.
WARMUP_CALLS = 2
_POLL = 0.1


class BenchSize(click.ParamType):
    """A value size: ``4096``, ``4KB``, ``64KiB``, ``1 MB`` (K/M/G = powers of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.lower().endswith("ib"):
            text = text[:-2] + "B"
        return SIZE.convert(text, param, ctx)


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


@dataclass
class OpResult:
    """Figures of one operation over all keys."""

    op: str
    keys: int = 0
    bytes: int = 0
    failed: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        rate = self.keys / self.seconds if self.seconds > 0 else 0.0
        mib = self.bytes / self.seconds / (1 << 20) if self.seconds > 0 else 0.0
        return {
            "op": self.op,
            "keys": self.keys,
            "failed": self.failed,
            "seconds": round(self.seconds, 6),
            "ops_per_s": round(rate, 1),
            "mib_per_s": round(mib, 2),
            "latency_us": {
                "p50": _us(_percentile(lat, 0.50)),
                "p99": _us(_percentile(lat, 0.99)),
                "max": _us(lat[-1] if lat else None),
            },
            "first_error": self.first_error,
        }


def _percentile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e6, 1)


class Runner:
    """Runs one operation over every key with ``concurrency`` threads."""

    def __init__(self, client: Any, keys: list[bytes], size: int, batch: int, conc: int) -> None:
        self.client = client
        self.keys = keys
        self.size = size
        self.batch = batch
        self.concurrency = conc
        self.value = secrets.token_bytes(size)
        self.stop = threading.Event()
        #: Every key a put was sent for (stored or not: an interrupted call may store it).
        self.written: set[bytes] = set()
        self._lock = threading.Lock()
        self._next = 0
        self._total = len(keys)
        self.done = 0

    def _take(self) -> list[bytes] | None:
        """The next batch: up to ``batch`` keys, never across the end of one pass."""
        with self._lock:
            if self.stop.is_set() or self._next >= self._total:
                return None
            start = self._next % len(self.keys)
            end = min(start + self.batch, len(self.keys))
            self._next += end - start
        return self.keys[start:end]

    def _call(self, op: str, scratch: list[memoryview]) -> Callable[[list[bytes]], list[bool]]:
        client, value, size = self.client, self.value, self.size

        def put(keys: list[bytes]) -> list[bool]:
            statuses = client.put_from(keys, [value] * len(keys), timeout=None)
            return [s == 0 for s in statuses]

        def get(keys: list[bytes]) -> list[bool]:
            got = client.get_into(keys, scratch[: len(keys)], timeout=None)
            return [n == size for n in got]

        def exists(keys: list[bytes]) -> list[bool]:
            if len(keys) == 1:
                return [client.exists(keys[0], timeout=None)]
            return client.batch_exists(keys, timeout=None)

        return {"put": put, "get": get, "exists": exists}[op]

    def run(self, op: str, progress: Progress, warm_calls: int = 0, passes: int = 1) -> OpResult:
        """Time ``op`` over every key, ``passes`` times (reads only: a put stores each key
        once).  Before the clock starts each worker makes ``warm_calls`` untimed calls on
        the first batch (reads only too)."""
        result = OpResult(op)
        if op == "put":
            warm_calls, passes = 0, 1
        self._next = 0
        self._total = len(self.keys) * passes
        self.done = 0
        errors: list[BaseException] = []
        # The clock starts once every worker has its buffers ready, and stops when the last
        # one is done.
        ready = threading.Barrier(self.concurrency + 1)
        ends: list[float] = []

        def worker() -> None:
            # Signals go to the main thread; a worker's call is never cut short by one.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            scratch_buf = bytearray(self.size * self.batch) if op == "get" else bytearray()
            view = memoryview(scratch_buf)
            scratch = [view[i * self.size : (i + 1) * self.size] for i in range(self.batch)]
            call = self._call(op, scratch)
            lat: list[float] = []
            ok_keys = failed = 0
            try:
                for _ in range(warm_calls):
                    try:
                        call(self.keys[: self.batch])
                    except Exception:  # noqa: S110 - the timed calls report failures
                        pass
                ready.wait()
                while (keys := self._take()) is not None:
                    if op == "put":
                        with self._lock:
                            self.written.update(keys)
                    t0 = time.perf_counter()
                    try:
                        oks = call(keys)
                    except Exception as exc:  # a whole batch failed: count it, keep going
                        oks = [False] * len(keys)
                        if result.first_error is None:
                            result.first_error = f"{getattr(exc, 'name', type(exc).__name__)}"
                    lat.append(time.perf_counter() - t0)
                    good = sum(oks)
                    ok_keys += good
                    failed += len(keys) - good
                    with self._lock:
                        self.done += len(keys)
            except BaseException as exc:  # pragma: no cover - reported by the main thread
                errors.append(exc)
            finally:
                end = time.perf_counter()
                with self._lock:
                    ends.append(end)
                    result.latencies.extend(lat)
                    result.keys += ok_keys
                    result.failed += failed

        threads = [
            threading.Thread(target=worker, name=f"mcl2-bench-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        try:
            ready.wait()
            start = time.perf_counter()
            shown = 0
            for t in threads:
                while t.is_alive():
                    t.join(_POLL)
                    done = self.done
                    progress.advance(done - shown)
                    shown = done
        except KeyboardInterrupt:
            self.stop.set()  # the threads finish the batch they hold, then stop
            ready.abort()  # (in case the signal came before the start)
            with held_signals():
                for t in threads:
                    t.join()
            raise
        result.seconds = (max(ends) if ends else time.perf_counter()) - start
        result.bytes = result.keys * self.size if op != "exists" else 0
        if errors:
            raise errors[0]
        return result


def _warm_up(client: Any, runner: Runner, show: bool) -> dict[str, Any]:
    """Put the throw-away keys and remove them again, untimed.

    A storage node maps its segment lazily, so the first put to each page pays a page fault
    (measured on a fresh local cluster: 16 x 4 KiB puts at 0.74x the throughput of a warm
    one); Mooncake's allocator then reuses the freed space for the timed keys.
    """
    start = time.perf_counter()
    with Progress(show, len(runner.keys), "warm-up") as progress:
        result = runner.run("put", progress)
    left, _error = _cleanup(client, sorted(runner.written))
    return {
        "keys": len(runner.keys),
        "bytes": len(runner.keys) * runner.size,
        "failed": result.failed,
        "seconds": round(time.perf_counter() - start, 3),
        "left_behind": left,
    }


def _cleanup(client: Any, keys: Sequence[bytes]) -> tuple[int, str | None]:
    """Force-remove the keys the bench wrote (absent ones count as removed).

    Keys Mooncake refuses to remove yet (a put that was cut short may still be finishing) are
    retried for up to :data:`CLEANUP_RETRY_SECONDS`.  Returns how many are left behind and the
    error name of the last refusal.
    """
    from mooncake_cffi import error_name

    pending = list(keys)
    last_error: str | None = None
    deadline = time.monotonic() + CLEANUP_RETRY_SECONDS
    while True:
        failed: list[bytes] = []
        for i in range(0, len(pending), CLEANUP_BATCH):
            chunk = pending[i : i + CLEANUP_BATCH]
            try:
                statuses = client.batch_remove(chunk, force=True)
            except Exception as exc:
                failed.extend(chunk)
                last_error = getattr(exc, "name", type(exc).__name__)
                continue
            for key, status in zip(chunk, statuses, strict=True):
                if status < 0 and status != OBJECT_NOT_FOUND:
                    failed.append(key)
                    last_error = error_name(status)
        if not failed or time.monotonic() >= deadline:
            return len(failed), last_error
        pending = failed
        time.sleep(0.2)


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
    type=BenchSize(),
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
    help="Before timing, put and remove as many throw-away keys as the run writes "
    "(at most 256 MiB) and make two untimed calls per thread before each read pass.",
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
    First, unless --no-warmup, it puts and removes as many throw-away keys
    (at most 256 MiB), so the storage nodes' memory pages are touched before
    the timed puts, and each thread makes two untimed calls before a read
    pass. Every key written is removed at the end, also after Ctrl-C; it
    refuses to run if keys already exist under the prefix. The timed calls
    run without --timeout's deadline, which would add a thread hand-off to
    every call measured (Ctrl-C still stops the run).
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
    n_warm = min(n_keys, max(1, WARMUP_MAX_BYTES // size)) if warmup else 0
    warm_keys = [f"{prefix}warmup-{i:08d}".encode() for i in range(n_warm)]
    _refuse_existing(settings, client, prefix, keys + warm_keys)
    runner = Runner(client, keys, size, batch, concurrency)
    warm_runner = Runner(client, warm_keys, size, batch, concurrency)
    plan = ["put", *(op for op in op_list if op != "put")]  # keys are written first
    results: list[OpResult] = []
    show = not settings.quiet and not settings.json and stderr_is_terminal()
    interrupted: BaseException | None = None
    warm_report: dict[str, Any] | None = None
    try:
        if warm_keys:
            warm_report = _warm_up(client, warm_runner, show)
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
            left, cleanup_error = _cleanup(client, sorted(runner.written))
            # Normally gone already; an interrupted warm-up may have left some.
            warm_left, warm_error = _cleanup(client, sorted(warm_runner.written))
            left, cleanup_error = left + warm_left, cleanup_error or warm_error
    report = {
        "prefix": prefix,
        "keys": n_keys,
        "size": size,
        "batch": batch,
        "concurrency": concurrency,
        "repeat": repeat,
        "warmup": warm_report,
        "results": [r.as_dict() for r in results],
        "removed": len(runner.written) - (left - warm_left),
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
            f"warm-up: put and removed {warm['keys']} keys ({human_bytes(warm['bytes'])}) "
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
