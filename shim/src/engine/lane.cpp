// Lanes: worker threads serving a FIFO of tiles, merging small reads that
// wait together, with the bounded-queue admission policy and per-lane
// counters; and the latency histogram they keep.
#include <algorithm>
#include <cmath>

#include "engine.hpp"

namespace mcs {

// ---------------------------------------------------------------- Histogram

void Histogram::add(double us) {
    if (us < 0) us = 0;
    int idx = 0;
    if (us >= 1.0) {
        int e = 0;
        double m = std::frexp(us, &e);  // us = m * 2^e, m in [0.5, 1)
        idx = 4 * (e - 1) + std::min(3, int((m - 0.5) * 8.0));
    }
    idx = std::clamp(idx, 0, kBuckets - 1);
    buckets_[idx]++;
    count_++;
    sum_ += us;
    max_ = std::max(max_, us);
}

double Histogram::percentile(double p) const {
    if (!count_) return 0.0;
    uint64_t want = uint64_t(std::ceil(p / 100.0 * double(count_)));
    if (want == 0) want = 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; i++) {
        seen += buckets_[i];
        if (seen >= want) {
            // upper edge of bucket i
            int e = i / 4 + 1;
            double m = 0.5 + (i % 4 + 1) / 8.0;
            return std::min(std::ldexp(m, e), max_);
        }
    }
    return max_;
}

// --------------------------------------------------------------------- Lane

namespace {
// The lane whose worker the calling thread is, and the batch ends it posted
// since it last looked at that lane's queue (Lane::finishing_).
thread_local Lane *t_worker_of = nullptr;
thread_local uint32_t t_finishing = 0;
}  // namespace

Lane::Lane(Engine *engine, int id, uint32_t workers, uint32_t capacity, int32_t wait_ms)
    : engine_(engine), id_(id), workers_(workers), capacity_(capacity), wait_ms_(wait_ms) {}

Lane::~Lane() {
    stop();
}

void Lane::start() {
    cv_workers_.resize(workers_);
    for (uint32_t i = 0; i < workers_; i++)
        threads_.emplace_back([this, i] { worker_loop(int(i)); });
}

int Lane::admit() {
    std::unique_lock<std::mutex> lk(mu_);
    if (stopping_) return MCS_E_CLOSED;
    auto has_room = [this] { return pending_ < capacity_ || stopping_; };
    if (!has_room()) {
        if (wait_ms_ == 0) {
            rejected_++;
            return MCS_E_QUEUE_FULL;
        }
        space_waiters_++;
        bool room = true;
        if (wait_ms_ < 0)
            cv_space_.wait(lk, has_room);
        else
            room = cv_space_.wait_for(lk, std::chrono::milliseconds(wait_ms_), has_room);
        space_waiters_--;
        if (!room) {
            rejected_++;
            return MCS_E_QUEUE_FULL;
        }
        if (stopping_) return MCS_E_CLOSED;
    }
    pending_++;
    submitted_++;
    return MCS_OK;
}

void Lane::push(std::vector<Tile> &&tiles) {
    // A worker is woken only when it could run something now: a free slot and
    // a runnable tile.  A small read queued behind a running one waits for
    // that one to end, and whoever ends it wakes a worker (wake_after_give).
    // Waking for nothing costs the sleeper a context switch and the lane a
    // contended mutex, per call: with 8 threads of one-key exists, most of
    // the engine's futex calls.
    Pick w;
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto &t : tiles) queue_.push_back(std::move(t));
        // One tile while a worker is on its way back to the queue: that
        // worker takes it (warm, and with no wake-up at all).
        const bool left_to_finishing = tiles.size() == 1 && finishing_ > 0;
        if (running_ < workers_ && !left_to_finishing && next_runnable() != queue_.end())
            w = choose(tiles.size() == 1 ? Wake::kOne : Wake::kAll);
    }
    notify(w);
}

static_assert(kOps <= 8, "small_running_ holds one counter per op");

bool Lane::small(const Tile &t) const {
    return engine_->coalesce_keys() > 1 && Engine::mergeable(t);
}

bool Lane::runnable(const Tile &t) const {
    return !small(t) || small_running_[t.batch->op] == 0;
}

void Lane::take(const Tile &t) {
    running_++;
    if (small(t)) small_running_[t.batch->op]++;
}

