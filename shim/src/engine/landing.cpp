// landing.hpp: a pool of page-aligned buffers by rounded size.  A fresh
// buffer costs a page fault per page on first touch, about what copying it
// costs, so buffers of ended loads are kept for the next ones.
#include "landing.hpp"

#include <cstdlib>

#include "backend.hpp"

namespace mcs {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kSmallest = uint64_t(64) << 10;
constexpr uint64_t kPow2Until = uint64_t(64) << 20;

// Powers of two from 64 KiB, then multiples of 64 MiB: loads of nearby
// sizes share buffers, and a large one wastes at most 64 MiB.
uint64_t rounded(uint64_t bytes) {
    if (bytes > kPow2Until) return (bytes + kPow2Until - 1) / kPow2Until * kPow2Until;
    uint64_t size = kSmallest;
    while (size < bytes) size <<= 1;
    return size;
}

}  // namespace

LandingPool::State::~State() {
    for (auto &entry : free)
        for (unsigned char *p : entry.second) std::free(p);
}

LandingPool::LandingPool() : state_(std::make_shared<State>()) {}

std::shared_ptr<unsigned char> LandingPool::take(uint64_t bytes) {
    const uint64_t size = rounded(bytes);
    unsigned char *p = nullptr;
    {
        std::lock_guard<std::mutex> lk(state_->mu);
        auto it = state_->free.find(size);
        if (it != state_->free.end() && !it->second.empty()) {
            p = it->second.back();
            it->second.pop_back();
            state_->kept -= size;
        }
    }
    if (!p) p = static_cast<unsigned char *>(std::aligned_alloc(kPage, size));
    if (!p)
        throw Error(MCS_E_NOMEM,
                    "no memory for a landing buffer of " + std::to_string(size) + " bytes");
    std::shared_ptr<State> state = state_;
    return std::shared_ptr<unsigned char>(p, [state, size](unsigned char *q) {
        {
            std::lock_guard<std::mutex> lk(state->mu);
            if (state->kept + size <= kKeepBytes) {
                state->free[size].push_back(q);
                state->kept += size;
                return;
            }
        }
        std::free(q);
    });
}

}  // namespace mcs
