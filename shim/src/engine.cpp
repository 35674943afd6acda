// The lane engine: per-operation lanes of worker threads with a shared-pool
// fallback, batches split into tiles, exactly one completion per batch, and a
// completion queue signalled through an eventfd.  Independent of Mooncake:
// every store call goes through mcs::Backend.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "internal.hpp"

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

Lane::Lane(Engine *engine, int id, uint32_t workers, uint32_t capacity, int32_t wait_ms)
    : engine_(engine), id_(id), workers_(workers), capacity_(capacity), wait_ms_(wait_ms) {}

Lane::~Lane() { stop(); }

void Lane::start() {
    for (uint32_t i = 0; i < workers_; i++) threads_.emplace_back([this] { worker_loop(); });
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
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto &t : tiles) queue_.push_back(std::move(t));
    }
    if (tiles.size() == 1)
        cv_work_.notify_one();
    else
        cv_work_.notify_all();
}

bool Lane::try_take_slot() {
    std::lock_guard<std::mutex> lk(mu_);
    if (running_ < workers_ && queue_.empty()) {
        running_++;
        return true;
    }
    return false;
}

void Lane::release_slot() {
    bool wake;
    {
        std::lock_guard<std::mutex> lk(mu_);
        running_--;
        wake = !queue_.empty();
    }
    // Waking an idle worker for nothing costs a context switch per call.
    if (wake) cv_work_.notify_one();
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
    }
    if (wake) cv_space_.notify_one();
}

void Lane::worker_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        cv_work_.wait(lk, [this] {
            return (!queue_.empty() && running_ < workers_) || (stopping_ && queue_.empty());
        });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        Tile tile = std::move(queue_.front());
        queue_.pop_front();
        // Small GET/EXISTS batches waiting behind this one go along in the same
        // Mooncake call: one round trip instead of one each.
        std::vector<Tile> group;
        uint32_t limit = engine_->coalesce_keys();
        if (limit > 1 && !queue_.empty() && Engine::mergeable(tile)) {
            const int op = tile.batch->op;
            size_t keys = tile.end - tile.begin;
            size_t scanned = 0;
            for (auto it = queue_.begin(); it != queue_.end() && keys < limit && scanned < 256;
                 scanned++) {
                size_t k = it->end - it->begin;
                if (Engine::mergeable(*it) && it->batch->op == op &&
                    keys + k <= limit) {
                    if (group.empty()) group.push_back(std::move(tile));
                    keys += k;
                    group.push_back(std::move(*it));
                    it = queue_.erase(it);
                } else {
                    ++it;
                }
            }
            if (!group.empty()) merged_calls_++;
        }
        running_++;
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
        if (!queue_.empty()) cv_work_.notify_one();
    }
}

void Lane::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stopping_ = true;
    }
    cv_work_.notify_all();
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
}

// ------------------------------------------------------------------- Engine

namespace {

int lane_of_op(int op) {
    switch (op) {
    case MCS_OP_EXISTS:
    case MCS_OP_SIZE: return MCS_LANE_LOOKUP;
    case MCS_OP_GET: return MCS_LANE_RETRIEVE;
    case MCS_OP_PUT:
    case MCS_OP_UPSERT: return MCS_LANE_STORE;
    case MCS_OP_REMOVE: return MCS_LANE_DELETE;
    default: return -1;
    }
}

bool op_has_buffers(int op) {
    return op == MCS_OP_GET || op == MCS_OP_PUT || op == MCS_OP_UPSERT;
}

std::string quote_key(const std::string &k) {
    std::string s = k.size() > 64 ? k.substr(0, 61) + "..." : k;
    return "'" + s + "'";
}

}  // namespace

void Engine::validate_lanes(const mcs_lanes *cfg) {
    if (!cfg) return;
    if (cfg->num_workers > 1024)
        throw Error(MCS_E_INVALID_ARG, "num_workers must be at most 1024");
    if (cfg->queue_capacity > (1u << 24))
        throw Error(MCS_E_INVALID_ARG, "queue_capacity must be at most 16777216");
    if (cfg->coalesce_keys > 65536)
        throw Error(MCS_E_INVALID_ARG, "coalesce_keys must be at most 65536");
    if (cfg->queue_wait_ms < -1)
        throw Error(MCS_E_INVALID_ARG, "queue_wait_ms must be -1 (forever), 0 or positive");
    const uint32_t per[4] = {cfg->lookup, cfg->retrieve, cfg->store, cfg->del};
    for (uint32_t w : per)
        if (w > 1024) throw Error(MCS_E_INVALID_ARG, "lane worker counts must be 0..1024");
}

