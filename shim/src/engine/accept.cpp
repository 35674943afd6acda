// Accepting a batch: every check of its fields (operation, flags, packed keys
// and duplicates, buffers or parts, the L1 region, replica options), the copy
// of its keys and sizes, and its admission to its lane.
#include <cstring>
#include <string_view>

#include "engine.hpp"

namespace mcs {

namespace {

const char *op_name(int op) {
    static const char *const names[kOps] = {"exists", "get",  "put",       "upsert",
                                            "remove", "size", "get_buffer"};
    return op >= 0 && op < kOps ? names[op] : "?";
}

bool op_has_buffers(int op) {
    return op == MCS_OP_GET || op == MCS_OP_PUT || op == MCS_OP_UPSERT;
}

std::string key_no(size_t i) {
    return "key #" + std::to_string(i);
}

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

std::shared_ptr<Batch> Engine::accept(const mcs_batch &in, bool sync) {
    const int op = in.op;
    const size_t n = in.n;
    if (op < 0 || op >= kOps) throw Error(MCS_E_INVALID_ARG, "unknown op " + std::to_string(op));
    if (n == 0) throw Error(MCS_E_INVALID_ARG, "empty batch: n must be at least 1");
    if (n > (1u << 24)) throw Error(MCS_E_INVALID_ARG, "batch too large (over 16777216 keys)");
    if (!in.key_data) throw Error(MCS_E_INVALID_ARG, "key_data is NULL");
    if (!in.results) throw Error(MCS_E_INVALID_ARG, "results is NULL");
    if (in.flags & ~(MCS_FLAG_FORCE | MCS_FLAG_SKIP_EXISTING | MCS_FLAG_TAIL_PART | MCS_FLAG_LAND))
        throw Error(MCS_E_INVALID_ARG, "unknown flags " + std::to_string(in.flags));
    const bool land = in.flags & MCS_FLAG_LAND;
    if (land && op != MCS_OP_GET) throw Error(MCS_E_INVALID_ARG, "MCS_FLAG_LAND is for get");
    if (land && (in.flags & MCS_FLAG_TAIL_PART))
        throw Error(MCS_E_INVALID_ARG, "MCS_FLAG_LAND and MCS_FLAG_TAIL_PART do not go together");
    const bool with_bufs = op_has_buffers(op);
    if (in.part_counts && !with_bufs)
        throw Error(MCS_E_INVALID_ARG, std::string("part_counts must be NULL for ") + op_name(op) +
                                           " (multi-part values are for get, put and upsert)");
    if ((in.flags & MCS_FLAG_TAIL_PART) && (op != MCS_OP_GET || !in.part_counts))
        throw Error(MCS_E_INVALID_ARG, "MCS_FLAG_TAIL_PART is for get with part_counts");
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
            throw Error(MCS_E_INVALID_ARG,
                        "key_offsets reach past key_bytes (" + std::to_string(bytes) + ")");
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
            throw Error(MCS_E_INVALID_ARG, "key_data holds more than n = " + std::to_string(n) +
                                               " NUL-terminated keys: a key contains a NUL byte");
    }
    if (n > 1) {
        if (const std::string *dup = find_duplicate(b->keys))
            throw Error(MCS_E_DUPLICATE_KEY,
                        "key " + quote_key(*dup) + " appears more than once in the batch");
    }
    if (with_bufs) {
        size_t total = n;  // buffers in bufs / sizes
        if (in.part_counts) {
            b->part_first.assign(n + 1, 0);
            for (size_t i = 0; i < n; i++) {
                uint32_t count = in.part_counts[i];
                if (!count) throw Error(MCS_E_INVALID_ARG, key_no(i) + " has 0 parts");
                b->part_first[i + 1] = b->part_first[i] + count;
                if (b->part_first[i + 1] > (1u << 24))
                    throw Error(MCS_E_INVALID_ARG, "batch too large (over 16777216 parts)");
            }
            total = b->part_first[n];
            backend_->check_parts(op);
        }
        b->bufs.assign(in.bufs, in.bufs + total);
        b->sizes.assign(in.sizes, in.sizes + total);
        const char *what = in.part_counts ? "part" : "buffer";
        for (size_t i = 0; i < total; i++) {
            if (!b->bufs[i])
                throw Error(MCS_E_INVALID_ARG,
                            std::string(what) + " #" + std::to_string(i) + " is NULL");
            if (!b->sizes[i])
                throw Error(MCS_E_INVALID_ARG, std::string(in.part_counts ? "part size" : "size") +
                                                   " #" + std::to_string(i) + " is zero");
        }
        std::string msg;
        int rc = l1_.check(b->bufs, b->sizes, msg);
        if (rc) throw Error(rc, msg);
        if (land) {  // Mooncake reads into the landing buffer, laid out as bufs
            uint64_t sum = 0;
            for (size_t size : b->sizes) sum += size;
            b->landing = landing_.take(sum);
            b->land_to = b->bufs;
            unsigned char *at = b->landing.get();
            for (size_t i = 0; i < total; i++) {
                b->bufs[i] = at;
                at += b->sizes[i];
            }
        }
    }
    if (op == MCS_OP_PUT || op == MCS_OP_UPSERT) {
        if (in.replica) {
            auto opts = std::make_shared<ReplicaOptions>(read_replica_options(in.replica));
            if (opts->has_group_ids && opts->group_ids.size() != n)
                throw Error(MCS_E_INVALID_ARG,
                            "replica options: " + std::to_string(opts->group_ids.size()) +
                                " group_ids for " + std::to_string(n) + " keys: give one per key");
            b->replica = std::move(opts);
        } else {
            std::lock_guard<std::mutex> lk(replica_mu_);
            b->replica = default_replica_;
        }
        backend_->check_replica(*b->replica);  // a few comparisons; refuses what cannot run
    } else if (in.replica) {
        throw Error(MCS_E_INVALID_ARG,
                    std::string("replica options must be NULL for ") + op_name(op));
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

}  // namespace mcs