void Lane::give(const Tile &t) {
    running_--;
    if (small(t)) small_running_[t.batch->op]--;
}

bool Lane::try_take_slot(const Tile &t) {
    std::lock_guard<std::mutex> lk(mu_);
    if (running_ < workers_ && queue_.empty() && runnable(t)) {
        take(t);
        return true;
    }
    return false;
}

void Lane::release_slot(const Tile &t) {
    // Waking an idle worker for nothing costs a context switch per call, so
    // only when something is queued (or a stopping lane drained).
    Pick w;
    {
        std::lock_guard<std::mutex> lk(mu_);
        give(t);
        w = choose(wake_after_give(false));
    }
    notify(w);
}

std::deque<Tile>::iterator Lane::next_runnable() {
    size_t scanned = 0;
    for (auto it = queue_.begin(); it != queue_.end() && scanned < 256; ++it, ++scanned)
        if (runnable(*it)) return it;
    return queue_.end();
}

bool Lane::enter_direct(int op, bool small) {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ || pending_ >= capacity_ || running_ >= workers_ || !queue_.empty() ||
        (small && small_running_[op] > 0))
        return false;
    pending_++;
    submitted_++;
    running_++;
    if (small) small_running_[op]++;
    return true;
}

void Lane::exit_direct(int op, bool small, double latency_us, bool failed) {
    Pick w;
    bool wake_space;
    {
        std::lock_guard<std::mutex> lk(mu_);
        pending_--;
        completed_++;
        if (failed) failed_++;
        keys_++;
        hist_.add(latency_us);
        running_--;
        if (small) small_running_[op]--;
        w = choose(wake_after_give(false));
        wake_space = space_waiters_ > 0;
    }
    notify(w);
    if (wake_space) cv_space_.notify_one();
}

void Lane::finished(double latency_us, bool failed, size_t keys) {
    bool wake;
    {
        std::lock_guard<std::mutex> lk(mu_);
        pending_--;
        completed_++;
        if (failed) failed_++;
        keys_ += keys;
        hist_.add(latency_us);
        wake = space_waiters_ > 0;
        if (t_worker_of == this) {  // a worker, which looks at the queue next
            finishing_++;
            t_finishing++;
        }
    }
    if (wake) cv_space_.notify_one();
}

void Lane::worker_loop(int me) {
    t_worker_of = this;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        std::deque<Tile>::iterator next;
        auto ready = [this, &next] {
            if (queue_.empty()) return stopping_;
            return running_ < workers_ && (next = next_runnable()) != queue_.end();
        };
        while (!ready()) {
            idle_.push_back(me);
            cv_workers_[size_t(me)].wait(lk);
            // Taken off the stack by whoever woke it; not after a spurious wake-up.
            auto it = std::find(idle_.begin(), idle_.end(), me);
            if (it != idle_.end()) idle_.erase(it);
        }
        if (queue_.empty()) return;  // stopping, and nothing left to run
        Tile tile = std::move(*next);
        queue_.erase(next);
        // Small reads waiting behind this one go along in the same Mooncake
        // call: one round trip instead of one each.
        std::vector<Tile> group;
        gather_mergeable(tile, group);
        const Tile &first = group.empty() ? tile : group.front();
        take(first);
        const int op = first.batch->op;
        const bool was_small = small(first);
        // The batches of this call: abandon() counts its tiles as held for
        // callers that are gone.
        std::vector<std::shared_ptr<Batch>> in_call;
        if (group.empty())
            in_call.push_back(tile.batch);
        else
            for (const Tile &t : group) in_call.push_back(t.batch);
        for (auto &b : in_call) b->running_tiles++;
        lk.unlock();
        if (group.empty()) {
            engine_->run_tile(tile);
            tile.batch.reset();
        } else {
            engine_->run_merged(group);
            group.clear();
        }
        lk.lock();
        running_--;
        if (was_small) small_running_[op]--;
        for (auto &b : in_call) {
            b->running_tiles--;
            if (b->caller_gone) abandoned_running_--;
        }
        finishing_ -= t_finishing;
        t_finishing = 0;
        Pick w = choose(wake_after_give(true));
        lk.unlock();
        in_call.clear();  // the last references may free batches: not under mu_
        notify(w);
        lk.lock();
    }
}

