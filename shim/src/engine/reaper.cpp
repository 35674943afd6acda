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
// A child forked from a process with a Mooncake client leaves before all of
// that (guard_forked_exits): nothing of Mooncake's runs in its exit.
#include "reaper.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
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
    int kept = 0;         // clients kept alive without a teardown (keep_until_exit)
};
Pending &pending() {
    static Pending *p = new Pending();
    return *p;
}

// The process whose exits run normally; its forked children leave early.
std::atomic<pid_t> g_exit_owner{0};

// In a forked child: flush what the child wrote, and leave before any exit
// handler or destructor registered in the parent runs.
void leave_if_forked(int status) {
    if (getpid() == g_exit_owner.load()) return;
    std::fflush(nullptr);
    _exit(status);
}

void exit_in_forked_child(int status, void *) {
    leave_if_forked(status);
}

void exit_while_pending(int status, void *) {
    leave_if_forked(status);  // the parent's teardown threads are not in a child
    Pending &p = pending();
    std::unique_lock<std::mutex> lk(p.mu);
    p.cv.wait(lk, [&] { return p.before_exit == 0; });
    if (p.running == 0 && p.kept == 0) return;  // nothing in the background: a normal exit
    lk.unlock();
    std::fflush(nullptr);
    _exit(status);
}

std::once_flag g_exit_hook;
std::once_flag g_fork_guard;

}  // namespace

void guard_forked_exits() {
    std::call_once(g_fork_guard, [] {
        pid_t unset = 0;
        g_exit_owner.compare_exchange_strong(unset, getpid());
        on_exit(exit_in_forked_child, nullptr);
    });
}

bool run_bounded(std::function<void()> work, std::chrono::milliseconds wait, bool before_exit) {
    if (wait.count() < 0) {
        work();
        return true;
    }
    std::call_once(g_exit_hook, [] {
        pid_t unset = 0;
        g_exit_owner.compare_exchange_strong(unset, getpid());
        on_exit(exit_while_pending, nullptr);
    });
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

void keep_until_exit(int delta) {
    std::call_once(g_exit_hook, [] { on_exit(exit_while_pending, nullptr); });
    Pending &p = pending();
    std::lock_guard<std::mutex> lk(p.mu);
    p.kept += delta;
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
