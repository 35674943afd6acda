"""A vLLM engine in a process of its own, driven over a pipe (the engine tier's driver).

Run by ``tests/engine_helpers.py`` (and ``bench/engine.py``) as::

    python engine_driver.py --model DIR --connector none|mooncake|lmcache \
        [--lmcache-port P] [--prefix-cache] --result-fd FD

It builds one ``vllm.LLM`` (vLLM's own prefix cache off, so a cached token can only come
from the connector; ``--prefix-cache`` turns it on, for a hit that involves no store),
writes ``{"ready": seconds}`` to the result fd, then answers one JSON
request per line of stdin with one JSON line on the result fd:

* ``{"op": "generate", "prompt": [ids...], "max_tokens": N}`` ->
  ``{"tokens": [...], "cached": num_cached_tokens, "ttft": s, "e2e": s}``: one request at a
  time (a batch would change the numerics the tests compare); ``ttft`` is vLLM's own
  first-token latency of the request (its metrics, from arrival), ``e2e`` the wall time of
  the ``generate`` call;
* ``{"op": "exit"}``, or end of stdin: the engine is shut down and the process exits.

An error in a request is answered ``{"error": "..."}`` and the driver goes on.  SIGUSR1
writes the stacks of the driver's threads to stderr.  vLLM's own
log goes to stdout/stderr, which the caller keeps in a file.  vLLM starts its engine core
with ``spawn``: this module keeps its work under the ``__main__`` guard.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from typing import Any


def _connector(args: argparse.Namespace) -> Any:
    from vllm.config import KVTransferConfig

    if args.connector == "none":
        return None
    if args.connector == "mooncake":
        # vLLM's own connector; its store's configuration is the file MOONCAKE_CONFIG_PATH
        # names (the caller writes it)
        return KVTransferConfig(kv_connector="MooncakeStoreConnector", kv_role="kv_both")
    return KVTransferConfig(
        kv_connector="LMCacheMPConnector",
        kv_connector_module_path="lmcache.integration.vllm.lmcache_mp_connector",
        kv_role="kv_both",
        kv_connector_extra_config={
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": args.lmcache_port,
            "lmcache.mp.mp_transfer_mode": "engine_driven",
        },
    )


def _generate(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, ignore_eos=True, max_tokens=int(request.get("max_tokens", 8))
    )
    start = time.monotonic()
    (out,) = llm.generate([{"prompt_token_ids": request["prompt"]}], params, use_tqdm=False)
    e2e = time.monotonic() - start
    metrics = out.metrics
    ttft = getattr(metrics, "first_token_latency", None) or None
    return {
        "tokens": list(out.outputs[0].token_ids),
        "cached": int(out.num_cached_tokens or 0),
        "ttft": ttft,
        "e2e": e2e,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--connector", choices=["none", "mooncake", "lmcache"], default="none")
    parser.add_argument("--lmcache-port", type=int, default=0)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--prefix-cache", action="store_true")
    args = parser.parse_args()
    results = os.fdopen(args.result_fd, "w", buffering=1)
    # SIGUSR1 writes every thread's stack to stderr (the log): what the caller reads when a
    # request gets no answer in time
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def answer(doc: dict[str, Any]) -> None:
        results.write(json.dumps(doc) + "\n")
        results.flush()

    start = time.monotonic()
    from vllm import LLM

    llm = LLM(
        model=args.model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=args.max_model_len,
        block_size=32,
        enable_prefix_caching=args.prefix_cache,
        disable_log_stats=False,  # the per-request metrics carry the first-token latency
        kv_transfer_config=_connector(args),
    )
    answer({"ready": time.monotonic() - start, "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        try:
            answer(_generate(llm, request))
        except Exception as exc:  # the caller sees it; the engine goes on
            answer({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
    del llm  # vLLM's engine shuts its core down when it goes
    return 0


if __name__ == "__main__":
    sys.exit(main())
