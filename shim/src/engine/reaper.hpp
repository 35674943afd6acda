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

// Counts a Mooncake client kept alive without a teardown (delta +1 / -1):
// while any is, the process exits as it does with a teardown still running
// (stdio flushed, then _exit), so neither Mooncake's exit handler nor static
// destruction tears it down (ha_pool.hpp).
void keep_until_exit(int delta);

// Waits until no background teardown runs or `timeout` passes (negative:
// forever); true if none runs.
bool wait_background_teardowns(std::chrono::milliseconds timeout);

// Makes exit() in a child forked from this process skip every exit handler
// registered before the first call (Mooncake's atexit teardown among them,
// registered when its first client is created, and the static destructors of
// store.so): the child flushes stdio and ends with _exit(status).  Its copy of
// a client is the parent's memory with none of the parent's threads: tearing
// it down joins threads that do not exist (SIGSEGV).  Python's atexit
// handlers and stream flushes run before exit(), so they still run.  Called
// right after each Mooncake client is created; only the first call registers.
void guard_forked_exits();

}  // namespace mcs
