"""Two engines, one store, on namespace hosts: what engine A computed, engine B serves.

The hosts (``mooncake_cffi.topology``, root only): the metadata server and the master on
``m0``, a storage node on each of ``s0`` and ``s1``, engine A on ``e0`` and engine B on
``e1``, each a vLLM process (tests/engine_driver.py) of the tier's model with vLLM's own
prefix cache off, so a cached token can only have come from the store.

- **Route a**, vLLM's ``MooncakeStoreConnector``, on the drop-in and on Mooncake's class
  side by side (a pair of engines of each class, one cluster): A answers a prompt new to
  the store; B, asked the same prompt, gets at least ``HIT_SHARE`` of its blocks from the
  store, with the tokens of an engine without a connector (``engine_reference``, the cold
  run of the same model).
- **Route b**, an LMCache server on each engine host with LMCache's own ``mooncake_store``
  JSON, both on the one cluster, each engine in front of its own server: the same, B's
  server finding A's chunks in Mooncake (its own L1 never held them).
- **Engine A killed** (SIGKILL to its process group, its engine core too) while a request
  runs: B goes on serving, A's prompts still from the store and a new one computed, each
  request within its cold time plus ``AFTER_KILL_S``, the tokens unchanged.

Each engine gets a ``VLLM_RPC_BASE_PATH`` of its own.  vLLM's MooncakeStoreConnector names
its scheduler-to-worker lookup socket after the host name alone, which network namespaces
share: without it, the engine that started second took the socket over, both engines'
lookups went to its worker, and once that engine was killed the other's next request
waited forever for a lookup answer.

Needs root and the engine venv (scripts/install_engine.sh); skipped without them.  Figures
are printed and appended to ``$MOONCAKE_CFFI_ENGINE_RECORD`` (engine_helpers.record).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
pytest.importorskip("lmcache")
pytest.importorskip("mooncake.store")

from engine_helpers import (  # noqa: E402
    PROMPT_LEN,
    Engine,
    EngineError,
    LMCacheServer,
    Reference,
    cluster_keys,
    mooncake_config,
    prompt,
    record,
    wait_for,
)
from lmcache_helpers import spec  # noqa: E402

from mooncake_cffi.cluster import LocalCluster  # noqa: E402
from mooncake_cffi.topology import Topology  # noqa: E402

pytestmark = pytest.mark.usefixtures("netns")

#: B must get at least this share of a prompt's blocks (route a) or chunks (route b).
HIT_SHARE = 0.9
#: Route a: vLLM's connector stores one key per full 32-token block; route b: LMCache one
#: per full 64-token chunk.
UNIT = {"a": 32, "b": 64}
#: After A is killed, each of B's requests takes at most its cold time plus this.
AFTER_KILL_S = 2.0
#: Keys A's request stored are listed by the master within this (both routes store behind).
KEYS_S = 30.0
#: How long one request may take at all before the test gives up on the engine.
REQUEST_CAP_S = 120.0
#: Prompts (seeds of engine_helpers.prompt) of each run: A computes the first three and B
#: serves the first; A is killed during the fourth; B then serves the second and third
#: (A's, new to B), the fourth and a fifth, new to the store.
SEEDS = {"a-ours": range(0, 5), "a-theirs": range(5, 10), "b": range(10, 15)}


@pytest.fixture(scope="module")
def fleet(
    netns: None, make_module_cluster: Callable[..., LocalCluster]
) -> Iterator[tuple[Topology, LocalCluster]]:
    with Topology(hosts=["m0", "s0", "s1", "e0", "e1"]) as t:
        roles = {"metadata": "m0", "master": "m0", "storage": "s0", "storage1": "s1"}
        cluster = make_module_cluster(
            ["512 MB", "512 MB"], placement=t.placement(roles), client_host=t.local_ip
        )
        cluster.start()
        try:
            yield t, cluster
        finally:
            cluster.stop()  # before the hosts go


def _pair(make: Callable[[str], Any]) -> tuple[Any, Any]:
    """``make("e0")`` and ``make("e1")`` at once (an engine's start is ~20 s of one core)."""
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(make, host) for host in ("e0", "e1")]
        made, failed = [], None
        for f in futures:
            try:
                made.append(f.result())
            except BaseException as exc:  # the other one is closed, this one raised
                failed = exc
    if failed is not None:
        for thing in made:
            (thing.close if hasattr(thing, "close") else thing.stop)()
        raise failed
    return made[0], made[1]


def _rpc_dir(tmp_path: Path, host: str) -> str:
    """A directory for one engine's vLLM IPC sockets (the module's docstring says why)."""
    path = tmp_path / f"rpc-{host}"
    path.mkdir(exist_ok=True)
    return str(path)


