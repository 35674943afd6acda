// One key run on the calling thread, without a batch: the path of the small
// calls whose fixed cost matters (mcs_client_run_one).  It checks what
// Engine::accept checks for a batch of one, admits the call to its lane and
// takes a worker slot in one lock, calls the backend, and counts the call in
// the lane's and the operation's counters as a batch would be counted.  What
// it does not do (a skip-existing put, a full lane, queued work, a small read
// while another runs: see Lane::enter_direct) goes the general way.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine.hpp"

namespace mcs {

namespace {

bool takes_buffer(int op) {
    return op == MCS_OP_GET || op == MCS_OP_PUT || op == MCS_OP_UPSERT;
}

}  // namespace

bool Engine::direct_ok(int op, int flags) const {
    if (op < 0 || op >= kOps || op == MCS_OP_GET_BUFFER) return false;
    if (op == MCS_OP_REMOVE) return (flags & ~MCS_FLAG_FORCE) == 0;
    return flags == 0;
}

int Engine::run_one(int op, int flags, const char *key, uint64_t key_len, void *buf, uint64_t size,
                    int64_t *result) {
    if (!direct_ok(op, flags) || !key_len || key_len > (1u << 30) ||
        std::memchr(key, '\0', size_t(key_len)) || takes_buffer(op) != (buf != nullptr) ||
        (buf && !size) || (!buf && size))
        return run_one_batch(op, flags, key, key_len, buf, size, result);  // it says why
    if (buf) {
        std::string msg;
        if (int rc = l1_.check_one(buf, size_t(size), msg)) throw Error(rc, msg);
    }
    std::shared_ptr<const ReplicaOptions> replica;
    if (op == MCS_OP_PUT || op == MCS_OP_UPSERT) {
        std::lock_guard<std::mutex> lk(replica_mu_);
        replica = default_replica_;
    }
    if (replica) backend_->check_replica(*replica);
    Lane *lane = route_[op];
    const bool small = (op == MCS_OP_GET || op == MCS_OP_EXISTS) && coalesce_keys_ > 1;
    if (!lane->enter_direct(op, small))
        return run_one_batch(op, flags, key, key_len, buf, size, result);
    const Clock::time_point t0 = Clock::now();
    const std::string k(key, size_t(key_len));
    int64_t r = MCS_E_INTERNAL;
    std::string err;
    try {
        switch (op) {
            case MCS_OP_EXISTS: r = backend_->exists_one(k); break;
            case MCS_OP_SIZE: r = backend_->size(k); break;
            case MCS_OP_GET: r = backend_->get_one(k, buf, size_t(size)); break;
            case MCS_OP_REMOVE: r = backend_->remove_one(k, flags & MCS_FLAG_FORCE); break;
            default:  // PUT, UPSERT
                r = backend_->put_one(k, buf, size_t(size), *replica, op == MCS_OP_UPSERT);
                break;
        }
    } catch (const std::exception &e) {
        err = std::string("exception in Mooncake call: ") + e.what();
    } catch (...) {
        err = "unknown exception in Mooncake call";
    }
    if (!err.empty()) r = MCS_E_INTERNAL;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const bool failed = !err.empty() || !key_ok(r);
    lane->exit_direct(op, small, us, failed);
    count_one(op, r, size_t(size), us, failed, err.empty() ? 0 : MCS_E_INTERNAL);
    *result = r;
    if (!err.empty()) throw Error(MCS_E_INTERNAL, err);
    return MCS_OK;
}

int Engine::run_one_batch(int op, int flags, const char *key, uint64_t key_len, void *buf,
                          uint64_t size, int64_t *result) {
    const uint64_t offsets[2] = {0, key_len};
    void *const bufs[1] = {buf};
    const uint64_t sizes[1] = {size};
    mcs_batch b{};
    b.struct_size = sizeof b;
    b.op = op;
    b.flags = flags;
    b.n = 1;
    b.key_data = key;
    b.key_bytes = key_len;
    b.key_offsets = offsets;
    if (buf || size) {
        b.bufs = bufs;
        b.sizes = sizes;
    }
    b.results = result;
    return submit(b, true, nullptr);
}

void Engine::count_one(int op, int64_t r, size_t size, double us, bool failed, int status) {
    // Bucket i counts calls under 2^i us: the bit length of the whole microseconds.
    const auto whole = uint64_t(us);
    const int bits = whole ? 64 - __builtin_clzll(whole) : 0;
    const int bucket = std::min(kOpBuckets - 1, bits);
    std::lock_guard<std::mutex> lk(stats_mu_);
    OpCounters &o = ops_[op];
    o.calls++;
    o.keys++;
    o.sum_us += us;
    o.buckets[bucket]++;
    if (status) {
        o.failed_calls++;
        o.failed_keys++;
        o.add_error(status, 1);
        return;
    }
    if (r >= 0) {
        if (op == MCS_OP_GET) o.bytes += uint64_t(r);
        if ((op == MCS_OP_PUT || op == MCS_OP_UPSERT) && r == 0) o.bytes += size;
    } else if (!key_ok(r)) {
        o.failed_keys++;
        if (r == kNoAvailableHandle) o.no_space++;
        o.add_error(int(r), 1);
    }
    if (failed) o.failed_calls++;
}

}  // namespace mcs