Engine::Engine(std::unique_ptr<Backend> backend, const mcs_lanes *cfg)
    : backend_(std::move(backend)) {
    validate_lanes(cfg);
    mcs_lanes l{};
    if (cfg) l = *cfg;
    uint32_t shared = l.num_workers ? l.num_workers : 4;
    uint32_t cap = l.queue_capacity ? l.queue_capacity : 1024;
    uint32_t per[4] = {l.lookup, l.retrieve, l.store, l.del};
    tile_keys_ = l.tile_keys;
    tile_bytes_ = l.tile_bytes;
    coalesce_keys_ = l.coalesce_keys ? l.coalesce_keys : 64;

    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0) throw Error(MCS_E_INTERNAL, std::string("eventfd: ") + strerror(errno));

    bool need_shared = false;
    for (int i = 0; i < 4; i++) {
        if (per[i]) {
            lanes_[i] = std::make_unique<Lane>(this, i, per[i], cap, l.queue_wait_ms);
        } else {
            need_shared = true;
        }
    }
    if (need_shared)
        lanes_[MCS_LANE_SHARED] =
            std::make_unique<Lane>(this, MCS_LANE_SHARED, shared, cap, l.queue_wait_ms);
    for (int op = 0; op < 6; op++) {
        int id = lane_of_op(op);
        route_[op] = lanes_[id] ? lanes_[id].get() : lanes_[MCS_LANE_SHARED].get();
    }
    for (auto &lane : lanes_)
        if (lane) lane->start();
}

Engine::~Engine() {
    close();
    if (efd_ >= 0) ::close(efd_);
}

int Engine::enter() {
    std::lock_guard<std::mutex> lk(calls_mu_);
    if (state_.load() != kOpen) return MCS_E_CLOSED;
    calls_++;
    return MCS_OK;
}

void Engine::leave() {
    std::lock_guard<std::mutex> lk(calls_mu_);
    if (--calls_ == 0) calls_cv_.notify_all();
}

int Engine::tile_workers(int lane_id) const {
    return lanes_[lane_id] ? int(lanes_[lane_id]->workers()) : 0;
}

std::vector<Tile> Engine::split(const std::shared_ptr<Batch> &b) const {
    std::vector<Tile> tiles;
    size_t n = b->keys.size();
    // Byte tiles apply to stores only: splitting a read gains nothing over one
    // TCP stream and makes its pieces wait for each other on the retrieve lane.
    bool by_bytes = tile_bytes_ && (b->op == MCS_OP_PUT || b->op == MCS_OP_UPSERT);
    if ((!tile_keys_ || n <= tile_keys_) && !by_bytes) {
        tiles.push_back({b, 0, n});
        return tiles;
    }
    size_t begin = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bool full_keys = tile_keys_ && i - begin >= tile_keys_;
        bool full_bytes = by_bytes && i > begin && bytes + b->sizes[i] > tile_bytes_;
        if (full_keys || full_bytes) {
            tiles.push_back({b, begin, i});
            begin = i;
            bytes = 0;
        }
        if (by_bytes) bytes += b->sizes[i];
    }
    tiles.push_back({b, begin, n});
    return tiles;
}

