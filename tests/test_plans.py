"""Unit tests of a plan's deadline (``mooncake_cffi._core.plans.Deadline``): what a step that timed
out says about the call's own deadline.  No cluster: the steps' errors are built here."""

from __future__ import annotations

import time

from mooncake_cffi import MooncakeTimeoutError
from mooncake_cffi._core.plans import Deadline
from mooncake_cffi.status import MCS_E_TIMEOUT


def timed_out(ms: int) -> MooncakeTimeoutError:
    return MooncakeTimeoutError(
        MCS_E_TIMEOUT, f"get of 1 key did not finish within {ms} ms", [MCS_E_TIMEOUT], 7
    )


def test_a_later_step_that_timed_out_names_the_calls_deadline() -> None:
    deadline = Deadline(2.0, start=time.monotonic() - 1.6)
    left = deadline.left()  # a later step: what the earlier ones left
    assert left is not None and 0.3 < left < 0.41
    noted = deadline.noted(timed_out(347))
    assert noted.message == "get of 1 key did not finish within 347 ms; the call's deadline: 2 s"
    assert isinstance(noted, TimeoutError) and noted.retryable
    assert noted.batch_id == 7 and noted.results == [MCS_E_TIMEOUT]
    assert Deadline(0.25).noted(noted) is noted  # named once, by the outermost plan


def test_a_step_that_had_the_whole_deadline_or_none_is_left_as_it_is() -> None:
    whole = timed_out(2000)
    deadline = Deadline(2.0)
    deadline.left()  # the first step, at once: all of it
    assert deadline.step_ms == 2000 and deadline.noted(whole) is whole
    assert Deadline(None).noted(timed_out(347)).message.endswith("within 347 ms")


def test_what_is_left_never_reaches_zero() -> None:
    deadline = Deadline(0.01, start=time.monotonic() - 1)
    assert deadline.left() == 0.001 and Deadline(None).left() is None
