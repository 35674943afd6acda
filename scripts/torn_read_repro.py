"""Reproduces the torn reads of older Mooncake wheels with Mooncake's own client alone.

Each round stores values of 1 B .. 4 MiB with ``batch_put_from`` (unregistered buffers, TCP)
and reads them back at once with ``batch_get_buffer``; a value whose bytes differ is counted
and read again.  Run it with a wheel venv's Python (scripts/wheel_venvs.sh builds them)::

    ~/.cache/mooncake-cffi/wheel-venvs/cpu-0.3.10.post2/bin/python scripts/torn_read_repro.py 80

Measured here (80 rounds): 5 and 1 torn values in two runs on 0.3.10.post2, 1 on 0.3.11.post1,
0 on 0.3.12.post1, 0.3.13 and 0.3.13.post1; the second read was right every time.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import uuid

import numpy as np

from mooncake_cffi.cluster import LocalCluster

SIZES = [1, 2, 255, 4096, 65537, 1 << 20, 4 << 20]


def main(rounds: int) -> int:
    torn = 0
    with LocalCluster(tempfile.mkdtemp(prefix="mcs-torn-")) as cluster:
        from mooncake_cffi.wheel import prepare_runtime

        prepare_runtime()  # libcudart.so.12 for the wheels that link it without shipping it
        from mooncake.store import MooncakeDistributedStore

        cfg = cluster.client_config()
        store = MooncakeDistributedStore()
        rc = store.setup(
            "127.0.0.1", cfg["metadata_server"], 0, 16 << 20, "tcp", "", cfg["master_server_addr"]
        )
        if rc != 0:
            print(f"setup failed: {rc}", file=sys.stderr)
            return 2
        try:
            for r in range(rounds):
                keys = [uuid.uuid4().hex for _ in SIZES]
                values = [os.urandom(n) for n in SIZES]
                arrays = [np.frombuffer(v, dtype=np.uint8) for v in values]
                put = store.batch_put_from(
                    keys, [a.ctypes.data for a in arrays], [a.nbytes for a in arrays]
                )
                assert all(x == 0 for x in put), put
                handles = store.batch_get_buffer(keys)
                for key, h, want in zip(keys, handles, values):
                    got = ctypes.string_at(h.ptr(), h.size())
                    if got != want:
                        torn += 1
                        first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
                        again = store.get(key) == want
                        print(
                            f"round {r}: {len(want)} B value differs from byte {first}; "
                            f"read again: {'right' if again else 'still wrong'}"
                        )
                del handles
        finally:
            store.close()
    print(f"torn values: {torn} in {rounds} rounds")
    return 1 if torn else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 80))
