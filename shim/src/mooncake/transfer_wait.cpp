// Transfers that end before their memory is let go (transfer_wait.hpp).
#include "transfer_wait.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

namespace mcs {
namespace {

#define MCS_FUTURE_WAIT "_ZN8mooncake14TransferFuture4waitEv"
#define MCS_FUTURE_GET "_ZN8mooncake14TransferFuture3getEv"
constexpr const char *kIsReady = "_ZNK8mooncake14TransferFuture7isReadyEv";

// mooncake::ErrorCode is an int32 enum, returned in eax; `self` is the future.
using WaitFn = int32_t (*)(void *);
using ReadyFn = bool (*)(const void *);

std::atomic<WaitFn> g_wait{nullptr};
std::atomic<ReadyFn> g_ready{nullptr};
std::atomic<uint64_t> g_waits{0}, g_past_60s{0}, g_past_limit{0};
uint64_t g_limit_s = 0;  // set once by transfer_wait_init, before g_wait

using Clock = std::chrono::steady_clock;
constexpr auto kMooncakeWait = std::chrono::seconds(60);

// How long a kernel retransmits unacknowledged data before it gives the
// connection up: RTO from 200 ms, doubling, at most 120 s, tcp_retries2 times
// (15 by default: about 925 s).  A peer that still has bytes for a transfer
// has given its connection up by then, so none of them can land afterwards.
uint64_t retransmission_horizon_s() {
    int retries = 15;
    if (FILE *f = std::fopen("/proc/sys/net/ipv4/tcp_retries2", "re")) {
        if (std::fscanf(f, "%d", &retries) != 1) retries = 15;
        std::fclose(f);
    }
    retries = std::clamp(retries, 3, 30);
    double total = 0, rto = 0.2;
    for (int i = 0; i <= retries; i++) {
        total += rto;
        rto = std::min(rto * 2, 120.0);
    }
    return uint64_t(total) + 30;  // and the last attempt's answer
}

void pause(int round) {
    if (round < 64) return;  // a short transfer: check again at once, as Mooncake does
    if (round < 256) {
        sched_yield();
        return;
    }
    const long ns = std::min(1000000L, 20000L << std::min(round - 256, 6));
    timespec ts{0, ns};
    nanosleep(&ts, nullptr);
}

int32_t wait_here(void *future) {
    WaitFn orig = g_wait.load();
    ReadyFn ready = g_ready.load();
    if (!orig || !ready) {
        // Not resolved (load_mooncake not run: cannot happen, store.so called us).
        orig = reinterpret_cast<WaitFn>(dlsym(RTLD_NEXT, MCS_FUTURE_WAIT));
        return orig ? orig(future) : -800;  // TRANSFER_FAIL
    }
    g_waits.fetch_add(1, std::memory_order_relaxed);
    if (!ready(future)) {
        const Clock::time_point start = Clock::now();
        const Clock::time_point limit = start + std::chrono::seconds(g_limit_s);
        bool counted = false;
        for (int round = 0; !ready(future); round++) {
            const Clock::time_point now = Clock::now();
            if (!counted && now - start > kMooncakeWait) {
                counted = true;
                g_past_60s.fetch_add(1, std::memory_order_relaxed);
            }
            if (now > limit) {
                g_past_limit.fetch_add(1, std::memory_order_relaxed);
                break;  // Mooncake's wait answers at once: its 60 s are over
            }
            pause(round);
        }
    }
    return orig(future);  // ready: its result
}

}  // namespace
}  // namespace mcs

// The interposers: store.so's calls to TransferFuture::wait() and get() land here.
extern "C" __attribute__((visibility("default"))) int32_t mcs_interposed_future_wait(
    void *self) __asm__(MCS_FUTURE_WAIT);
extern "C" __attribute__((visibility("default"))) int32_t mcs_interposed_future_get(
    void *self) __asm__(MCS_FUTURE_GET);

extern "C" int32_t mcs_interposed_future_wait(void *self) {
    return mcs::wait_here(self);
}

extern "C" int32_t mcs_interposed_future_get(void *self) {
    return mcs::wait_here(self);
}

namespace mcs {

bool transfer_wait_init(void *store_handle) {
    auto wait = reinterpret_cast<WaitFn>(dlsym(store_handle, MCS_FUTURE_WAIT));
    auto ready = reinterpret_cast<ReadyFn>(dlsym(store_handle, kIsReady));
    if (!wait || !ready || wait == reinterpret_cast<WaitFn>(&mcs_interposed_future_wait))
        return false;
    g_limit_s = retransmission_horizon_s();
    g_ready.store(ready);
    g_wait.store(wait);
    return true;
}

TransferWaitCounters transfer_wait_counters() {
    return {g_wait.load() != nullptr, g_waits.load(), g_past_60s.load(), g_past_limit.load(),
            g_limit_s};
}

}  // namespace mcs
