"""A segment filled three times over by several writer processes, with Mooncake's eviction
on (``bench/eviction.py``, bounded; its longer runs' figures are in ``bench/RESULTS.md``).

The drop-in as a stack gets it, in three spawned processes, each reading back as it
writes (``get`` and ``get_into`` by turns).  Never: a read that returns bytes other than
its key's value, a call over its deadline plus the slack, a put answered with anything
but stored or the segment full (NO_AVAILABLE_HANDLE), a writer that does not finish.  And
eviction did make room: more was stored than the segment holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mooncake_cffi.store.fail_open import DEADLINE

pytestmark = pytest.mark.slow

EVICTION = Path(__file__).resolve().parent.parent / "bench" / "eviction.py"
#: Scheduling slack on a loaded 2-core machine, beyond the drop-in's deadline.
SLACK = 3.0


@pytest.mark.parametrize("seed", [0, 1])
def test_a_segment_filled_three_times_over_never_returns_another_keys_bytes(seed):
    argv = [sys.executable, str(EVICTION), "--json", "--impls", "ours", "--writers", "3",
            "--fill", "3", "--segment", "64 MB", "--seed", str(seed),
            "--stall", str(DEADLINE + SLACK)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    (result,) = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    print(f"\n[eviction seed {seed}] {result}")
    assert result["wrong"] == []
    assert result["stalls"] == []
    assert result["exits"] == [0, 0, 0]
    assert set(result["put_codes"]) <= {"stored", "NO_AVAILABLE_HANDLE"}, result["put_codes"]
    assert result["bytes_stored"] > 1.5 * result["segment_bytes"], "eviction made no room"
    assert result["reads"] > 0 and result["recent_hit_ratio"] is not None
