// The engine of one client: its lanes, the batches they run, the completion
// queue signalled through an eventfd, values held for GET_BUFFER batches,
// per-operation counters and the L1 region.  Thread-safe.
#pragma once

#include <unordered_map>

#include "l1.hpp"
#include "landing.hpp"
#include "lane.hpp"
#include "replica.hpp"

namespace mcs {

constexpr int kOps = MCS_OP_GET_BUFFER + 1;
constexpr int kOpBuckets = 24;
constexpr int kOpErrors = 16;

// Per-operation counters (mcs_op_stats without the caller's struct_size).
struct OpCounters {
    uint64_t calls = 0, keys = 0, failed_calls = 0, failed_keys = 0, bytes = 0;
    uint64_t timeouts = 0, no_space = 0;
    double sum_us = 0;
    uint64_t buckets[kOpBuckets] = {};
    int32_t error_codes[kOpErrors] = {};
    uint64_t error_keys[kOpErrors] = {};
    void add_error(int code, uint64_t keys);
};

// A per-key result that is not an error: a value, a size, absent, unread.
inline bool key_ok(int64_t r) {
    return r >= 0 || r == kObjectNotFound || r == MCS_GET_UNREAD;
}

// A key as error messages quote it (long keys cut).
inline std::string quote_key(const std::string &k) {
    std::string s = k.size() > 64 ? k.substr(0, 61) + "..." : k;
    return "'" + s + "'";
}

class Engine {
public:
    Engine(std::unique_ptr<Backend> backend, const mcs_lanes *lanes);
    ~Engine();
    // Throws Error(MCS_E_INVALID_ARG) for a layout the engine refuses.
    static void validate_lanes(const mcs_lanes *lanes);

    // Call bracketing: enter() refuses once close() has begun.
    int enter();
    void leave();

    // Accepts a batch (already read into a full-size mcs_batch).  sync: waits
    // for it (up to in.timeout_ms when > 0) and returns MCS_OK once it ran.
    int submit(const mcs_batch &in, bool sync, uint64_t *id_out);
    // One key on the calling thread, no deadline (mcs_client_run_one; direct.cpp):
    // without a batch when it can, else as a batch of one.
    int run_one(int op, int flags, const char *key, uint64_t key_len, void *buf, uint64_t size,
                int64_t *result);
    int release(uint64_t id);
    // Takes back what of background batch `id` is still queued; the keys withdrawn.
    int withdraw(uint64_t id);
    int drain(mcs_completion *out, size_t cap, size_t elem_size);
    int wait(int timeout_ms);
    int fd() const { return efd_; }

    int register_l1(void *ptr, uint64_t size, uint64_t max_block);
    int unregister_l1();
    uint32_t l1_blocks() { return l1_.blocks(); }
    // Mooncake's register_buffer / unregister_buffer, passed through
    // (registered.cpp); its code is returned.
    int register_buffer(void *ptr, uint64_t size);
    int unregister_buffer(void *ptr);
    // mcs_client_get_into_ranges (registered.cpp): checks, one backend call on
    // the calling thread, counted as a GET.
    int get_into_ranges(const mcs_ranges &r);
    // mcs_client_session (session.cpp): checks, one backend call on the
    // calling thread.
    int session(const mcs_session &s);

    // The replica options of PUT / UPSERT batches that bring none (checked
    // against the backend; group ids are refused: they are per batch).
    void set_default_replica(const ReplicaOptions &opts);
    int lane_stats(int lane, mcs_lane_stats *out);
    int op_stats(int op, OpCounters *out);

    // Idempotent.  Waits for calls in progress, runs every accepted batch to
    // completion, joins the workers, releases held values, unregisters L1 and
    // tears the backend down, waiting for that at most backend->teardown_wait()
    // (the rest goes on in the background: reaper.hpp).  The backend is not
    // touched by the engine afterwards.
    int close();
    // close() without the backend's teardown (for a process about to exit).
    int close_for_exit();
    std::string hostname() { return backend_ ? backend_->hostname() : std::string(); }
    // Cluster-wide calls, run on the calling thread.
    int64_t remove_all(bool force) { return backend_->remove_all(force); }
    int64_t remove_by_regex(const std::string &pattern, bool force) {
        return backend_->remove_by_regex(pattern, force);
    }
    int health_check() { return closed() ? 1 : backend_->health_check(); }
    std::vector<std::string> replica_desc(const StrVec &keys) {
        return backend_->replica_desc(keys);
    }
    // For a forked child: refuse everything, touch nothing.
    void abandon();
    bool closed() const { return state_.load() != kOpen; }

    // Used by lanes.
    void run_tile(const Tile &tile);
    // Runs several small GET, GET_BUFFER or EXISTS tiles as one backend call.
    void run_merged(std::vector<Tile> &tiles);
    static bool mergeable(const Tile &tile);
    uint32_t coalesce_keys() const { return coalesce_keys_; }

private:
    std::shared_ptr<Batch> accept(const mcs_batch &in, bool sync);
    bool direct_ok(int op, int flags) const;
    int run_one_batch(int op, int flags, const char *key, uint64_t key_len, void *buf,
                      uint64_t size, int64_t *result);
    void count_one(int op, int64_t r, size_t size, double us, bool failed, int status);

    // Folds a tile's outcome into its batch; a landed GET's bytes are copied
    // to the caller's buffers here, while the caller still waits (a blocking
    // call not timed out, a submitted batch not withdrawn).
    void finish_tile(Batch &b, size_t begin, size_t end, const std::string &err);
    // GET / PUT / UPSERT of keys [begin, end) of a batch with multi-part values.
    void run_parts(Batch &b, size_t begin, size_t end, const StrVec *groups, std::string &err);
    void withdraw_tile(const Tile &t);
    void complete(const std::shared_ptr<Batch> &b);
    void count(const Batch &b, double us, bool failed);
    std::vector<Tile> split(const std::shared_ptr<Batch> &b) const;

    enum State { kOpen = 0, kClosing = 1, kClosed = 2 };

    // Shared with a teardown that close() leaves running in the background.
    std::shared_ptr<Backend> backend_;
    std::unique_ptr<Lane> lanes_[MCS_LANE_COUNT];
    Lane *route_[kOps] = {};  // op -> lane
    uint32_t tile_keys_ = 0;
    uint64_t tile_bytes_ = 0;
    uint32_t coalesce_keys_ = 64;
    std::mutex replica_mu_;
    std::shared_ptr<const ReplicaOptions> default_replica_ =
        std::make_shared<const ReplicaOptions>();
    std::atomic<uint64_t> next_id_{1};

    std::atomic<int> state_{kOpen};
    std::mutex calls_mu_;
    std::condition_variable calls_cv_;
    std::atomic<int> calls_{0};
    std::mutex close_mu_;

    std::mutex cq_mu_;
    std::condition_variable cq_cv_;
    std::deque<mcs_completion> cq_;
    bool signaled_ = false;
    int efd_ = -1;

    LandingPool landing_;  // MCS_FLAG_LAND batches read into its buffers
    // Submitted MCS_FLAG_LAND batches until they complete, by id: withdraw()
    // finds one running and stops its copies to the caller's buffers.
    std::mutex landed_mu_;
    std::unordered_map<uint64_t, std::weak_ptr<Batch>> landed_;

    std::mutex holds_mu_;
    std::unordered_map<uint64_t, std::vector<std::shared_ptr<void>>> holds_;

    std::mutex stats_mu_;
    OpCounters ops_[kOps];

    L1Region l1_;
};

}  // namespace mcs
