// Background teardowns and the process-exit policy for those still running.
//
// A teardown handed to a thread of its own may still be inside Mooncake when
// the process exits.  exit() then runs the static destructors of every loaded
// library (store.so's RPC pools, the transfer engine's singletons) while that
// thread may wake up and use them: a crash at exit.  So the first background
// teardown registers an on_exit() handler, which runs before the exit handlers
// and static destructors of every library loaded earlier (store.so included):
//  - it first waits for the teardowns marked before_exit (a client whose
//    segment the master still lists: leaving before it is unmounted would make
//    other clients' writes into that segment fail until the client's TTL);
//  - then, if any other teardown still runs, it flushes stdio and ends the
//    process with _exit(status): what could not be torn down in time is left
//    to the kernel (memory, sockets) and to the master (the client's TTL)
//    rather than destroyed under a thread that may still use it.
#include "reaper.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

namespace mcs {

namespace {

// Leaked on purpose: used by threads that may outlive static destruction.
struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    int running = 0;
    int before_exit = 0;  // of those, the ones the exit waits for
};
Pending &pending() {
    static Pending *p = new Pending();
    return *p;
}

void exit_while_pending(int status, void *) {
    Pending &p = pending();
    std::unique_lock<std::mutex> lk(p.mu);
    p.cv.wait(lk, [&] { return p.before_exit == 0; });
    if (p.running == 0) return;  // nothing in the background: a normal exit
    lk.unlock();
    std::fflush(nullptr);
    _exit(status);
}

std::once_flag g_exit_hook;

}  // namespace

bool run_bounded(std::function<void()> work, std::chrono::milliseconds wait, bool before_exit) {
    if (wait.count() < 0) {
        work();
        return true;
    }
    std::call_once(g_exit_hook, [] { on_exit(exit_while_pending, nullptr); });
    Pending &p = pending();
    // `done` is shared with the thread, which may outlive this call.
    auto done = std::make_shared<bool>(false);
    {
        std::lock_guard<std::mutex> lk(p.mu);
        p.running++;
        if (before_exit) p.before_exit++;
    }
    std::thread([work = std::move(work), done, before_exit, &p]() mutable {
        try {
            work();
        } catch (...) {
        }
        work = nullptr;  // release what the work held before counting it ended
        std::lock_guard<std::mutex> lk(p.mu);
        *done = true;
        p.running--;
        if (before_exit) p.before_exit--;
        p.cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lk(p.mu);
    return p.cv.wait_for(lk, wait, [&] { return *done; });
}

int background_teardowns() {
    Pending &p = pending();
    std::lock_guard<std::mutex> lk(p.mu);
    return p.running;
}

bool wait_background_teardowns(std::chrono::milliseconds timeout) {
    Pending &p = pending();
    std::unique_lock<std::mutex> lk(p.mu);
    auto none = [&] { return p.running == 0; };
    if (timeout.count() < 0) {
        p.cv.wait(lk, none);
        return true;
    }
    return p.cv.wait_for(lk, timeout, none);
}

}  // namespace mcs
