// The engine of one client: accepting batches (packed keys, buffers, result
// arrays), splitting them into tiles for the lanes, running tiles against
// the backend, exactly one completion per batch through an eventfd, values
// held for GET_BUFFER batches, per-operation counters, close.
#include "engine.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "reaper.hpp"
#include "spin.hpp"

namespace mcs {

namespace {

int lane_of_op(int op) {
    switch (op) {
        case MCS_OP_EXISTS:
        case MCS_OP_SIZE: return MCS_LANE_LOOKUP;
        case MCS_OP_GET:
        case MCS_OP_GET_BUFFER: return MCS_LANE_RETRIEVE;
        case MCS_OP_PUT:
        case MCS_OP_UPSERT: return MCS_LANE_STORE;
        case MCS_OP_REMOVE: return MCS_LANE_DELETE;
        default: return -1;
    }
}

const char *op_name(int op) {
    static const char *const names[kOps] = {"exists", "get",  "put",       "upsert",
                                            "remove", "size", "get_buffer"};
    return op >= 0 && op < kOps ? names[op] : "?";
}

}  // namespace

void Engine::validate_lanes(const mcs_lanes *cfg) {
    if (!cfg) return;
    if (cfg->num_workers > 1024) throw Error(MCS_E_INVALID_ARG, "num_workers must be at most 1024");
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
        if (per[i])
            lanes_[i] = std::make_unique<Lane>(this, i, per[i], cap, l.queue_wait_ms);
        else
            need_shared = true;
    }
    if (need_shared)
        lanes_[MCS_LANE_SHARED] =
            std::make_unique<Lane>(this, MCS_LANE_SHARED, shared, cap, l.queue_wait_ms);
    for (int op = 0; op < kOps; op++) {
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

// enter() / leave() are atomic counts (no lock on every call); close() sets the
// state first, then waits for the count to reach 0 under calls_mu_, and a
// leave() that brings it to 0 after the state changed notifies under the same
// mutex, so the waiter cannot miss it (all sequentially consistent).
int Engine::enter() {
    calls_.fetch_add(1);
    if (state_.load() != kOpen) {
        leave();
        return MCS_E_CLOSED;
    }
    return MCS_OK;
}

void Engine::leave() {
    if (calls_.fetch_sub(1) == 1 && state_.load() != kOpen) {
        std::lock_guard<std::mutex> lk(calls_mu_);
        calls_cv_.notify_all();
    }
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
        bool full_bytes = by_bytes && i > begin && bytes + b->key_bytes(i) > tile_bytes_;
        if (full_keys || full_bytes) {
            tiles.push_back({b, begin, i});
            begin = i;
            bytes = 0;
        }
        if (by_bytes) bytes += b->key_bytes(i);
    }
    tiles.push_back({b, begin, n});
    return tiles;
}

// Validates a batch, copies its keys and sizes, and admits it to its lane.
int Engine::submit(const mcs_batch &in, bool sync, uint64_t *id_out) {
    if (!id_out && (!sync || in.op == MCS_OP_GET_BUFFER))
        throw Error(MCS_E_INVALID_ARG, sync ? "id_out is required for get_buffer (its values "
                                              "are released with mcs_client_release(id))"
                                            : "id_out is NULL");
    std::shared_ptr<Batch> b = accept(in, sync);
    if (id_out) *id_out = b->id;
    Lane *lane = b->lane;
    std::vector<Tile> tiles = split(b);
    const size_t n_tiles = tiles.size();
    b->remaining.store(uint32_t(n_tiles));
    if (!sync) {
        if (b->landing) {
            std::lock_guard<std::mutex> lk(landed_mu_);
            landed_[b->id] = b;
        }
        lane->push(std::move(tiles));
        return MCS_OK;
    }
    // Synchronous: run the first tile here if the lane has an idle slot and
    // the caller set no deadline (a thread inside Mooncake cannot stop
    // waiting; a worker can be left to finish).
    const bool timed = in.timeout_ms > 0;
    Tile mine;
    bool inline_run = !timed && lane->try_take_slot(tiles.front());
    if (inline_run) {
        mine = tiles.front();
        tiles.erase(tiles.begin());
    }
    if (!tiles.empty()) lane->push(std::move(tiles));
    if (inline_run) {
        run_tile(mine);
        lane->release_slot(mine);
    }
    const Clock::time_point deadline =
        timed ? Clock::now() + std::chrono::milliseconds(in.timeout_ms) : Clock::time_point();
    SpinWait::until(b->done);  // spin.hpp: a small call ends within it
    std::unique_lock<std::mutex> lk(b->mu);
    if (timed) {
        if (!b->cv.wait_until(lk, deadline,
                              [&] { return b->done.load(std::memory_order_relaxed); })) {
            b->abandoned = true;  // complete() posts a completion instead
            lk.unlock();
            {
                std::lock_guard<std::mutex> slk(stats_mu_);
                ops_[b->op].timeouts++;
            }
            Lane::Abandoned gone = lane->abandon(b);
            const bool none_started = gone.withdrawn.size() == n_tiles;
            for (const Tile &t : gone.withdrawn) withdraw_tile(t);
            std::string what = std::string(op_name(b->op)) + " of " +
                               std::to_string(b->keys.size()) +
                               (b->keys.size() == 1 ? " key" : " keys");
            std::string ms = std::to_string(in.timeout_ms) + " ms";
            if (none_started) {
                std::string held;
                if (gone.held)
                    held = ", " + std::to_string(gone.held) +
                           " of them held by calls whose callers had timed out (Mooncake "
                           "cannot cancel a transfer: each ends when it does)";
                throw Error(MCS_E_TIMEOUT,
                            what + " did not start within " + ms +
                                " (it waited in its lane's queue: " + std::to_string(gone.workers) +
                                " workers" + held + "); nothing of it was sent (batch " +
                                std::to_string(b->id) + " withdrawn)");
            }
            throw Error(MCS_E_TIMEOUT, what + " did not finish within " + ms + " (batch " +
                                           std::to_string(b->id) +
                                           " goes on and will post a completion)");
        }
    } else {
        b->cv.wait(lk, [&] { return b->done.load(std::memory_order_relaxed); });
    }
    if (b->status) throw Error(b->status, b->message);
    return MCS_OK;
}

// A tile taken back from the queue by Lane::abandon(): its keys answer
// MCS_E_TIMEOUT, and the batch completes as if it had run.
void Engine::withdraw_tile(const Tile &t) {
    Batch &b = *t.batch;
    for (size_t i = t.begin; i < t.end; i++) b.results[i] = MCS_E_TIMEOUT;
    {
        std::lock_guard<std::mutex> lk(b.mu);
        if (b.message.empty())
            b.message = "not started before its caller's deadline: nothing of it was sent";
    }
    finish_tile(b, t.begin, t.end, std::string());
    if (b.remaining.fetch_sub(1) == 1) complete(t.batch);
}

void Engine::complete(const std::shared_ptr<Batch> &b) {
    double us = std::chrono::duration<double, std::micro>(Clock::now() - b->t0).count();
    bool failed;
    {
        std::lock_guard<std::mutex> lk(b->mu);
        failed = b->status != 0 || b->n_failed != 0;
        if (!b->holds.empty()) {
            std::lock_guard<std::mutex> hlk(holds_mu_);
            holds_[b->id] = std::move(b->holds);
        }
    }
    count(*b, us, failed);
    if (b->landing && !b->sync) {
        std::lock_guard<std::mutex> lk(landed_mu_);
        landed_.erase(b->id);
    }
    // Free the lane slot before waking a caller, so its next call sees it.
    b->lane->finished(us, failed, b->keys.size());
    mcs_completion c{};
    {
        std::unique_lock<std::mutex> lk(b->mu);
        if (b->sync && !b->abandoned) {
            b->done.store(true, std::memory_order_release);
            // Woken after the unlock, the caller does not block on b->mu at
            // once.  `b` (the caller's reference) keeps the batch, and its cv,
            // alive until this returns.
            lk.unlock();
            b->cv.notify_all();
            return;
        }
        c.struct_size = sizeof c;
        c.id = b->id;
        c.op = b->op;
        c.n_keys = uint32_t(b->keys.size());
        c.status = b->status;
        c.first_error = b->first_error;
        c.n_failed = b->n_failed;
        c.timed_out = b->abandoned ? 1 : 0;
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
}

// A background batch whose caller stopped waiting: what of it is queued is
// taken back (answered MCS_E_TIMEOUT, nothing sent), as a blocking call's is
// at its deadline; its completion is posted once the tiles already running
// end.  Its tiles running meanwhile count as held for a caller that is gone.
// A landed one copies nothing more to the caller's buffers once this returns
// (a copy under way ends first: it holds the batch's mutex).
int Engine::withdraw(uint64_t id) {
    std::shared_ptr<Batch> landed;
    {
        std::lock_guard<std::mutex> lk(landed_mu_);
        auto it = landed_.find(id);
        if (it != landed_.end()) landed = it->second.lock();
    }
    if (landed) {
        std::lock_guard<std::mutex> lk(landed->mu);
        landed->withdrawn = true;
    }
    for (auto &lane : lanes_) {
        if (!lane) continue;
        std::shared_ptr<Batch> b = lane->queued_batch(id);
        if (!b) continue;
        Lane::Abandoned gone = lane->abandon(b);
        int keys = 0;
        for (const Tile &t : gone.withdrawn) {
            keys += int(t.end - t.begin);
            withdraw_tile(t);
        }
        return keys;
    }
    return 0;
}

int Engine::release(uint64_t id) {
    std::vector<std::shared_ptr<void>> gone;
    {
        std::lock_guard<std::mutex> lk(holds_mu_);
        auto it = holds_.find(id);
        if (it == holds_.end()) return MCS_OK;
        gone = std::move(it->second);
        holds_.erase(it);
    }
    return MCS_OK;  // `gone` releases Mooncake's buffers outside the lock
}

int Engine::drain(mcs_completion *out, size_t cap, size_t elem_size) {
    if (!out && cap) throw Error(MCS_E_INVALID_ARG, "out is NULL");
    if (cap && elem_size < offsetof(mcs_completion, message) + 1)
        throw Error(MCS_E_INVALID_ARG, "out[0].struct_size is " + std::to_string(elem_size) +
                                           ": set it to sizeof(struct mcs_completion)");
    const size_t copy = std::min(elem_size, sizeof(mcs_completion));
    auto *dst = reinterpret_cast<unsigned char *>(out);
    std::lock_guard<std::mutex> lk(cq_mu_);
    size_t k = 0;
    while (k < cap && !cq_.empty()) {
        mcs_completion c = cq_.front();
        cq_.pop_front();
        c.struct_size = uint32_t(copy);
        unsigned char *slot = dst + k * elem_size;
        std::memcpy(slot, &c, copy);
        if (copy < sizeof c) slot[copy - 1] = 0;  // keep a cut message terminated
        k++;
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
    l1_.register_region(*backend_, ptr, size, max_block);
    return MCS_OK;
}

int Engine::unregister_l1() {
    int rc = l1_.unregister_all(*backend_);
    if (rc) throw Error(rc, "unregistering an L1 block failed: " + describe(rc));
    return MCS_OK;
}

void Engine::set_default_replica(const ReplicaOptions &opts) {
    if (opts.has_group_ids)
        throw Error(MCS_E_INVALID_ARG,
                    "replica options: group_ids are per key, so a client default cannot have "
                    "them; give them with each batch");
    backend_->check_replica(opts);
    auto copy = std::make_shared<const ReplicaOptions>(opts);
    std::lock_guard<std::mutex> lk(replica_mu_);
    default_replica_ = std::move(copy);
}

int Engine::lane_stats(int lane, mcs_lane_stats *out) {
    if (!out) throw Error(MCS_E_INVALID_ARG, "out is NULL");
    if (lane < 0 || lane >= MCS_LANE_COUNT)
        throw Error(MCS_E_INVALID_ARG, "unknown lane " + std::to_string(lane));
    std::memset(out, 0, sizeof *out);
    if (lanes_[lane]) lanes_[lane]->stats(out);
    return MCS_OK;
}

int Engine::op_stats(int op, OpCounters *out) {
    if (op < 0 || op >= kOps) throw Error(MCS_E_INVALID_ARG, "unknown op " + std::to_string(op));
    std::lock_guard<std::mutex> lk(stats_mu_);
    *out = ops_[op];
    return MCS_OK;
}

int Engine::close() {
    std::lock_guard<std::mutex> close_lk(close_mu_);
    if (state_.load() == kClosed) return MCS_OK;
    {
        std::unique_lock<std::mutex> lk(calls_mu_);
        state_.store(kClosing);
        calls_cv_.wait(lk, [this] { return calls_.load() == 0; });
    }
    for (auto &lane : lanes_)
        if (lane) lane->stop();
    {
        // Mooncake's buffers must go back before its teardown.
        std::lock_guard<std::mutex> lk(holds_mu_);
        holds_.clear();
    }
    if (backend_) {
        l1_.unregister_all(*backend_);
        std::shared_ptr<Backend> backend = backend_;
        run_bounded([backend] { backend->teardown(); }, backend->teardown_wait(),
                    backend->teardown_before_exit());
    }
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

void Engine::abandon() {
    state_.store(kClosed);
}

}  // namespace mcs
