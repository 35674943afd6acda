// Internal declarations of the shim: the store backend interface, the lane
// engine (mcs::Engine) and error helpers.  Nothing here is exported; the C
// ABI lives in capi.cpp and the Mooncake backend in mooncake_backend.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../mcs.h"

namespace mcs {

using StrVec = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr int kObjectNotFound = -704;

const char *error_name(int code);
const char *error_text(int code);
// "NAME (code): text"
std::string describe(int code);

// An error carrying a status code, thrown inside the shim and turned into a
// return code at the C boundary.
struct Error : std::runtime_error {
    int code;
    Error(int c, const std::string &msg) : std::runtime_error(msg), code(c) {}
};

// What the engine needs from a store.  The Mooncake backend forwards to
// mooncake::RealClient; tests of the lane machinery use an in-memory one.
// Methods may be called from several threads at once.
class Backend {
public:
    virtual ~Backend() = default;
    virtual std::vector<int> exists(const StrVec &keys) = 0;
    virtual std::vector<int64_t> get_into(const StrVec &keys, const std::vector<void *> &bufs,
                                          const std::vector<size_t> &sizes) = 0;
    virtual std::vector<int> put_from(const StrVec &keys, const std::vector<void *> &bufs,
                                      const std::vector<size_t> &sizes, const void *rcfg,
                                      bool upsert) = 0;
    virtual std::vector<int> remove(const StrVec &keys, bool force) = 0;
    virtual int64_t size(const std::string &key) = 0;
    virtual int register_buffer(void *ptr, size_t size) = 0;
    virtual int unregister_buffer(void *ptr) = 0;
    // Called once, by Engine::close(), after every worker has stopped.
    virtual void teardown() = 0;
    // Makes teardown() a no-op (the process is about to _exit).
    virtual void skip_teardown() {}
    // The name the store registered this client under ("" if none).
    virtual std::string hostname() { return {}; }
};

// Latency histogram: 4 buckets per power of two of microseconds.
class Histogram {
public:
    void add(double us);
    double percentile(double p) const;
    double mean() const { return count_ ? sum_ / double(count_) : 0.0; }
    double max() const { return max_; }

private:
    static constexpr int kBuckets = 4 * 48;
    uint64_t buckets_[kBuckets] = {};
    uint64_t count_ = 0;
    double sum_ = 0, max_ = 0;
};

struct Batch;

struct Tile {
    std::shared_ptr<Batch> batch;
    size_t begin = 0, end = 0;
};

class Engine;

// One lane: a FIFO of tiles served by its own worker threads.  At most
// `workers` tiles run at once, counting batches run inline by mcs_run().
class Lane {
public:
    Lane(Engine *engine, int id, uint32_t workers, uint32_t capacity, int32_t wait_ms);
    ~Lane();
    void start();
    // Reserves room for one batch, waiting per the queue policy.
    int admit();
    // Queues tiles of an admitted batch.
    void push(std::vector<Tile> &&tiles);
    // Takes a worker slot for the calling thread if one is idle and nothing
    // is queued; the caller must then call release_slot().
    bool try_take_slot();
    void release_slot();
    // Records a finished batch (its pending slot is freed).
    void finished(double latency_us, bool failed, size_t keys);
    // Lets the workers finish everything queued, then joins them.
    void stop();
    void stats(mcs_lane_stats *out);
    uint32_t workers() const { return workers_; }
    int id() const { return id_; }

private:
    void worker_loop();

    Engine *engine_;
    int id_;
    uint32_t workers_;
    uint32_t capacity_;
    int32_t wait_ms_;
    std::mutex mu_;
    std::condition_variable cv_work_, cv_space_;
    std::deque<Tile> queue_;
    uint32_t running_ = 0;
    uint32_t pending_ = 0;
    uint32_t space_waiters_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
    uint64_t submitted_ = 0, completed_ = 0, failed_ = 0, keys_ = 0, rejected_ = 0;
    uint64_t merged_calls_ = 0;
    Histogram hist_;
};

// A batch accepted by submit(): its inputs (keys copied, buffers borrowed),
// one result slot per key, and the count of tiles still running.
struct Batch {
    uint64_t id = 0;
    int op = 0;
    int flags = 0;
    StrVec keys;
    std::vector<void *> bufs;
    std::vector<size_t> sizes;
    int64_t *results = nullptr;
    const void *rcfg = nullptr;
    Lane *lane = nullptr;
    Clock::time_point t0;
    std::atomic<uint32_t> remaining{0};