int Engine::check_l1(const std::vector<void *> &bufs, const std::vector<size_t> &sizes,
                     std::string &msg) {
    std::shared_lock<std::shared_mutex> lk(l1_mu_);
    if (l1_.empty()) return MCS_OK;
    for (size_t i = 0; i < bufs.size(); i++) {
        auto p = static_cast<char *>(bufs[i]);
        auto it = std::upper_bound(l1_.begin(), l1_.end(), p,
                                   [](char *v, const L1Block &blk) { return v < blk.ptr; });
        bool ok = false;
        if (it != l1_.begin()) {
            const L1Block &blk = *(it - 1);
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

int Engine::submit(int op, const char *const *keys, size_t n, void *const *bufs,
                   const uint64_t *sizes, int64_t *results, int flags, const void *rcfg,
                   bool sync, uint64_t *id_out) {
    if (op < 0 || op > MCS_OP_SIZE) throw Error(MCS_E_INVALID_ARG, "unknown op " + std::to_string(op));
    if (n == 0) throw Error(MCS_E_INVALID_ARG, "empty batch: n must be at least 1");
    if (n > (1u << 24)) throw Error(MCS_E_INVALID_ARG, "batch too large (over 16777216 keys)");
    if (!keys) throw Error(MCS_E_INVALID_ARG, "keys is NULL");
    if (!results) throw Error(MCS_E_INVALID_ARG, "results is NULL");
    if (!sync && !id_out) throw Error(MCS_E_INVALID_ARG, "id_out is NULL");
    if (flags & ~(MCS_FLAG_FORCE | MCS_FLAG_SKIP_EXISTING))
        throw Error(MCS_E_INVALID_ARG, "unknown flags " + std::to_string(flags));
    bool with_bufs = op_has_buffers(op);
    if (with_bufs && (!bufs || !sizes))
        throw Error(MCS_E_INVALID_ARG, "bufs and sizes are required for this operation");
    if (!with_bufs && (bufs || sizes))
        throw Error(MCS_E_INVALID_ARG, "bufs and sizes must be NULL for this operation");

    auto b = std::make_shared<Batch>();
    b->op = op;
    b->flags = flags;
    b->results = results;
    b->sync = sync;
    b->keys.reserve(n);
    for (size_t i = 0; i < n; i++) {
        if (!keys[i]) throw Error(MCS_E_INVALID_ARG, "key #" + std::to_string(i) + " is NULL");
        if (!keys[i][0]) throw Error(MCS_E_INVALID_ARG, "key #" + std::to_string(i) + " is empty");
        b->keys.emplace_back(keys[i]);
    }
    if (n > 1) {
        std::unordered_set<std::string_view> seen;
        seen.reserve(n);
        for (const auto &k : b->keys)
            if (!seen.insert(k).second)
                throw Error(MCS_E_DUPLICATE_KEY,
                            "key " + quote_key(k) + " appears more than once in the batch");
    }
    if (with_bufs) {
        b->bufs.assign(bufs, bufs + n);
        b->sizes.assign(sizes, sizes + n);
        for (size_t i = 0; i < n; i++) {
            if (!b->bufs[i])
                throw Error(MCS_E_INVALID_ARG, "buffer #" + std::to_string(i) + " is NULL");
            if (!b->sizes[i])
                throw Error(MCS_E_INVALID_ARG, "size #" + std::to_string(i) + " is zero");
        }
        std::string msg;
        int rc = check_l1(b->bufs, b->sizes, msg);
        if (rc) throw Error(rc, msg);
    }
    if (op == MCS_OP_PUT || op == MCS_OP_UPSERT) {
        b->rcfg = rcfg ? rcfg : default_rcfg_.load();
        if (!b->rcfg)
            throw Error(MCS_E_INVALID_ARG, "no ReplicateConfig given and no default set "
                                           "(mcs_client_set_default_replicate_config)");
    }

    Lane *lane = route_[op];
    b->lane = lane;
    int rc = lane->admit();
    if (rc == MCS_E_QUEUE_FULL)
        throw Error(rc, "lane queue full: its queue_capacity batches are already pending");
    if (rc) throw Error(rc, "client is closing");
    b->id = next_id_.fetch_add(1);
    b->t0 = Clock::now();
    if (id_out) *id_out = b->id;

    std::vector<Tile> tiles = split(b);
    b->remaining.store(uint32_t(tiles.size()));
    if (!sync) {
        lane->push(std::move(tiles));
        return MCS_OK;
    }
    // Synchronous: run the first tile here if the lane has an idle slot.
    Tile mine;
    bool inline_run = lane->try_take_slot();
    if (inline_run) {
        mine = tiles.front();
        tiles.erase(tiles.begin());
    }
    if (!tiles.empty()) lane->push(std::move(tiles));
    if (inline_run) {
        run_tile(mine);
        lane->release_slot();
    }
    std::unique_lock<std::mutex> lk(b->mu);
    b->cv.wait(lk, [&] { return b->done; });
    if (b->status) {
        std::string msg = b->message;
        int st = b->status;
        lk.unlock();
        throw Error(st, msg);
    }
    return MCS_OK;
}

void Engine::run_tile(const Tile &tile) {
    Batch &b = *tile.batch;
    size_t begin = tile.begin, end = tile.end, n = end - begin;
    bool whole = begin == 0 && end == b.keys.size();
    StrVec sub_keys;
    std::vector<void *> sub_bufs;
    std::vector<size_t> sub_sizes;
    if (!whole) {
        sub_keys.assign(b.keys.begin() + begin, b.keys.begin() + end);
        if (!b.bufs.empty()) {
            sub_bufs.assign(b.bufs.begin() + begin, b.bufs.begin() + end);
            sub_sizes.assign(b.sizes.begin() + begin, b.sizes.begin() + end);
        }
    }
    const StrVec &keys = whole ? b.keys : sub_keys;
    const std::vector<void *> &bufs = whole ? b.bufs : sub_bufs;
    const std::vector<size_t> &sizes = whole ? b.sizes : sub_sizes;
    int64_t *res = b.results + begin;
    std::string err;

    auto copy_int = [&](const auto &v) {
        if (v.size() != n) {
            err = "Mooncake returned " + std::to_string(v.size()) + " results for " +
                  std::to_string(n) + " keys";
            for (size_t i = 0; i < n; i++) res[i] = MCS_E_INTERNAL;
            return;
        }
        for (size_t i = 0; i < n; i++) res[i] = int64_t(v[i]);
    };

    try {
        switch (b.op) {
        case MCS_OP_EXISTS: copy_int(backend_->exists(keys)); break;
        case MCS_OP_SIZE:
            for (size_t i = 0; i < n; i++) res[i] = backend_->size(keys[i]);
            break;
        case MCS_OP_GET: copy_int(backend_->get_into(keys, bufs, sizes)); break;
        case MCS_OP_REMOVE: copy_int(backend_->remove(keys, b.flags & MCS_FLAG_FORCE)); break;
        case MCS_OP_UPSERT: copy_int(backend_->put_from(keys, bufs, sizes, b.rcfg, true)); break;
        case MCS_OP_PUT:
            if (!(b.flags & MCS_FLAG_SKIP_EXISTING)) {
                copy_int(backend_->put_from(keys, bufs, sizes, b.rcfg, false));
                break;
            }
            {
                std::vector<int> ex = backend_->exists(keys);
                StrVec k2;
                std::vector<void *> b2;
                std::vector<size_t> s2, idx;
                for (size_t i = 0; i < n; i++) {
                    if (ex.size() == n && ex[i] == 1) {
                        res[i] = MCS_PUT_EXISTED;
                    } else {
                        k2.push_back(keys[i]);
                        b2.push_back(bufs[i]);
                        s2.push_back(sizes[i]);
                        idx.push_back(i);
                    }
                }
                if (!k2.empty()) {
                    std::vector<int> r = backend_->put_from(k2, b2, s2, b.rcfg, false);
                    for (size_t j = 0; j < idx.size(); j++)
                        res[idx[j]] = j < r.size() ? r[j] : MCS_E_INTERNAL;
                }
            }
            break;
        }
    } catch (const std::exception &e) {
        err = std::string("exception in Mooncake call: ") + e.what();
        for (size_t i = 0; i < n; i++) res[i] = MCS_E_INTERNAL;
    } catch (...) {
        err = "unknown exception in Mooncake call";
        for (size_t i = 0; i < n; i++) res[i] = MCS_E_INTERNAL;
    }
    finish_tile(b, b.results, begin, end, err);
    if (b.remaining.fetch_sub(1) == 1) complete(tile.batch);
}

bool Engine::mergeable(const Tile &t) {
    int op = t.batch->op;
    return (op == MCS_OP_GET || op == MCS_OP_EXISTS) && t.end - t.begin <= 16;
}

void Engine::run_merged(std::vector<Tile> &tiles) {
    int op = tiles.front().batch->op;
    StrVec keys;
    std::vector<void *> bufs;
    std::vector<size_t> sizes;
    std::vector<const Tile *> merged, alone;
    std::unordered_set<std::string_view> seen;
    for (const Tile &t : tiles) {
        const Batch &b = *t.batch;
        bool clash = false;
        for (size_t i = t.begin; i < t.end && !clash; i++) clash = seen.count(b.keys[i]) > 0;
        if (clash) {  // Mooncake fills only one slot of a repeated key
            alone.push_back(&t);
            continue;
        }
        merged.push_back(&t);
        for (size_t i = t.begin; i < t.end; i++) {
            seen.insert(b.keys[i]);
            keys.push_back(b.keys[i]);
            if (op == MCS_OP_GET) {
                bufs.push_back(b.bufs[i]);
                sizes.push_back(b.sizes[i]);
            }
        }
    }
    std::vector<int64_t> res(keys.size(), MCS_E_INTERNAL);
    std::string err;
    try {
        if (op == MCS_OP_EXISTS) {
            std::vector<int> v = backend_->exists(keys);
            if (v.size() == keys.size())
                std::copy(v.begin(), v.end(), res.begin());
            else
                err = "Mooncake returned a wrong number of results";
        } else {
            std::vector<int64_t> v = backend_->get_into(keys, bufs, sizes);
            if (v.size() == keys.size())
                res = std::move(v);
            else
                err = "Mooncake returned a wrong number of results";
        }
    } catch (const std::exception &e) {
        err = std::string("exception in Mooncake call: ") + e.what();
    } catch (...) {
        err = "unknown exception in Mooncake call";
    }
    size_t off = 0;
    for (const Tile *t : merged) {
        Batch &b = *t->batch;
        size_t n = t->end - t->begin;
        std::copy(res.begin() + off, res.begin() + off + n, b.results + t->begin);
        off += n;
        finish_tile(b, b.results, t->begin, t->end, err);
        if (b.remaining.fetch_sub(1) == 1) complete(t->batch);
    }
    for (const Tile *t : alone) run_tile(*t);
}

void Engine::finish_tile(Batch &b, const int64_t *results, size_t begin, size_t end,
                         const std::string &err) {
    std::lock_guard<std::mutex> lk(b.mu);
    for (size_t i = begin; i < end; i++) {
        int64_t r = results[i];
        if (r >= 0 || r == kObjectNotFound) continue;
        b.n_failed++;
        if (b.status == 0) {
            b.status = int(r);
            b.message = err.empty() ? "key " + quote_key(b.keys[i]) + ": " + describe(int(r))
                                    : err;
        }
    }
}

void Engine::complete(const std::shared_ptr<Batch> &b) {
    double us = std::chrono::duration<double, std::micro>(Clock::now() - b->t0).count();
    bool failed;
    {
        std::lock_guard<std::mutex> lk(b->mu);
        failed = b->status != 0;
    }
    if (b->sync) {
        // Free the lane slot before waking the caller, so its next call sees it.
        b->lane->finished(us, failed, b->keys.size());
        std::lock_guard<std::mutex> lk(b->mu);
        b->done = true;
        b->cv.notify_all();
        return;
    }
    mcs_completion c{};
    c.id = b->id;
    c.op = b->op;
    c.n_keys = uint32_t(b->keys.size());
    {
        std::lock_guard<std::mutex> lk(b->mu);
        c.status = b->status;
        c.n_failed = b->n_failed;
        std::snprintf(c.message, sizeof c.message, "%s", b->message.c_str());
    }
    {
        std::lock_guard<std::mutex> lk(cq_mu_);
        cq_.push_back(c);
        if (!signaled_) {
            uint64_t one = 1;
            ssize_t w = ::write(efd_, &one, sizeof one);
            (void)w;
            signaled_ = true;
        }
    }
    cq_cv_.notify_all();
    b->lane->finished(us, failed, b->keys.size());
}

int Engine::drain(mcs_completion *out, size_t cap) {
    if (!out && cap) throw Error(MCS_E_INVALID_ARG, "out is NULL");
    std::lock_guard<std::mutex> lk(cq_mu_);
    size_t k = 0;
    while (k < cap && !cq_.empty()) {
        out[k++] = cq_.front();
        cq_.pop_front();
    }
    if (cq_.empty() && signaled_) {
        uint64_t v;
        ssize_t r = ::read(efd_, &v, sizeof v);
        (void)r;
        signaled_ = false;
    }
    return int(std::min<size_t>(k, size_t(INT32_MAX)));
}

int Engine::wait(int timeout_ms) {
    std::unique_lock<std::mutex> lk(cq_mu_);
    auto ready = [this] { return !cq_.empty() || state_.load() == kClosed; };
    if (timeout_ms < 0)
        cq_cv_.wait(lk, ready);
    else if (!cq_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), ready))
        throw Error(MCS_E_TIMEOUT, "no completion within " + std::to_string(timeout_ms) + " ms");
    if (cq_.empty()) throw Error(MCS_E_CLOSED, "the client is closed and nothing is left to drain");
    return MCS_OK;
}

int Engine::register_l1(void *ptr, uint64_t size, uint64_t max_block) {
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
    std::unique_lock<std::shared_mutex> lk(l1_mu_);
    if (!l1_.empty())
        throw Error(MCS_E_STATE, "an L1 region is already registered; unregister it first");
    char *base = static_cast<char *>(ptr);
    uint64_t off = 0;
    while (off < size) {
        uint64_t len = std::min(max_block, size - off);
        int rc = backend_->register_buffer(base + off, len);
        if (rc != 0) {
            uint64_t failed_at = off;
            size_t done = l1_.size();
            unregister_l1_locked();
            throw Error(rc, "registering L1 block #" + std::to_string(done) + " (offset " +
                                std::to_string(failed_at) + ", " + std::to_string(len) +
                                " bytes) failed: " + describe(rc) +
                                "; the blocks already registered were unregistered");
        }
        l1_.push_back({base + off, len});
        off += len;
    }
    return MCS_OK;
}

int Engine::unregister_l1_locked() {
    int first = 0;
    while (!l1_.empty()) {
        int rc = backend_->unregister_buffer(l1_.back().ptr);
        if (rc && !first) first = rc;
        l1_.pop_back();
    }
    return first;
}

int Engine::unregister_l1() {
    std::unique_lock<std::shared_mutex> lk(l1_mu_);
    int rc = unregister_l1_locked();
    if (rc) throw Error(rc, "unregistering an L1 block failed: " + describe(rc));
    return MCS_OK;
}

uint32_t Engine::l1_blocks() {
    std::shared_lock<std::shared_mutex> lk(l1_mu_);
    return uint32_t(l1_.size());
}

int Engine::lane_stats(int lane, mcs_lane_stats *out) {
    if (!out) throw Error(MCS_E_INVALID_ARG, "out is NULL");
    if (lane < 0 || lane >= MCS_LANE_COUNT)
        throw Error(MCS_E_INVALID_ARG, "unknown lane " + std::to_string(lane));
    std::memset(out, 0, sizeof *out);
    if (lanes_[lane]) lanes_[lane]->stats(out);
    return MCS_OK;
}

int Engine::close() {
    std::lock_guard<std::mutex> close_lk(close_mu_);
    if (state_.load() == kClosed) return MCS_OK;
    {
        std::unique_lock<std::mutex> lk(calls_mu_);
        state_.store(kClosing);
        calls_cv_.wait(lk, [this] { return calls_ == 0; });
    }
    for (auto &lane : lanes_)
        if (lane) lane->stop();
    {
        std::unique_lock<std::shared_mutex> lk(l1_mu_);
        unregister_l1_locked();
    }
    if (backend_) backend_->teardown();
    {
        std::lock_guard<std::mutex> lk(cq_mu_);
        state_.store(kClosed);
    }
    cq_cv_.notify_all();
    return MCS_OK;
}

int Engine::close_for_exit() {
    if (backend_) backend_->skip_teardown();
    return close();
}

void Engine::abandon() { state_.store(kClosed); }

}  // namespace mcs
