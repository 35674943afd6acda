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
    // Multi-part values: key i's parts are bufs/sizes [part_first[i],
    // part_first[i+1]); empty when every key has one buffer.
    std::vector<size_t> part_first;
    bool parted() const { return !part_first.empty(); }
    // Bytes of key i's buffers (all its parts).
    uint64_t key_bytes(size_t i) const {
        if (!parted()) return sizes[i];
        uint64_t total = 0;
        for (size_t j = part_first[i]; j < part_first[i + 1]; j++) total += sizes[j];
        return total;
    }
    int64_t *results = nullptr;
    const void **values = nullptr;                  // GET_BUFFER only
    std::shared_ptr<const ReplicaOptions> replica;  // PUT / UPSERT
    Lane *lane = nullptr;
    Clock::time_point t0;
    std::atomic<uint32_t> remaining{0};

    std::mutex mu;        // guards the fields below
    int status = 0;       // the batch as a whole did not run
    int first_error = 0;  // the first per-key error
    uint32_t n_failed = 0;
    std::string message;
    std::vector<std::shared_ptr<void>> holds;  // GET_BUFFER: what keeps values valid
    // MCS_FLAG_LAND: the memory `bufs` point into (the engine's landing pool),
    // and the caller's buffers, one per entry of `bufs`, its bytes go to.
    std::shared_ptr<unsigned char> landing;
    std::vector<void *> land_to;
    bool sync = false;       // a caller waits in mcs_client_run()
    bool abandoned = false;  // ... and stopped waiting: post a completion
    bool withdrawn = false;  // submitted, landed, withdrawn: copy nothing more
    // Set under `mu` for the waiting caller; atomic so that it can poll it
    // without `mu` first (spin.hpp).
    std::atomic<bool> done{false};
    std::condition_variable cv;

    // Guarded by the lane's mutex (Lane::abandon and the workers).
    uint32_t running_tiles = 0;  // tiles of this batch inside Mooncake now
    bool caller_gone = false;    // Lane::abandon() saw it
};

struct Tile {
    std::shared_ptr<Batch> batch;
    size_t begin = 0, end = 0;
};

class Engine;

// At most `workers` tiles run at once, counting batches run inline by
// mcs_client_run().
class Lane {
public:
    Lane(Engine *engine, int id, uint32_t workers, uint32_t capacity, int32_t wait_ms);
    ~Lane();
    void start();
    // Reserves room for one batch, waiting per the queue policy.
    int admit();
    // Queues tiles of an admitted batch.
    void push(std::vector<Tile> &&tiles);
    // Takes a worker slot for the calling thread to run `t` if one is idle,
    // nothing is queued and `t` may run now (see runnable); the caller must
    // then call release_slot(t).
    bool try_take_slot(const Tile &t);
    void release_slot(const Tile &t);
    // For a call run on the caller's thread without a batch (Engine::run_one):
    // admits it and takes a worker slot in one lock, when the lane has room, an
    // idle slot, nothing queued and (a small read) no other small read of `op`
    // running; false otherwise (the caller takes the general path).
    bool enter_direct(int op, bool small);
    // Gives the slot back and counts the call as finished() counts a batch.
    void exit_direct(int op, bool small, double latency_us, bool failed);
    // The caller of a timed batch stopped waiting (Engine::submit): its tiles
    // still queued are taken out and returned, for the caller to complete
    // unrun, so the queue holds no work nobody waits for.  A running tile
    // keeps its worker (and, a small read, the lane's turn for small reads)
    // until Mooncake returns: a Mooncake call cannot be cancelled.
    struct Abandoned {
        std::vector<Tile> withdrawn;
        uint32_t workers = 0;  // the lane's, and of them,
        uint32_t held = 0;     // running tiles of batches whose callers are gone
    };
    Abandoned abandon(const std::shared_ptr<Batch> &b);
    // The background batch `id` if a tile of it is queued here, else null.
    std::shared_ptr<Batch> queued_batch(uint64_t id);
    // Records a finished batch (its pending slot is freed).
    void finished(double latency_us, bool failed, size_t keys);
    // Lets the workers finish everything queued, then joins them.
    void stop();
    void stats(mcs_lane_stats *out);
    uint32_t workers() const { return workers_; }
    int id() const { return id_; }

private:
    void worker_loop(int me);
    // Small reads (merge candidates) of one operation run one Mooncake call at
    // a time per lane: those arriving meanwhile wait in the queue and go
    // together in the next call.  Many threads' small gets then cost a few
    // merged round trips instead of one busy-waiting Mooncake call each
    // (which, on few cores, starve Mooncake's own I/O threads).
    bool small(const Tile &t) const;
    bool runnable(const Tile &t) const;
    void take(const Tile &t);  // mu_ held: counts a running tile
    void give(const Tile &t);  // mu_ held: uncounts it
    enum class Wake { kNone, kOne, kAll };
    // mu_ held: the workers a freed slot concerns; `looping`: the thread that
    // freed it is a worker about to look at the queue itself.
    Wake wake_after_give(bool looping) const;
    // Whom a wake-up reaches: for kOne, the worker that went idle last (its
    // CPU and caches warm; a one-at-a-time caller keeps meeting the same
    // worker), taken off the idle stack under mu_.
    struct Pick {
        Wake kind = Wake::kNone;
        int worker = -1;
    };
    Pick choose(Wake w);  // mu_ held
    void notify(Pick p);  // mu_ released: wakes them
    // The first queued tile that may run now (mu_ held), or queue_.end().
    std::deque<Tile>::iterator next_runnable();
    // Moves the queued tiles that can share `first`'s Mooncake call into
    // `group` (with `first` at its front).  Called with mu_ held.
    void gather_mergeable(Tile &first, std::vector<Tile> &group);

    Engine *engine_;
    int id_;
    uint32_t workers_;
    uint32_t capacity_;
    int32_t wait_ms_;
    std::mutex mu_;
    std::condition_variable cv_space_;
    // One condition variable per worker, and the idle ones, last idle at the
    // back (guarded by mu_): a wake-up goes to the warmest idle worker rather
    // than to whichever the condition variable picks, which rotated one caller's
    // calls across every worker, each woken cold, often on the other CPU.
    std::deque<std::condition_variable> cv_workers_;
    std::vector<int> idle_;
    std::deque<Tile> queue_;
    uint32_t running_ = 0;
    // Workers whose call has returned and whose batch's end has been posted
    // (finished()), not yet back at the queue: a caller woken by that end
    // often queues its next call before the worker is back, and the call is
    // left to it rather than to a sleeping worker, woken cold (mu_).
    uint32_t finishing_ = 0;
    uint32_t small_running_[8] = {};  // per op: small reads in Mooncake now
    uint32_t pending_ = 0;
    uint32_t space_waiters_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
    uint64_t submitted_ = 0, completed_ = 0, failed_ = 0, keys_ = 0, rejected_ = 0;
    uint64_t merged_calls_ = 0;
    uint32_t abandoned_running_ = 0;  // running tiles whose batch's caller is gone
    uint64_t withdrawn_ = 0;          // tiles taken out of the queue by abandon()
    Histogram hist_;
};

}  // namespace mcs