    std::mutex mu;  // guards the fields below
    int status = 0;
    uint32_t n_failed = 0;
    std::string message;
    bool sync = false;
    bool done = false;
    std::condition_variable cv;
};

struct L1Block {
    char *ptr;
    uint64_t size;
};

// The lanes, batches and completion queue of one client.  Thread-safe.
class Engine {
public:
    Engine(std::unique_ptr<Backend> backend, const mcs_lanes *lanes);
    ~Engine();
    // Throws Error(MCS_E_INVALID_ARG) for a layout the engine refuses.
    static void validate_lanes(const mcs_lanes *lanes);

    // Call bracketing: enter() refuses once close() has begun.
    int enter();
    void leave();

    int submit(int op, const char *const *keys, size_t n, void *const *bufs,
               const uint64_t *sizes, int64_t *results, int flags, const void *rcfg,
               bool sync, uint64_t *id_out);
    int drain(mcs_completion *out, size_t cap);
    int wait(int timeout_ms);
    int fd() const { return efd_; }

    int register_l1(void *ptr, uint64_t size, uint64_t max_block);
    int unregister_l1();
    uint32_t l1_blocks();

    void set_default_rcfg(const void *rcfg) { default_rcfg_.store(rcfg); }
    int lane_stats(int lane, mcs_lane_stats *out);

    // Idempotent.  Waits for calls in progress, runs every accepted batch to
    // completion, joins the workers, unregisters L1, tears the backend down.
    int close();
    // close() without the backend's teardown (for a process about to exit).
    int close_for_exit();
    std::string hostname() { return backend_ ? backend_->hostname() : std::string(); }
    // For a forked child: refuse everything, touch nothing.
    void abandon();
    bool closed() const { return state_.load() != kOpen; }

    // Used by lanes.
    void run_tile(const Tile &tile);
    // Runs several small GET or EXISTS tiles as one backend call.
    void run_merged(std::vector<Tile> &tiles);
    static bool mergeable(const Tile &tile);
    uint32_t coalesce_keys() const { return coalesce_keys_; }
    int tile_workers(int lane_id) const;

private:
    void finish_tile(Batch &b, const int64_t *results, size_t begin, size_t end,
                     const std::string &err);
    void complete(const std::shared_ptr<Batch> &b);
    std::vector<Tile> split(const std::shared_ptr<Batch> &b) const;
    int check_l1(const std::vector<void *> &bufs, const std::vector<size_t> &sizes,
                 std::string &msg);
    int unregister_l1_locked();

    enum State { kOpen = 0, kClosing = 1, kClosed = 2 };

    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Lane> lanes_[MCS_LANE_COUNT];
    Lane *route_[6] = {};  // op -> lane
    uint32_t tile_keys_ = 0;
    uint64_t tile_bytes_ = 0;
    uint32_t coalesce_keys_ = 64;
    std::atomic<const void *> default_rcfg_{nullptr};
    std::atomic<uint64_t> next_id_{1};

    std::atomic<int> state_{kOpen};
    std::mutex calls_mu_;
    std::condition_variable calls_cv_;
    int calls_ = 0;
    std::mutex close_mu_;

    std::mutex cq_mu_;
    std::condition_variable cq_cv_;
    std::deque<mcs_completion> cq_;
    bool signaled_ = false;
    int efd_ = -1;

    std::shared_mutex l1_mu_;
    std::vector<L1Block> l1_;
};

// The Mooncake backend (mooncake_backend.cpp).
int load_mooncake(const char *path, std::string &msg);
bool mooncake_loaded();
int set_log_level(int level);
// &typeid(mooncake::ReplicateConfig), for pybind11's pointer hand-off.
const void *replicate_config_typeid();
// Probes, creates and sets up a RealClient; throws Error on failure.
std::unique_ptr<Backend> make_mooncake_backend(const StrVec &keys, const StrVec &values,
                                               int probe_timeout_ms);

}  // namespace mcs
