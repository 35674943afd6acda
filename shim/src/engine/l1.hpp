// The L1 region a client registered with Mooncake, in blocks, and the check
// that a transfer buffer lies inside one of them.
#pragma once

#include <atomic>
#include <shared_mutex>
#include <string>
#include <vector>

#include "backend.hpp"

namespace mcs {

class L1Region {
public:
    // Registers [ptr, ptr+size) in blocks of at most max_block bytes (0:
    // $MC_MAX_MR_SIZE or 1 TiB), rolling back newest-first on failure.
    void register_region(Backend &backend, void *ptr, uint64_t size, uint64_t max_block);
    // Unregisters every block, newest first; the first failure's code (0 if none).
    int unregister_all(Backend &backend);
    uint32_t blocks();
    // MCS_OK, or MCS_E_OUTSIDE_L1 with msg set, for buffers not inside one block.
    int check(const std::vector<void *> &bufs, const std::vector<size_t> &sizes, std::string &msg);
    // The same for one buffer.
    int check_one(void *buf, size_t size, std::string &msg);

private:
    struct Block {
        char *ptr;
        uint64_t size;
    };
    int unregister_locked(Backend &backend);

    std::shared_mutex mu_;
    std::vector<Block> blocks_;
    std::atomic<bool> registered_{false};  // blocks_ is not empty
};

}  // namespace mcs
