// Registered memory: Mooncake's register_buffer / unregister_buffer passed
// through, and get_into_ranges (byte ranges of values read into registered
// buffers), run by the engine on the calling thread without lanes or batches.
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine.hpp"

namespace mcs {

namespace {

// The n NUL-terminated keys packed in data[0..bytes), or Error naming the
// first that overruns the data or is empty.
StrVec unpack_keys(const char *data, uint64_t bytes, uint64_t n) {
    if (n && !data) throw Error(MCS_E_INVALID_ARG, "key_data is NULL");
    StrVec keys;
    keys.reserve(n);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        const void *end = pos < bytes ? std::memchr(data + pos, 0, bytes - pos) : nullptr;
        if (!end)
            throw Error(MCS_E_INVALID_ARG, "key #" + std::to_string(i) + " overruns key_bytes (" +
                                               std::to_string(bytes) + ")");
        const uint64_t len = uint64_t(static_cast<const char *>(end) - (data + pos));
        if (len == 0) throw Error(MCS_E_INVALID_ARG, "key #" + std::to_string(i) + " is empty");
        keys.emplace_back(data + pos, len);
        pos += len + 1;
    }
    return keys;
}

template <class T>
void need(const T *p, uint64_t count, const char *what) {
    if (count && !p) throw Error(MCS_E_INVALID_ARG, std::string(what) + " is NULL");
}

}  // namespace

int Engine::register_buffer(void *ptr, uint64_t size) {
    return backend_->register_buffer(ptr, size_t(size));
}

int Engine::unregister_buffer(void *ptr) {
    return backend_->unregister_buffer(ptr);
}

int Engine::get_into_ranges(const mcs_ranges &r) {
    const auto t0 = Clock::now();
    const uint64_t nb = r.n_bufs;
    need(r.bufs, nb, "bufs");
    need(r.keys_per_buf, nb, "keys_per_buf");
    uint64_t nk = 0;
    for (uint64_t b = 0; b < nb; b++) {
        if (r.keys_per_buf[b] > (uint64_t(1) << 32))
            throw Error(MCS_E_INVALID_ARG, "keys_per_buf[" + std::to_string(b) + "] is too large");
        nk += r.keys_per_buf[b];
    }
    StrVec flat = unpack_keys(r.key_data, r.key_bytes, nk);
    need(r.ranges_per_key, nk, "ranges_per_key");
    uint64_t nr = 0;
    for (uint64_t k = 0; k < nk; k++) {
        if (r.ranges_per_key[k] > (uint64_t(1) << 32))
            throw Error(MCS_E_INVALID_ARG,
                        "ranges_per_key[" + std::to_string(k) + "] is too large");
        nr += r.ranges_per_key[k];
    }
    need(r.dst_offsets, nr, "dst_offsets");
    need(r.src_offsets, nr, "src_offsets");
    need(r.sizes, nr, "sizes");
    need(r.results, nr, "results");

    // Mooncake's nested vectors: per buffer, per key, per range.
    using Nest = std::vector<std::vector<std::vector<size_t>>>;
    std::vector<void *> bufs(r.bufs, r.bufs + nb);
    std::vector<StrVec> keys(nb);
    Nest dst(nb), src(nb), sizes(nb);
    uint64_t k = 0, q = 0;
    for (uint64_t b = 0; b < nb; b++) {
        const uint64_t n = r.keys_per_buf[b];
        keys[b].assign(flat.begin() + long(k), flat.begin() + long(k + n));
        dst[b].resize(n);
        src[b].resize(n);
        sizes[b].resize(n);
        for (uint64_t j = 0; j < n; j++, k++) {
            const uint64_t m = r.ranges_per_key[k];
            dst[b][j].assign(r.dst_offsets + q, r.dst_offsets + q + m);
            src[b][j].assign(r.src_offsets + q, r.src_offsets + q + m);
            sizes[b][j].assign(r.sizes + q, r.sizes + q + m);
            q += m;
        }
    }
    auto out = nr ? backend_->get_into_ranges(bufs, keys, dst, src, sizes)
                  : std::vector<std::vector<std::vector<int64_t>>>(nb);

    // Flatten back in the caller's order; a range Mooncake left out fails.
    uint64_t bytes = 0, failed = 0;
    std::vector<std::pair<int, uint64_t>> errors;
    q = 0;
    for (uint64_t b = 0; b < nb; b++) {
        for (uint64_t j = 0; j < keys[b].size(); j++) {
            for (uint64_t i = 0; i < dst[b][j].size(); i++, q++) {
                const bool have = b < out.size() && j < out[b].size() && i < out[b][j].size();
                const int64_t v = have ? out[b][j][i] : int64_t(-600);
                r.results[q] = v;
                if (v >= 0) {
                    bytes += uint64_t(v);
                } else if (v != kObjectNotFound) {
                    failed++;
                    bool seen = false;
                    for (auto &e : errors)
                        if (e.first == int(v)) {
                            e.second++;
                            seen = true;
                        }
                    if (!seen) errors.emplace_back(int(v), 1);
                }
            }
        }
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    int bucket = 0;
    if (us >= 1.0) bucket = std::min(kOpBuckets - 1, int(std::floor(std::log2(us))) + 1);
    std::lock_guard<std::mutex> lk(stats_mu_);
    OpCounters &o = ops_[MCS_OP_GET];
    o.calls++;
    o.keys += nk;
    o.failed_calls += failed ? 1 : 0;
    o.failed_keys += failed;
    o.bytes += bytes;
    o.sum_us += us;
    o.buckets[bucket]++;
    for (auto &e : errors) o.add_error(e.first, e.second);
    return MCS_OK;
}

}  // namespace mcs
