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
    static const char *const names[kOps] = {"exists", "get",    "put",       "upsert",
                                            "remove", "size", "get_buffer"};
    return op >= 0 && op < kOps ? names[op] : "?";
}

bool op_has_buffers(int op) {
    return op == MCS_OP_GET || op == MCS_OP_PUT || op == MCS_OP_UPSERT;
}

// A per-key result that is not an error: a value, a size, absent, unread.
bool key_ok(int64_t r) { return r >= 0 || r == kObjectNotFound || r == MCS_GET_UNREAD; }

std::string quote_key(const std::string &k) {
    std::string s = k.size() > 64 ? k.substr(0, 61) + "..." : k;
    return "'" + s + "'";
}

std::string key_no(size_t i) { return "key #" + std::to_string(i); }

// The first key that appears twice, or nullptr: an open-addressing table of
// key indices (one allocation, no node per key).
const std::string *find_duplicate(const StrVec &keys) {
    size_t cap = 16;
    while (cap < keys.size() * 2) cap <<= 1;
    std::vector<uint32_t> slots(cap, UINT32_MAX);
    std::hash<std::string_view> hash;
    for (uint32_t i = 0; i < keys.size(); i++) {
        size_t h = hash(keys[i]) & (cap - 1);
        while (slots[h] != UINT32_MAX) {
            if (keys[slots[h]] == keys[i]) return &keys[i];
            h = (h + 1) & (cap - 1);
        }
        slots[h] = i;
    }
    return nullptr;
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

// Validates a batch, copies its keys and sizes, and admits it to its lane.
std::shared_ptr<Batch> Engine::accept(const mcs_batch &in, bool sync) {
    const int op = in.op;
    const size_t n = in.n;
    if (op < 0 || op >= kOps) throw Error(MCS_E_INVALID_ARG, "unknown op " + std::to_string(op));
    if (n == 0) throw Error(MCS_E_INVALID_ARG, "empty batch: n must be at least 1");
    if (n > (1u << 24)) throw Error(MCS_E_INVALID_ARG, "batch too large (over 16777216 keys)");
    if (!in.key_data) throw Error(MCS_E_INVALID_ARG, "key_data is NULL");
    if (!in.results) throw Error(MCS_E_INVALID_ARG, "results is NULL");
    if (in.flags & ~(MCS_FLAG_FORCE | MCS_FLAG_SKIP_EXISTING))
        throw Error(MCS_E_INVALID_ARG, "unknown flags " + std::to_string(in.flags));
    const bool with_bufs = op_has_buffers(op);
    if (with_bufs && (!in.bufs || !in.sizes))
        throw Error(MCS_E_INVALID_ARG,
                    std::string("bufs and sizes are required for ") + op_name(op));
    if (!with_bufs && (in.bufs || in.sizes))
        throw Error(MCS_E_INVALID_ARG,
                    std::string("bufs and sizes must be NULL for ") + op_name(op));
    if (op == MCS_OP_GET_BUFFER && !in.values)
        throw Error(MCS_E_INVALID_ARG, "values is required for get_buffer");

    auto b = std::make_shared<Batch>();
    b->op = op;
    b->flags = in.flags;
    b->results = in.results;
    b->values = op == MCS_OP_GET_BUFFER ? in.values : nullptr;
    b->sync = sync;
    b->keys.reserve(n);
    const uint64_t bytes = in.key_bytes;
    if (const uint64_t *off = in.key_offsets) {
        if (off[n] > bytes)
            throw Error(MCS_E_INVALID_ARG, "key_offsets reach past key_bytes (" +
                                               std::to_string(bytes) + ")");
        for (size_t i = 0; i < n; i++) {
            if (off[i + 1] < off[i])
                throw Error(MCS_E_INVALID_ARG, "key_offsets decrease at " + key_no(i));
            size_t len = size_t(off[i + 1] - off[i]);
            if (!len) throw Error(MCS_E_INVALID_ARG, key_no(i) + " is empty");
            const char *k = in.key_data + off[i];
            if (std::memchr(k, '\0', len))
                throw Error(MCS_E_INVALID_ARG, key_no(i) + " contains a NUL byte");
            b->keys.emplace_back(k, len);
        }
    } else {
        const char *k = in.key_data, *end = in.key_data + bytes;
        for (size_t i = 0; i < n; i++) {
            auto *nul = static_cast<const char *>(std::memchr(k, '\0', size_t(end - k)));
            if (!nul)
                throw Error(MCS_E_INVALID_ARG, "key_data (" + std::to_string(bytes) +
                                                   " bytes) holds fewer than n = " +
                                                   std::to_string(n) + " NUL-terminated keys");
            if (nul == k) throw Error(MCS_E_INVALID_ARG, key_no(i) + " is empty");
            b->keys.emplace_back(k, size_t(nul - k));
            k = nul + 1;
        }
        if (k != end)
            throw Error(MCS_E_INVALID_ARG,
                        "key_data holds more than n = " + std::to_string(n) +
                            " NUL-terminated keys: a key contains a NUL byte");
    }
    if (n > 1) {
        if (const std::string *dup = find_duplicate(b->keys))
            throw Error(MCS_E_DUPLICATE_KEY,
                        "key " + quote_key(*dup) + " appears more than once in the batch");
    }
    if (with_bufs) {
        b->bufs.assign(in.bufs, in.bufs + n);
        b->sizes.assign(in.sizes, in.sizes + n);
        for (size_t i = 0; i < n; i++) {
            if (!b->bufs[i])
                throw Error(MCS_E_INVALID_ARG, "buffer #" + std::to_string(i) + " is NULL");
            if (!b->sizes[i])
                throw Error(MCS_E_INVALID_ARG, "size #" + std::to_string(i) + " is zero");
        }
        std::string msg;
        int rc = l1_.check(b->bufs, b->sizes, msg);
        if (rc) throw Error(rc, msg);
    }
    if (op == MCS_OP_PUT || op == MCS_OP_UPSERT) {
        b->rcfg = in.replicate_config ? in.replicate_config : default_rcfg_.load();
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
    return b;
}

int Engine::submit(const mcs_batch &in, bool sync, uint64_t *id_out) {
    if (!id_out && (!sync || in.op == MCS_OP_GET_BUFFER))
        throw Error(MCS_E_INVALID_ARG, sync ? "id_out is required for get_buffer (its values "
                                              "are released with mcs_release(id))"
                                            : "id_out is NULL");
    std::shared_ptr<Batch> b = accept(in, sync);
    if (id_out) *id_out = b->id;
    Lane *lane = b->lane;
    std::vector<Tile> tiles = split(b);
    b->remaining.store(uint32_t(tiles.size()));
    if (!sync) {
        lane->push(std::move(tiles));
        return MCS_OK;
    }
    // Synchronous: run the first tile here if the lane has an idle slot and
    // the caller set no deadline (a thread inside Mooncake cannot stop
    // waiting; a worker can be left to finish).
    const bool timed = in.timeout_ms > 0;
    Tile mine;
    bool inline_run = !timed && lane->try_take_slot();
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
    if (timed) {
        if (!b->cv.wait_for(lk, std::chrono::milliseconds(in.timeout_ms),
                            [&] { return b->done; })) {
            b->abandoned = true;  // complete() posts a completion instead
            lk.unlock();
            {
                std::lock_guard<std::mutex> slk(stats_mu_);
                ops_[b->op].timeouts++;
            }
            throw Error(MCS_E_TIMEOUT,
                        std::string(op_name(b->op)) + " of " + std::to_string(b->keys.size()) +
                            (b->keys.size() == 1 ? " key" : " keys") + " did not finish within " +
                            std::to_string(in.timeout_ms) + " ms (batch " +
                            std::to_string(b->id) + " goes on and will post a completion)");
        }
    } else {
        b->cv.wait(lk, [&] { return b->done; });
    }
    if (b->status) throw Error(b->status, b->message);
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
        case MCS_OP_GET_BUFFER: {
            HeldValues hv = backend_->get_buffers(keys);
            copy_int(hv.sizes);
            if (err.empty() && hv.values.size() == n) {
                for (size_t i = 0; i < n; i++) b.values[begin + i] = hv.values[i];
            } else if (err.empty()) {
                err = "Mooncake returned a wrong number of buffers";
            }
            if (hv.hold) {
                std::lock_guard<std::mutex> lk(b.mu);
                b.holds.push_back(std::move(hv.hold));
            }
            break;
        }
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
    } catch (...) {
        err = "unknown exception in Mooncake call";
    }
    if (!err.empty())
        for (size_t i = 0; i < n; i++) res[i] = MCS_E_INTERNAL;
    finish_tile(b, begin, end, err);
    if (b.remaining.fetch_sub(1) == 1) complete(tile.batch);
}

bool Engine::mergeable(const Tile &t) {
    int op = t.batch->op;
    return (op == MCS_OP_GET || op == MCS_OP_GET_BUFFER || op == MCS_OP_EXISTS) &&
           t.end - t.begin <= 16;
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
    HeldValues hv;
    std::string err;
    try {
        if (op == MCS_OP_EXISTS) {
            std::vector<int> v = backend_->exists(keys);
            if (v.size() == keys.size())
                std::copy(v.begin(), v.end(), res.begin());
            else
                err = "Mooncake returned a wrong number of results";
        } else if (op == MCS_OP_GET_BUFFER) {
            hv = backend_->get_buffers(keys);
            if (hv.sizes.size() == keys.size() && hv.values.size() == keys.size())
                res = hv.sizes;
            else
                err = "Mooncake returned a wrong number of buffers";
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
    if (!err.empty()) std::fill(res.begin(), res.end(), int64_t(MCS_E_INTERNAL));
    size_t off = 0;
    for (const Tile *t : merged) {
        Batch &b = *t->batch;
        size_t n = t->end - t->begin;
        std::copy(res.begin() + off, res.begin() + off + n, b.results + t->begin);
        if (op == MCS_OP_GET_BUFFER && err.empty()) {
            std::copy(hv.values.begin() + off, hv.values.begin() + off + n,
                      b.values + t->begin);
            if (hv.hold) {
                std::lock_guard<std::mutex> lk(b.mu);
                b.holds.push_back(hv.hold);  // shared by every merged batch
            }
        }
        off += n;
        finish_tile(b, t->begin, t->end, err);
        if (b.remaining.fetch_sub(1) == 1) complete(t->batch);
    }
    for (const Tile *t : alone) run_tile(*t);
}

void Engine::finish_tile(Batch &b, size_t begin, size_t end, const std::string &err) {
    std::lock_guard<std::mutex> lk(b.mu);
    if (!err.empty() && b.status == 0) {
        b.status = MCS_E_INTERNAL;
        b.message = err;
    }
    for (size_t i = begin; i < end; i++) {
        int64_t r = b.results[i];
        if (key_ok(r)) continue;
        b.n_failed++;
        if (b.first_error == 0) {
            b.first_error = int(r);
            if (b.message.empty())
                b.message = "key " + quote_key(b.keys[i]) + ": " + describe(int(r));
        }
    }
}

void OpCounters::add_error(int code, uint64_t keys) {
    for (int i = 0; i < kOpErrors; i++) {
        if (error_keys[i] == 0) error_codes[i] = code;
        if (error_codes[i] == code) {
            error_keys[i] += keys;
            return;
        }
    }
}

void Engine::count(const Batch &b, double us, bool failed) {
    uint64_t bytes = 0, failed_keys = 0, no_space = 0;
    const size_t n = b.keys.size();
    // Per-key errors of this batch, most batches having none or one kind.
    std::vector<std::pair<int, uint64_t>> errors;
    auto note = [&errors](int code, uint64_t keys) {
        for (auto &e : errors)
            if (e.first == code) {
                e.second += keys;
                return;
            }
        errors.emplace_back(code, keys);
    };
    if (b.status == 0) {
        for (size_t i = 0; i < n; i++) {
            int64_t r = b.results[i];
            if (r >= 0) {
                if (b.op == MCS_OP_GET || b.op == MCS_OP_GET_BUFFER)
                    bytes += uint64_t(r);
                else if ((b.op == MCS_OP_PUT || b.op == MCS_OP_UPSERT) && r == 0)
                    bytes += b.sizes[i];
            } else if (!key_ok(r)) {
                failed_keys++;
                if (r == kNoAvailableHandle) no_space++;
                note(int(r), 1);
            }
        }
    } else {
        failed_keys = n;
        note(b.status, n);
    }
    int bucket = 0;
    if (us >= 1.0) bucket = std::min(kOpBuckets - 1, int(std::floor(std::log2(us))) + 1);
    std::lock_guard<std::mutex> lk(stats_mu_);
    OpCounters &o = ops_[b.op];
    o.calls++;
    o.keys += n;
    o.failed_calls += failed ? 1 : 0;
    o.failed_keys += failed_keys;
    o.bytes += bytes;
    o.no_space += no_space;
    o.sum_us += us;
    o.buckets[bucket]++;
    for (auto &e : errors) o.add_error(e.first, e.second);
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
    // Free the lane slot before waking a caller, so its next call sees it.
    b->lane->finished(us, failed, b->keys.size());
    mcs_completion c{};
    {
        std::lock_guard<std::mutex> lk(b->mu);
        if (b->sync && !b->abandoned) {
            b->done = true;
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
        throw Error(MCS_E_INVALID_ARG, "elem_size " + std::to_string(elem_size) +
                                           " is smaller than struct mcs_completion's fields");
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
        calls_cv_.wait(lk, [this] { return calls_ == 0; });
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
        backend_->teardown();
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

void Engine::abandon() { state_.store(kClosed); }

}  // namespace mcs
