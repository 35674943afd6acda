"""The soak's verified keyspace (tests/test_soak.py): owners, values and the operations they run.

Each key has one owner (a thread or an asyncio task) whose calls on it are sequential, so
the owner knows what every read must return: the value of its latest acknowledged write
(generation), or a miss after a remove.  A value is derived from its key and generation (an
8-byte digest of both, a ``<key#gen#size>`` header, bytes of a random pool at an offset of
that digest), so every read is compared byte for byte.  A write that fails retryably
(``exc.retryable``, or a retryable per-key code) is counted, and leaves its key in either
state until a read tells which; any other failure, and any wrong byte, fails the test.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from mooncake_cffi import AsyncClient, Client, MooncakeError
from mooncake_cffi import status as mcs_status

KIB, MIB = 1 << 10, 1 << 20
#: Replays each owner's choices (not how the threads interleave).
SEED = int(os.environ.get("MOONCAKE_CFFI_SOAK_SEED", "0")) or random.SystemRandom().randrange(
    1, 2**32
)
KEYS_PER_OWNER, BATCH_MAX = 12, 4
# Sizes of a value, and how often each is drawn: over and under the 256 KiB one-round-trip
# get, and values whose batch of four fills most of Mooncake's 16 MiB local buffer.  The
# mean is ~0.35 MiB: the 84 keys hold ~30 MiB, far below the test cluster's 1 GB, so
# nothing is evicted.
SIZES = (7, 100, 4 * KIB, 64 * KIB, 256 * KIB + 1, 1 * MIB, 3 * MIB + 5)
WEIGHTS = (3, 3, 3, 3, 2, 2, 1)
MAX_VALUE = max(SIZES)
POOL = random.Random(SEED).randbytes(8 * MIB)
_HEADER = re.compile(rb"<([^#>]+)#(\d+)#(\d+)>")


def _digest(key: str, gen: int) -> bytes:
    return hashlib.blake2b(f"{key}#{gen}".encode(), digest_size=8).digest()


def size_of(key: str) -> int:
    """A key's values all have one size: an upsert that changes the size of a value leaves
    the old copy allocated in the master for ``put_start_release_timeout_sec`` (600 s;
    Mooncake's own ``store.upsert`` does the same, see docs/troubleshooting.md), which fills
    the cluster within a minute of this load and makes the master evict keys."""
    return random.Random(_digest(key, 0)).choices(SIZES, WEIGHTS)[0]


def value_of(key: str, gen: int) -> bytes:
    """The value generation ``gen`` of ``key`` writes: the same bytes every time."""
    digest = _digest(key, gen)
    d = int.from_bytes(digest, "little")
    size = size_of(key)
    head = digest + f"<{key}#{gen}#{size}>".encode()
    offset = d % (len(POOL) - size)
    return (head + POOL[offset : offset + size - len(head)])[:size]


def describe(got: bytes) -> str:
    """What a value that matched no expected one looks like it is."""
    m = _HEADER.match(got, 8)
    if m is None:
        return f"{len(got)} bytes starting {got[:24]!r} (no header)"
    key, gen, size = m.group(1).decode(), int(m.group(2)), int(m.group(3))
    intact = "intact" if got == value_of(key, gen) else "damaged"
    return f"{len(got)} bytes: the {intact} value {key}#{gen} of {size} bytes"


class WrongRead(AssertionError):
    pass


ABSENT = None


@dataclass
class Tally:
    """One owner's counts: operations by name, bytes, tolerated (retryable) errors by name."""

    ops: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    written: int = 0
    read: int = 0

    def merge(self, other: Tally) -> None:
        self.ops.update(other.ops)
        self.errors.update(other.errors)
        self.written += other.written
        self.read += other.read

    def tolerate(self, code: int, what: str) -> None:
        """Count a retryable failure; any other fails the test."""
        if not mcs_status.is_retryable(code):
            raise AssertionError(f"{what}: {mcs_status.describe(code)} is not retryable")
        self.errors[mcs_status.name(code)] += 1


class Keyspace:
    """One owner's keys, and for each the states a read may find: a generation, or ABSENT.
    One state while every write was acknowledged; several after a write failed retryably
    (it may or may not have been stored), until a read tells which."""

    def __init__(self, run: str, owner: str) -> None:
        self.keys = [f"soak-{run}-{owner}-{i}" for i in range(KEYS_PER_OWNER)]
        self.states: dict[str, set[int | None]] = {k: {ABSENT} for k in self.keys}
        #: The last few things done to each key, told when a read finds it wrong.
        self.history: dict[str, deque[str]] = {k: deque(maxlen=8) for k in self.keys}
        self._gen = 0

    def next_gen(self) -> int:
        self._gen += 1
        return self._gen

    def stored(self, key: str, gen: int, replace: bool, certain: bool = True) -> None:
        """A write of ``gen``: an upsert replaces, a put keeps a present value."""
        after = {gen} if replace else {gen if s is ABSENT else s for s in self.states[key]}
        self.states[key] = after if certain else self.states[key] | after
        self.note(key, f"{'upsert' if replace else 'put'} #{gen}{'' if certain else ' failed'}")

    def removed(self, key: str, found: bool | None) -> None:
        """A remove that reported ``found`` (None: it failed, the key may be either way)."""
        states = self.states[key]
        self.note(key, f"remove found={found}")
        if found is None:
            states.add(ABSENT)
            return
        if found and states == {ABSENT} or not found and ABSENT not in states:
            self.wrong(key, f"remove said found={found}")
        self.states[key] = {ABSENT}

    def present(self, key: str, there: bool, how: str) -> None:
        """An exists (or put_if_absent) that found the key present or not."""
        states = self.states[key]
        self.note(key, f"{how} present={there}")
        if there and states == {ABSENT} or not there and ABSENT not in states:
            self.wrong(key, f"{how} said present={there}")
        self.states[key] = {s for s in states if (s is not ABSENT) == there}

    def observe(self, key: str, got: bytes | None, how: str) -> None:
        """A read: it must find one of the states (byte for byte), which becomes the one."""
        states = self.states[key]
        if got is None:
            self.note(key, f"{how}: a miss")
            if ABSENT not in states:
                self.wrong(key, f"{how} found a miss")
            self.states[key] = {ABSENT}
            return
        for gen in states:
            if gen is not ABSENT and got == value_of(key, gen):
                self.note(key, f"{how}: #{gen}")
                self.states[key] = {gen}
                return
        self.note(key, f"{how}: {describe(got)}")
        self.wrong(key, f"{how} found {describe(got)}")

    def note(self, key: str, what: str) -> None:
        self.history[key].append(f"{time.monotonic():.3f} {what}")

    def wrong(self, key: str, what: str) -> None:
        states = sorted(self.states[key], key=lambda s: -1 if s is ABSENT else s)
        raise WrongRead(
            f"{key}: {what}; expected {states} (None: absent); its last operations "
            f"(monotonic s):\n  " + "\n  ".join(self.history[key])
        )


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


#: An operation: yields the client call(s) it makes, is sent each answer or thrown its
#: MooncakeError, and checks every answer against the owner's keyspace.  The same
#: operations run on Client (in threads) and AsyncClient (awaited).
Op = Generator[Call, Any, None]


def _write_one(ks: Keyspace, rng: random.Random, t: Tally, name: str) -> Op:
    key = rng.choice(ks.keys)
    gen = ks.next_gen()
    value = value_of(key, gen)
    replace = name == "upsert"
    try:
        answer = yield Call(name, (key, value))
    except MooncakeError as exc:
        t.tolerate(exc.code, f"{name}({key})")
        ks.stored(key, gen, replace, certain=False)
        return
    if name == "put_if_absent":
        ks.present(key, not answer, name)
    ks.stored(key, gen, replace)
    t.written += len(value)


def _write_many(ks: Keyspace, rng: random.Random, t: Tally, name: str) -> Op:
    keys = rng.sample(ks.keys, rng.randint(2, BATCH_MAX))
    gens = [ks.next_gen() for _ in keys]
    values = [value_of(k, g) for k, g in zip(keys, gens)]
    upsert = name == "batch_upsert" or (name == "put_from" and rng.random() < 0.5)
    kwargs = {"upsert": True} if name == "put_from" and upsert else {}
    try:
        codes = yield Call(name, (keys, values), kwargs)
    except MooncakeError as exc:  # the batch as a whole
        t.tolerate(exc.code, f"{name}({keys})")
        for k, g in zip(keys, gens):
            ks.stored(k, g, upsert, certain=False)
        return
    assert len(codes) == len(keys), (name, codes)
    for k, g, v, code in zip(keys, gens, values, codes):
        if code == 0:
            ks.stored(k, g, upsert)
            t.written += len(v)
        else:
            t.tolerate(code, f"{name} of {k}")
            ks.stored(k, g, upsert, certain=False)


def _read_one(ks: Keyspace, rng: random.Random, t: Tally, name: str) -> Op:
    key = rng.choice(ks.keys)
    try:
        answer = yield Call(name, (key,))
    except MooncakeError as exc:
        t.tolerate(exc.code, f"{name}({key})")
        return
    if name == "get":
        ks.observe(key, answer, name)
        t.read += len(answer or b"")
    else:
        ks.present(key, bool(answer), name)


def _read_many(ks: Keyspace, rng: random.Random, t: Tally, bufs: list[bytearray]) -> Op:
    keys = rng.sample(ks.keys, rng.randint(2, BATCH_MAX))
    try:
        values = yield Call("batch_get", (keys,))
    except MooncakeError as exc:
        t.tolerate(exc.code, f"batch_get({keys})")
        return
    for k, v in zip(keys, values, strict=True):
        ks.observe(k, v, "batch_get")
        t.read += len(v or b"")


def _read_into(ks: Keyspace, rng: random.Random, t: Tally, bufs: list[bytearray]) -> Op:
    keys = rng.sample(ks.keys, rng.randint(1, BATCH_MAX))
    mine = bufs[: len(keys)]
    for k, buf in zip(keys, mine):  # a read that writes nothing cannot pass as the value
        n = size_of(k)
        buf[:8] = bytes(8)
        buf[max(0, n - 8) : n] = bytes(min(n, 8))
    try:
        codes = yield Call("get_into", (keys, mine))
    except MooncakeError as exc:
        t.tolerate(exc.code, f"get_into({keys})")
        return
    for k, buf, n in zip(keys, mine, codes, strict=True):
        if n == mcs_status.OBJECT_NOT_FOUND:
            ks.observe(k, None, "get_into")
        elif n < 0:
            t.tolerate(n, f"get_into of {k}")
        else:
            ks.observe(k, bytes(memoryview(buf)[:n]), "get_into")
            t.read += n


def _remove(ks: Keyspace, rng: random.Random, t: Tally, bufs: list[bytearray]) -> Op:
    key = rng.choice(ks.keys)
    try:
        found = yield Call("remove", (key,), {"force": True})  # a recent read holds a lease
    except MooncakeError as exc:
        t.tolerate(exc.code, f"remove({key})")
        ks.removed(key, None)
        return
    ks.removed(key, bool(found))


def _op(make: Callable[..., Op], name: str) -> Callable[..., Op]:
    return lambda ks, rng, t, bufs: make(ks, rng, t, name)


#: Operations and their weights: about as many writes as reads, removes rarer.
OPERATIONS: dict[str, tuple[Callable[[Keyspace, random.Random, Tally, list[bytearray]], Op], int]]
OPERATIONS = {
    "put": (_op(_write_one, "put"), 2),
    "upsert": (_op(_write_one, "upsert"), 3),
    "put_if_absent": (_op(_write_one, "put_if_absent"), 1),
    "batch_put": (_op(_write_many, "batch_put"), 1),
    "batch_upsert": (_op(_write_many, "batch_upsert"), 1),
    "put_from": (_op(_write_many, "put_from"), 2),
    "get": (_op(_read_one, "get"), 4),
    "exists": (_op(_read_one, "exists"), 2),
    "batch_get": (_read_many, 2),
    "get_into": (_read_into, 2),
    "remove": (_remove, 1),
}
_NAMES = list(OPERATIONS)
_WEIGHTS = [w for _, w in OPERATIONS.values()]


def _run_sync(client: Client, op: Op) -> None:
    try:
        call = next(op)
        while True:
            try:
                answer = getattr(client, call.name)(*call.args, **call.kwargs)
            except MooncakeError as exc:
                call = op.throw(exc)
            else:
                call = op.send(answer)
    except StopIteration:
        pass


async def _run_async(client: AsyncClient, op: Op) -> None:
    try:
        call = next(op)
        while True:
            try:
                answer = await getattr(client, call.name)(*call.args, **call.kwargs)
            except MooncakeError as exc:
                call = op.throw(exc)
            else:
                call = op.send(answer)
    except StopIteration:
        pass


class Owner:
    """A thread or a task: its keys, its random choices, its counts, its read buffers."""

    def __init__(self, run: str, name: str, seed: int) -> None:
        self.name = name
        self.keyspace = Keyspace(run, name)
        self.rng = random.Random(seed)
        self.tally = Tally()
        self.bufs = [bytearray(MAX_VALUE) for _ in range(BATCH_MAX)]
        self.failure: str | None = None

    def next_op(self) -> tuple[str, Op]:
        name = self.rng.choices(_NAMES, _WEIGHTS)[0]
        self.tally.ops[name] += 1
        return name, OPERATIONS[name][0](self.keyspace, self.rng, self.tally, self.bufs)

    def run_sync(self, client: Client, deadline: float) -> None:
        try:
            while time.monotonic() < deadline:
                _run_sync(client, self.next_op()[1])
        except BaseException:
            self.failure = traceback.format_exc()

    async def run_async(self, client: AsyncClient, deadline: float) -> None:
        try:
            while time.monotonic() < deadline:
                await _run_async(client, self.next_op()[1])
        except BaseException:
            self.failure = traceback.format_exc()