Lane::Abandoned Lane::abandon(const std::shared_ptr<Batch> &b) {
    Abandoned out;
    std::lock_guard<std::mutex> lk(mu_);
    if (!b->caller_gone) {
        b->caller_gone = true;
        abandoned_running_ += b->running_tiles;
    }
    for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->batch == b) {
            out.withdrawn.push_back(std::move(*it));
            it = queue_.erase(it);
        } else {
            ++it;
        }
    }
    withdrawn_ += out.withdrawn.size();
    out.workers = workers_;
    out.held = abandoned_running_;
    return out;
}

std::shared_ptr<Batch> Lane::queued_batch(uint64_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Tile &t : queue_)
        if (t.batch->id == id && !t.batch->sync) return t.batch;
    return nullptr;
}

// mu_ held.  A tile just stopped running: whom to wake (Lane::notify, once
// mu_ is released).  A worker for what is queued (it may have been waiting
// for this tile's small read to end), unless the thread that freed the slot
// is a worker that takes the one queued tile itself next.  When a stopping
// lane has drained, every worker asleep on a queue it could not run from
// must see the drain and leave: stop() woke them once, before the queue
// emptied, and nothing else would.
Lane::Wake Lane::wake_after_give(bool looping) const {
    if (queue_.size() > (looping ? 1u : 0u)) return Wake::kOne;
    return stopping_ ? Wake::kAll : Wake::kNone;
}

// mu_ not held: a worker woken while the waker still holds the mutex would
// only block on it again (a second context switch per wake-up, which on two
// cores is most of a small call).  The decision was made under mu_, and a
// waiter checks its condition under mu_ before it sleeps, so nothing is lost.
Lane::Pick Lane::choose(Wake w) {
    Pick p;
    if (w == Wake::kAll) {
        p.kind = Wake::kAll;
        idle_.clear();  // each woken worker looks at the queue, and sleeps again if idle
    } else if (w == Wake::kOne && !idle_.empty()) {
        // None idle: every worker is running, and each looks at the queue when
        // its tile ends, before it sleeps.
        p.kind = Wake::kOne;
        p.worker = idle_.back();
        idle_.pop_back();
    }
    return p;
}

void Lane::notify(Pick p) {
    if (p.kind == Wake::kOne)
        cv_workers_[size_t(p.worker)].notify_one();
    else if (p.kind == Wake::kAll)
        for (auto &cv : cv_workers_) cv.notify_all();
}

void Lane::gather_mergeable(Tile &first, std::vector<Tile> &group) {
    uint32_t limit = engine_->coalesce_keys();
    if (limit <= 1 || queue_.empty() || !Engine::mergeable(first)) return;
    const int op = first.batch->op;
    size_t keys = first.end - first.begin;
    size_t scanned = 0;
    for (auto it = queue_.begin(); it != queue_.end() && keys < limit && scanned < 256; scanned++) {
        size_t k = it->end - it->begin;
        if (Engine::mergeable(*it) && it->batch->op == op && keys + k <= limit) {
            if (group.empty()) group.push_back(std::move(first));
            keys += k;
            group.push_back(std::move(*it));
            it = queue_.erase(it);
        } else {
            ++it;
        }
    }
    if (!group.empty()) merged_calls_++;
}

void Lane::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stopping_ = true;
        idle_.clear();
    }
    for (auto &cv : cv_workers_) cv.notify_all();
    cv_space_.notify_all();
    for (auto &t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

void Lane::stats(mcs_lane_stats *out) {
    std::lock_guard<std::mutex> lk(mu_);
    out->workers = workers_;
    out->queued = uint32_t(queue_.size());
    out->running = running_;
    out->pending = pending_;
    out->submitted = submitted_;
    out->completed = completed_;
    out->failed = failed_;
    out->keys = keys_;
    out->rejected = rejected_;
    out->mean_us = hist_.mean();
    out->p50_us = hist_.percentile(50);
    out->p90_us = hist_.percentile(90);
    out->p99_us = hist_.percentile(99);
    out->max_us = hist_.max();
    out->merged = merged_calls_;
    out->abandoned = abandoned_running_;
    out->withdrawn = withdrawn_;
}

}  // namespace mcs
