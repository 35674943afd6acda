// Landing memory for GET batches with MCS_FLAG_LAND: Mooncake reads into
// memory of the shim's, and a tile's bytes are copied to the caller's buffers
// only while its caller still waits (Engine::finish_tile).  A read that
// outlives its call (Mooncake cannot cancel a transfer) then lands here, never
// in memory the caller has since reused.  A buffer goes back to the pool when
// its batch is destroyed, that is once no tile of it can still write it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace mcs {

class LandingPool {
public:
    // What the pool keeps of returned buffers, in bytes; more is freed.
    static constexpr uint64_t kKeepBytes = uint64_t(256) << 20;

    LandingPool();
    // A page-aligned buffer of at least `bytes` (> 0), this caller's until
    // the last copy of the pointer goes; throws Error(MCS_E_NOMEM).
    std::shared_ptr<unsigned char> take(uint64_t bytes);

private:
    // Shared with the buffers' deleters: a batch may outlive its engine's
    // pool (close() leaves a stuck Mooncake call behind).
    struct State {
        std::mutex mu;
        std::map<uint64_t, std::vector<unsigned char *>> free;  // by rounded size
        uint64_t kept = 0;
        ~State();
    };
    std::shared_ptr<State> state_;
};

}  // namespace mcs
