// Lanes: a FIFO of tiles served by a lane's own worker threads, the batches
// they run, and the latency histogram a lane keeps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "backend.hpp"

namespace mcs {

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

class Lane;

// A batch accepted by submit(): its inputs (keys and sizes copied, buffers
// and result arrays borrowed), and the count of tiles still running.
struct Batch {
    uint64_t id = 0;
    int op = 0;
    int flags = 0;
    StrVec keys;
    std::vector<void *> bufs;
    std::vector<size_t> sizes;
    int64_t *results = nullptr;
    const void **values = nullptr;  // GET_BUFFER only
    const void *rcfg = nullptr;
    Lane *lane = nullptr;
    Clock::time_point t0;
    std::atomic<uint32_t> remaining{0};

    std::mutex mu;        // guards the fields below
    int status = 0;       // the batch as a whole did not run
    int first_error = 0;  // the first per-key error
    uint32_t n_failed = 0;
    std::string message;
    std::vector<std::shared_ptr<void>> holds;  // GET_BUFFER: what keeps values valid
    bool sync = false;                         // a caller waits in mcs_run()
    bool abandoned = false;                    // ... and stopped waiting: post a completion
    bool done = false;
    std::condition_variable cv;
};

struct Tile {
    std::shared_ptr<Batch> batch;
    size_t begin = 0, end = 0;
};

class Engine;

// At most `workers` tiles run at once, counting batches run inline by
// mcs_run().
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
    // Moves the queued tiles that can share `first`'s Mooncake call into
    // `group` (with `first` at its front).  Called with mu_ held.
    void gather_mergeable(Tile &first, std::vector<Tile> &group);

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

}  // namespace mcs
