// Teardowns that may outlast their caller: a backend's teardown run on a thread
// of its own, waited for up to a bound, and what happens to one still running
// when the process exits (see "Closing" in mcs.h).
#pragma once

#include <chrono>
#include <functional>

namespace mcs {

// Runs `work` and waits for it: on the calling thread when `wait` is negative
// (until it ends), else on a new thread, waited for up to `wait`.  True if it
// ended within the wait; otherwise it goes on in the background, counted by
// background_teardowns() until it ends.  `before_exit`: if it is still
// running when the process exits, the exit waits for it (else the exit does
// not: see reaper.cpp).
bool run_bounded(std::function<void()> work, std::chrono::milliseconds wait, bool before_exit);

// Teardowns started by run_bounded() that have not ended yet.
int background_teardowns();

// Waits until no background teardown runs or `timeout` passes (negative:
// forever); true if none runs.
bool wait_background_teardowns(std::chrono::milliseconds timeout);

}  // namespace mcs
