// Running tiles against the backend: one tile, or several small reads merged
// into one Mooncake call; per-key outcomes folded into each batch (first error,
// failed keys) and into the per-operation counters.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "engine.hpp"
#include "two_threads.hpp"

namespace mcs {

void Engine::run_tile(const Tile &tile) {
    Batch &b = *tile.batch;
    size_t begin = tile.begin, end = tile.end, n = end - begin;
    bool whole = begin == 0 && end == b.keys.size();
    StrVec sub_keys;
    std::vector<void *> sub_bufs;
    std::vector<size_t> sub_sizes;
    if (!whole) {
        sub_keys.assign(b.keys.begin() + begin, b.keys.begin() + end);
        if (!b.bufs.empty() && !b.parted()) {
            sub_bufs.assign(b.bufs.begin() + begin, b.bufs.begin() + end);
            sub_sizes.assign(b.sizes.begin() + begin, b.sizes.begin() + end);
        }
    }
    const StrVec &keys = whole ? b.keys : sub_keys;
    const std::vector<void *> &bufs = whole ? b.bufs : sub_bufs;
    const std::vector<size_t> &sizes = whole ? b.sizes : sub_sizes;
    int64_t *res = b.results + begin;
    std::string err;
    // Group ids travel with their keys: this tile's slice of the batch's.
    const ReplicaOptions *ro = b.replica.get();
    StrVec sub_groups;
    const StrVec *groups = nullptr;
    if (ro && ro->has_group_ids) {
        if (whole) {
            groups = &ro->group_ids;
        } else {
            sub_groups.assign(ro->group_ids.begin() + begin, ro->group_ids.begin() + end);
            groups = &sub_groups;
        }
    }

    auto copy_int = [&](const auto &v) {
        if (v.size() != n) {
            err = "Mooncake returned " + std::to_string(v.size()) + " results for " +
                  std::to_string(n) + " keys";
            return;
        }
        for (size_t i = 0; i < n; i++) res[i] = int64_t(v[i]);
    };

    try {
        if (b.parted())
            run_parts(b, begin, end, groups, err);
        else
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
                case MCS_OP_REMOVE:
                    copy_int(backend_->remove(keys, b.flags & MCS_FLAG_FORCE));
                    break;
                case MCS_OP_UPSERT:
                    copy_int(backend_->put_from(keys, bufs, sizes, *ro, groups, true));
                    break;
                case MCS_OP_PUT:
                    if (!(b.flags & MCS_FLAG_SKIP_EXISTING)) {
                        copy_int(backend_->put_from(keys, bufs, sizes, *ro, groups, false));
                        break;
                    }
                    {
                        std::vector<int> ex = backend_->exists(keys);
                        StrVec k2, g2;
                        std::vector<void *> b2;
                        std::vector<size_t> s2, idx;
                        for (size_t i = 0; i < n; i++) {
                            if (ex.size() == n && ex[i] == 1) {
                                res[i] = MCS_PUT_EXISTED;
                            } else {
                                k2.push_back(keys[i]);
                                b2.push_back(bufs[i]);
                                s2.push_back(sizes[i]);
                                if (groups) g2.push_back((*groups)[i]);
                                idx.push_back(i);
                            }
                        }
                        if (!k2.empty()) {
                            std::vector<int> r = backend_->put_first_writer(
                                k2, b2, s2, nullptr, *ro, groups ? &g2 : nullptr);
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
           t.end - t.begin <= 16 && !t.batch->parted();
}

namespace {

// One backend call of multi-part values: keys with their parts, flattened.
struct PartsCall {
    StrVec keys;
    std::vector<void *> bufs;
    std::vector<size_t> sizes;
    std::vector<size_t> first{0};
    StrVec groups;
    std::vector<size_t> index;  // each key's place in the tile
    void add(const Batch &b, size_t i, size_t at) {
        keys.push_back(b.keys[i]);
        bufs.insert(bufs.end(), b.bufs.begin() + long(b.part_first[i]),
                    b.bufs.begin() + long(b.part_first[i + 1]));
        sizes.insert(sizes.end(), b.sizes.begin() + long(b.part_first[i]),
                     b.sizes.begin() + long(b.part_first[i + 1]));
        first.push_back(bufs.size());
        index.push_back(at);
    }
};

// Lays a value of `size` bytes into key i's parts (see "Multi-part values" in
// mcs.h) and adds them to `call`; false if it does not fit.
bool add_cut(PartsCall &call, const Batch &b, size_t i, size_t at, uint64_t size, bool tail) {
    const size_t lo = b.part_first[i], hi = b.part_first[i + 1];
    const size_t last = tail ? hi - 1 : hi;
    uint64_t rest = size;
    if (tail) {
        if (size < b.sizes[last]) return false;
        rest -= b.sizes[last];
    }
    std::vector<void *> bufs;
    std::vector<size_t> sizes;
    for (size_t j = lo; j < last && rest; j++) {
        size_t take = size_t(std::min<uint64_t>(rest, b.sizes[j]));
        bufs.push_back(b.bufs[j]);
        sizes.push_back(take);
        rest -= take;
    }
    if (rest) return false;  // longer than its parts
    if (tail) {
        bufs.push_back(b.bufs[last]);
        sizes.push_back(b.sizes[last]);
    }
    call.keys.push_back(b.keys[i]);
    call.bufs.insert(call.bufs.end(), bufs.begin(), bufs.end());
    call.sizes.insert(call.sizes.end(), sizes.begin(), sizes.end());
    call.first.push_back(call.bufs.size());
    call.index.push_back(at);
    return true;
}

}  // namespace

void Engine::run_parts(Batch &b, size_t begin, size_t end, const StrVec *groups, std::string &err) {
    const size_t n = end - begin;
    int64_t *res = b.results + begin;
    auto wrong_count = [&](size_t got, size_t want) {
        err = "Mooncake returned " + std::to_string(got) + " results for " + std::to_string(want) +
              " keys";
    };
    if (b.op == MCS_OP_PUT || b.op == MCS_OP_UPSERT) {
        PartsCall call;
        std::vector<int> present;
        const bool skip = b.op == MCS_OP_PUT && (b.flags & MCS_FLAG_SKIP_EXISTING);
        if (skip)
            present =
                backend_->exists(StrVec(b.keys.begin() + long(begin), b.keys.begin() + long(end)));
        for (size_t j = 0; j < n; j++) {
            if (present.size() == n && present[j] == 1) {
                res[j] = MCS_PUT_EXISTED;
                continue;
            }
            call.add(b, begin + j, j);
            if (groups) call.groups.push_back((*groups)[j]);
        }
        if (call.keys.empty()) return;
        const StrVec *g = groups ? &call.groups : nullptr;
        std::vector<int> r =
            !skip ? backend_->put_from_parts(call.keys, call.bufs, call.sizes, call.first,
                                             *b.replica, g, b.op == MCS_OP_UPSERT)
                  : backend_->put_first_writer(call.keys, call.bufs, call.sizes, &call.first,
                                               *b.replica, g);
        if (r.size() != call.keys.size()) return wrong_count(r.size(), call.keys.size());
        for (size_t k = 0; k < r.size(); k++) res[call.index[k]] = r[k];
        return;
    }
    // GET: Mooncake reads a key only when its parts add up to the value's size.
    PartsCall call;
    for (size_t j = 0; j < n; j++) call.add(b, begin + j, j);
    std::vector<int64_t> r = backend_->get_into_parts(call.keys, call.bufs, call.sizes, call.first);
    if (r.size() != n) return wrong_count(r.size(), n);
    const bool tail = b.flags & MCS_FLAG_TAIL_PART;
    PartsCall again;
    for (size_t j = 0; j < n; j++) {
        res[j] = r[j];
        if (r[j] != -800 && r[j] != -600) continue;  // what a size mismatch looks like
        const size_t i = begin + j;
        const uint64_t cap = b.key_bytes(i);
        int64_t size = backend_->size(b.keys[i]);
        if (size < 0) {
            res[j] = size;  // e.g. removed meanwhile
        } else if (uint64_t(size) == cap) {
            continue;  // not a mismatch: keep Mooncake's answer
        } else if (uint64_t(size) > cap || !add_cut(again, b, i, j, uint64_t(size), tail)) {
            res[j] = -600;  // does not fit its parts, as Mooncake says for one buffer
        }
    }
    if (again.keys.empty()) return;
    std::vector<int64_t> r2 =
        backend_->get_into_parts(again.keys, again.bufs, again.sizes, again.first);
    if (r2.size() != again.keys.size()) return wrong_count(r2.size(), again.keys.size());
    for (size_t k = 0; k < r2.size(); k++) res[again.index[k]] = r2[k];
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
            std::copy(hv.values.begin() + off, hv.values.begin() + off + n, b.values + t->begin);
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

namespace {

// Copies what a landed GET read for keys [begin, end) from the landing buffer
// to the caller's buffers: a key's result is the bytes its parts received, in
// order (MCS_FLAG_TAIL_PART is refused with MCS_FLAG_LAND).
void land_out(const Batch &b, size_t begin, size_t end) {
    auto read = [&](size_t j) {
        int64_t r = b.results[begin + j];
        return r > 0 ? uint64_t(r) : uint64_t(0);
    };
    for_each_on_two_threads(end - begin, read, [&](size_t j) {
        const size_t i = begin + j;
        uint64_t left = read(j);
        const size_t lo = b.parted() ? b.part_first[i] : i;
        const size_t hi = b.parted() ? b.part_first[i + 1] : i + 1;
        for (size_t k = lo; k < hi && left; k++) {
            const size_t n = size_t(std::min<uint64_t>(left, b.sizes[k]));
            std::memcpy(b.land_to[k], b.bufs[k], n);
            left -= n;
        }
    });
}

}  // namespace

void Engine::finish_tile(Batch &b, size_t begin, size_t end, const std::string &err) {
    std::lock_guard<std::mutex> lk(b.mu);
    if (!err.empty() && b.status == 0) {
        b.status = MCS_E_INTERNAL;
        b.message = err;
    }
    for (size_t i = begin; i < end; i++) {
        int64_t r = b.results[i];
        // A withdrawn landed batch: what was read stays in the landing memory.
        if (b.withdrawn && r >= 0) b.results[i] = r = MCS_E_TIMEOUT;
        if (key_ok(r)) continue;
        b.n_failed++;
        if (b.first_error == 0) {
            b.first_error = int(r);
            if (b.message.empty())
                b.message = "key " + quote_key(b.keys[i]) + ": " + describe(int(r));
        }
    }
    // With b.mu held: a caller whose deadline passes (or who withdraws the
    // batch) during the copy waits for it to end, and once the caller has
    // given up (abandoned, withdrawn) nothing is copied.
    if (b.landing && err.empty() && !b.abandoned && !b.withdrawn) land_out(b, begin, end);
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
                    bytes += b.key_bytes(i);
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

}  // namespace mcs
