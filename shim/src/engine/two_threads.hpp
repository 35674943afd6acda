// Work over many values split between the calling thread and one more: a
// batch's CRC pass is bound by one core's memory bandwidth (about 11 GB/s
// here; 64 MiB take 5.9 ms on one thread, 3.8 ms on two), and while a lane
// worker computes it the rest of the client waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <system_error>
#include <thread>

namespace mcs {

// Below this many bytes in all, one thread: a thread costs tens of
// microseconds to start, what the CRC of a few hundred KiB takes.
constexpr uint64_t kTwoThreadsFrom = uint64_t(4) << 20;

// Calls each(i) for every i in [0, n), where bytes(i) is item i's size.  Items
// are split by bytes into two runs, the first on a thread of its own, when
// they hold kTwoThreadsFrom bytes or more and at least two of them; each(i)
// must touch only what belongs to item i (and atomics).  If no thread can be
// started, all run on the calling thread.
template <class Bytes, class Each>
void for_each_on_two_threads(size_t n, Bytes &&bytes, Each &&each) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += bytes(i);
    size_t half = 0;
    if (n >= 2 && total >= kTwoThreadsFrom) {
        for (uint64_t sum = 0; half < n - 1 && 2 * (sum + bytes(half)) <= total; half++)
            sum += bytes(half);
        if (half == 0) half = 1;
    }
    std::thread helper;
    if (half) {
        try {
            helper = std::thread([&] {
                for (size_t i = 0; i < half; i++) each(i);
            });
        } catch (const std::system_error &) {
            half = 0;  // no thread to be had: all of it here
        }
    }
    for (size_t i = half; i < n; i++) each(i);
    if (helper.joinable()) helper.join();
}

}  // namespace mcs
