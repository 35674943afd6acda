"""An opt-in retry policy for per-key failures that may succeed when tried again.

``Client(config, retry=RetryPolicy(...))`` makes the client try again, after a backoff, the keys
of a batch whose per-key result is a retryable error (see :data:`mooncake_cffi.status.RETRYABLE`:
a full pool, a failed transfer or RPC, a replica not yet ready...), and only those keys.  Keys
that succeeded, are missing, or failed for good (bad input) are never sent again.  The results a
call returns say per key what finally happened: the last attempt's outcome.  Retrying stops when
the attempts are used up, or when the next wait would pass the call's deadline (its
``timeout=``, else the client's ``op_timeout``) or the policy's own ``budget``.  The
synchronous and asynchronous clients retry the same way (``_plans.retry_plan``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to try retryable per-key failures again.

    Args:
        attempts: tries per key in all, the first included (1: never retry).
        backoff: seconds before the first retry; each next wait is ``multiplier`` times
            longer, up to ``max_backoff``.
        jitter: each wait is scaled by a random factor in ``[1 - jitter, 1 + jitter]`` so
            clients that failed together do not retry together.
        budget: seconds a call may spend retrying in all (None: only the call's deadline
            limits it).
    """

    attempts: int = 3
    backoff: float = 0.05
    multiplier: float = 2.0
    max_backoff: float = 1.0
    jitter: float = 0.5
    budget: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool):
            raise ValueError("attempts must be an integer")
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        for name in ("backoff", "multiplier", "max_backoff", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, not {value!r}")
        if self.backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoff and max_backoff must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        if self.budget is not None and (
            isinstance(self.budget, bool)
            or not isinstance(self.budget, (int, float))
            or not 0 <= self.budget < math.inf
        ):
            raise ValueError(f"budget must be None or >= 0 seconds, not {self.budget!r}")

    def delays(self) -> Iterator[float]:
        """The waits before each retry (attempts - 1 of them), jitter applied."""
        wait = self.backoff
        for _ in range(self.attempts - 1):
            yield wait * random.uniform(1 - self.jitter, 1 + self.jitter)
            wait = min(self.max_backoff, wait * self.multiplier)