def _served_floor(route: str) -> int:
    """The fewest cached tokens that are ``HIT_SHARE`` of a prompt's full blocks."""
    unit = UNIT[route]
    return math.ceil(HIT_SHARE * (PROMPT_LEN // unit)) * unit


def _check(ref: Reference, seed: int, answer: dict[str, Any]) -> None:
    assert answer["tokens"] == ref.tokens(seed), (seed, answer, ref.runs[seed])


def _stored_by_a(a: Engine, local: LocalCluster, ref: Reference, seed: int, route: str) -> None:
    """A answers a prompt new to the store; its keys show up on the cluster."""
    before = len(cluster_keys(local))
    answer = a.generate(prompt(seed), timeout=REQUEST_CAP_S)
    _check(ref, seed, answer)
    assert answer["cached"] == 0, f"seed {seed} was not new to the store: {answer}"
    units = PROMPT_LEN // UNIT[route]
    wait_for(
        lambda: len(cluster_keys(local)) >= before + units, KEYS_S, f"A's {units} keys of {seed}"
    )


def _served_by_b(b: Engine, ref: Reference, seed: int, route: str) -> dict[str, Any]:
    """B asked A's prompt: most of it from the store, the cold run's tokens."""
    answer = b.generate(prompt(seed), timeout=REQUEST_CAP_S)
    _check(ref, seed, answer)
    need = _served_floor(route)
    assert answer["cached"] >= need, f"B got {answer['cached']} of seed {seed}, not {need}"
    return answer


def _run(
    a: Engine, b: Engine, local: LocalCluster, ref: Reference, route: str, store: str, seeds: range
) -> None:
    """A computes three prompts and B serves one; A is killed mid-request; B serves the
    other two from the store, and more."""
    first, second, third, during, new = seeds
    for seed in (first, second, third):
        _stored_by_a(a, local, ref, seed, route)
    hit = _served_by_b(b, ref, first, route)
    record(
        "fleet hit",
        route=route,
        store=store,
        seed=first,
        cached=hit["cached"],
        e2e_s=hit["e2e"],
        cold_e2e_s=ref.e2e(first),
    )

    # A killed in the middle of a request (its answer never comes)
    outcome: dict[str, Any] = {}

    def ask() -> None:
        try:
            outcome["answer"] = a.generate(prompt(during), timeout=REQUEST_CAP_S)
        except EngineError as exc:
            outcome["error"] = str(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    a.kill()
    asker.join(timeout=REQUEST_CAP_S)
    assert not asker.is_alive()

    for seed, kind in ((second, "A's"), (third, "A's"), (during, "asked of A"), (new, "new")):
        answer = b.generate(prompt(seed), timeout=REQUEST_CAP_S)
        _check(ref, seed, answer)
        if kind == "A's":  # still in the store: A held none of it
            assert answer["cached"] >= _served_floor(route), (seed, answer)
        elif kind == "new":
            assert answer["cached"] == 0, (seed, answer)
        bound = ref.e2e(seed) + AFTER_KILL_S
        record(
            "fleet after A killed",
            route=route,
            store=store,
            seed=seed,
            prompt=kind,
            cached=answer["cached"],
            e2e_s=answer["e2e"],
            bound_s=bound,
        )
        assert answer["e2e"] <= bound, f"B took {answer['e2e']:.2f} s for seed {seed} ({kind})"


@pytest.mark.parametrize("store", ["ours", "theirs"])
def test_route_a_engine_b_serves_what_engine_a_computed(
    fleet: tuple[Topology, LocalCluster],
    engine_model: Path,
    engine_reference: Reference,
    tmp_path: Path,
    store: str,
) -> None:
    t, local = fleet
    config = mooncake_config(tmp_path / "mooncake.json", local)

    def make(host: str) -> Engine:
        env = {
            "MOONCAKE_CONFIG_PATH": str(config),
            "MOONCAKE_CFFI_DROP_IN": "1" if store == "ours" else "0",
            "VLLM_HOST_IP": t.ip(host),
            "VLLM_RPC_BASE_PATH": _rpc_dir(tmp_path, host),
        }
        log = tmp_path / f"vllm-{host}.log"
        return Engine(engine_model, log, "mooncake", env=env, on_host=t.prefix(host))

    a, b = _pair(make)
    try:
        record("fleet engines", route="a", store=store, start_s=[a.ready_s, b.ready_s])
        _run(a, b, local, engine_reference, "a", store, SEEDS[f"a-{store}"])
    finally:
        a.close()
        b.close()


def test_route_b_engine_b_serves_what_engine_a_computed(
    fleet: tuple[Topology, LocalCluster],
    engine_model: Path,
    engine_reference: Reference,
    tmp_path: Path,
) -> None:
    t, local = fleet

    def server(host: str) -> LMCacheServer:
        adapter = spec("mooncake_store", local.client_config(local_hostname=t.ip(host)))
        log = tmp_path / f"lmcache-{host}.log"
        return LMCacheServer(adapter, log, on_host=t.prefix(host), http_host=t.ip(host))

    servers = _pair(server)
    try:
        ports = {"e0": servers[0].port, "e1": servers[1].port}

        def make(host: str) -> Engine:
            log = tmp_path / f"vllm-{host}.log"
            env = {"VLLM_HOST_IP": t.ip(host), "VLLM_RPC_BASE_PATH": _rpc_dir(tmp_path, host)}
            return Engine(
                engine_model,
                log,
                "lmcache",
                env=env,
                lmcache_port=ports[host],
                on_host=t.prefix(host),
            )

        a, b = _pair(make)
        try:
            record("fleet engines", route="b", start_s=[a.ready_s, b.ready_s])
            _run(a, b, local, engine_reference, "b", "ours", SEEDS["b"])
        finally:
            a.close()
            b.close()
    finally:
        for s in servers:
            s.stop()
