"""A client under load that serves its Prometheus metrics, for the monitoring tests.

Run as ``python tests/ops_load.py CONFIG_JSON PORT PREFIX``: it sets up a
:class:`mooncake_cffi.Client` of the config (with lanes of their own for lookups and reads),
registers it with :mod:`mooncake_cffi.metrics`, serves ``/metrics`` on ``127.0.0.1:PORT``,
prints ``ready`` and then, until SIGTERM, puts, reads, checks and removes 16 KiB values under
PREFIX, with a get of a missing key and a remove of a key just read (OBJECT_HAS_LEASE) now
and then, so every operation and failure counter moves.  It removes what it wrote on the way
out.  :func:`start_load` runs it and waits for ``ready``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VALUE_BYTES = 16 * 1024


def start_load(config: dict[str, Any], port: int, prefix: str, env: dict[str, str] | None = None):
    """The load process, once it serves its metrics (``subprocess.Popen``)."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), json.dumps(config), str(port), prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the load process did not start: {line!r}")
    return proc


def stop_load(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then wait (kill after 20 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    from prometheus_client import CollectorRegistry, start_http_server

    from mooncake_cffi import Client, metrics

    config, port, prefix = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    config = {**config, "per_op_workers": {"lookup": 1, "retrieve": 1}}
    client = Client(config, op_timeout=5.0)
    registry = CollectorRegistry()
    metrics.register(client, registry)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    print("ready", flush=True)
    value = os.urandom(VALUE_BYTES)
    i = 0
    while not stop:
        keys = [f"{prefix}/{i}/{j}" for j in range(4)]
        client.batch_put(keys, [value] * 4)
        client.batch_exists(keys)
        client.batch_get(keys)
        client.get(keys[0])
        client.size(keys[1])
        if i % 5 == 0:
            client.get(f"{prefix}/missing/{i}")
            client.batch_remove(keys[:1])  # just read: OBJECT_HAS_LEASE, a failed key
        client.batch_remove(keys, force=True)
        i += 1
        time.sleep(0.01)
    client.close()


if __name__ == "__main__":
    main()
