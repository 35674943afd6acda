// The registered L1 region: registration in blocks with newest-first
// rollback, and the per-buffer containment check transfers must pass.
#include "l1.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace mcs {

void L1Region::register_region(Backend &backend, void *ptr, uint64_t size, uint64_t max_block) {
    if (!ptr) throw Error(MCS_E_INVALID_ARG, "L1 pointer is NULL");
    if (!size) throw Error(MCS_E_INVALID_ARG, "L1 size is zero");
    if (!max_block) {
        max_block = uint64_t(1) << 40;
        if (const char *env = std::getenv("MC_MAX_MR_SIZE")) {
            char *end = nullptr;
            unsigned long long v = std::strtoull(env, &end, 10);
            if (end != env && v > 0) max_block = v;
        }
    }
    std::unique_lock<std::shared_mutex> lk(mu_);
    if (!blocks_.empty())
        throw Error(MCS_E_STATE, "an L1 region is already registered; unregister it first");
    char *base = static_cast<char *>(ptr);
    uint64_t off = 0;
    while (off < size) {
        uint64_t len = std::min(max_block, size - off);
        int rc = backend.register_buffer(base + off, len);
        if (rc != 0) {
            size_t done = blocks_.size();
            unregister_locked(backend);
            throw Error(rc, "registering L1 block #" + std::to_string(done) + " (offset " +
                                std::to_string(off) + ", " + std::to_string(len) +
                                " bytes) failed: " + describe(rc) +
                                "; the blocks already registered were unregistered");
        }
        blocks_.push_back({base + off, len});
        off += len;
    }
    registered_.store(true);
}

int L1Region::unregister_locked(Backend &backend) {
    registered_.store(false);
    int first = 0;
    while (!blocks_.empty()) {
        int rc = backend.unregister_buffer(blocks_.back().ptr);
        if (rc && !first) first = rc;
        blocks_.pop_back();
    }
    return first;
}

int L1Region::unregister_all(Backend &backend) {
    std::unique_lock<std::shared_mutex> lk(mu_);
    return unregister_locked(backend);
}

uint32_t L1Region::blocks() {
    std::shared_lock<std::shared_mutex> lk(mu_);
    return uint32_t(blocks_.size());
}

int L1Region::check(const std::vector<void *> &bufs, const std::vector<size_t> &sizes,
                    std::string &msg) {
    std::shared_lock<std::shared_mutex> lk(mu_);
    if (blocks_.empty()) return MCS_OK;
    for (size_t i = 0; i < bufs.size(); i++) {
        auto p = static_cast<char *>(bufs[i]);
        auto it = std::upper_bound(blocks_.begin(), blocks_.end(), p,
                                   [](char *v, const Block &blk) { return v < blk.ptr; });
        bool ok = false;
        if (it != blocks_.begin()) {
            const Block &blk = *(it - 1);
            uint64_t off = uint64_t(p - blk.ptr);
            ok = off < blk.size && sizes[i] <= blk.size - off;
        }
        if (!ok) {
            msg = "buffer #" + std::to_string(i) + " (" + std::to_string(sizes[i]) +
                  " bytes) is not inside one registered L1 block: with L1 registered, "
                  "every transfer buffer must lie within a single block";
            return MCS_E_OUTSIDE_L1;
        }
    }
    return MCS_OK;
}

int L1Region::check_one(void *buf, size_t size, std::string &msg) {
    if (!registered_.load()) return MCS_OK;  // no lock for the common case: no L1
    return check(std::vector<void *>{buf}, std::vector<size_t>{size}, msg);
}

}  // namespace mcs
