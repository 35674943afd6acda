// A caller of a blocking batch spins for a moment before it sleeps on the
// batch's condition variable.  A small call run by a lane worker ends within
// a couple of hundred microseconds; a caller asleep meanwhile lets its CPU
// idle, and on a VM waking it again costs tens of microseconds and, behind a
// thread that busy-polls Mooncake's transfer, up to a scheduler tick (4 ms).
// The spin yields the CPU at every turn (sched_yield), so the threads the
// call itself needs (the worker, Mooncake's I/O threads, a local storage
// node) run first wherever they are placed; a spin with `pause` alone took
// a CPU from them and made a 16-key read 1.5x slower.  Measured on the 2-core
// VM (bench/RESULTS.md, wave 6, fourth stop), 4 KiB reads with a deadline:
// one key 244 us (p90 3.98 ms) sleeping, 94 us (p90 0.12 ms) spinning; 16
// keys 372 us sleeping, 387 us spinning.
//
// The spin is bounded in time (MCS_WAIT_SPIN_US, default kDefaultSpinUs; 0
// turns it off) and in callers: at most one spinner per two CPUs the process
// may use (cpus.hpp: its affinity and its cgroup's quota), none on one.  A
// caller that cannot spin, or whose batch is still running at the end of the
// spin, sleeps as before.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>

#include "cpus.hpp"

namespace mcs {

constexpr long kDefaultSpinUs = 200;

class SpinWait {
public:
    // Returns once `flag` is set or the spin is over (no spin: at once).
    static void until(const std::atomic<bool> &flag) {
        static const long us = spin_us();
        static const int most = usable_cpus() / 2;
        if (us <= 0 || most <= 0 || flag.load(std::memory_order_acquire)) return;
        static std::atomic<int> spinning{0};
        if (spinning.fetch_add(1, std::memory_order_relaxed) >= most) {
            spinning.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
        using Clock = std::chrono::steady_clock;
        const Clock::time_point end = Clock::now() + std::chrono::microseconds(us);
        for (unsigned i = 1; !flag.load(std::memory_order_acquire); i++) {
            sched_yield();  // any thread runnable here runs first
            if ((i & 15) == 0 && Clock::now() >= end) break;
        }
        spinning.fetch_sub(1, std::memory_order_relaxed);
    }

private:
    static long spin_us() {
        const char *v = std::getenv("MCS_WAIT_SPIN_US");
        if (!v || !*v) return kDefaultSpinUs;
        char *end = nullptr;
        const long us = std::strtol(v, &end, 10);
        if (*end || us < 0) return kDefaultSpinUs;
        return us > 100000 ? 100000 : us;
    }
};

}  // namespace mcs
