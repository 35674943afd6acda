// Mooncake's session API (0.3.13 and later): Engine::session checks the
// caller's struct mcs_session (mcs_client_session), builds Mooncake's vectors
// and makes one backend call on the calling thread.  RealClient keeps the sessions themselves (the
// reservations of a put session, the queried replicas and lease of a get
// session), so their answers are Mooncake's own.
#include <cstring>

#include "engine.hpp"

namespace mcs {

namespace {

StrVec session_keys(const mcs_session &s) {
    if (s.n && !s.key_data) throw Error(MCS_E_INVALID_ARG, "key_data is NULL");
    StrVec keys;
    keys.reserve(s.n);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < s.n; i++) {
        const void *end =
            pos < s.key_bytes ? std::memchr(s.key_data + pos, 0, s.key_bytes - pos) : nullptr;
        if (!end)
            throw Error(MCS_E_INVALID_ARG, "key #" + std::to_string(i) + " overruns key_bytes (" +
                                               std::to_string(s.key_bytes) + ")");
        const uint64_t len = uint64_t(static_cast<const char *>(end) - (s.key_data + pos));
        keys.emplace_back(s.key_data + pos, len);
        pos += len + 1;
    }
    return keys;
}

template <class T>
void need(const T *p, uint64_t count, const char *what) {
    if (count && !p) throw Error(MCS_E_INVALID_ARG, std::string(what) + " is NULL");
}

}  // namespace

int Engine::session(const mcs_session &s) {
    if (s.op < MCS_SESSION_PUT_START || s.op > MCS_SESSION_GET_END)
        throw Error(MCS_E_INVALID_ARG, "op " + std::to_string(s.op) + " is not an mcs_session_op");
    if (s.n > (uint64_t(1) << 32)) throw Error(MCS_E_INVALID_ARG, "n is too large");
    need(s.results, s.op == MCS_SESSION_GET_END ? 1 : s.n, "results");
    SessionCall call;
    call.op = s.op;
    call.keys = session_keys(s);
    if (s.op == MCS_SESSION_PUT_START) {
        need(s.sizes, s.n, "sizes");
        call.sizes.assign(s.sizes, s.sizes + s.n);
        if (s.replica) call.replica = read_replica_options(s.replica);
        backend_->check_replica(call.replica);
    }
    if (s.op == MCS_SESSION_PUT_RANGES || s.op == MCS_SESSION_GET_RANGES) {
        need(s.ranges_per_key, s.n, "ranges_per_key");
        uint64_t nr = 0;
        for (uint64_t k = 0; k < s.n; k++) {
            if (s.ranges_per_key[k] > (uint64_t(1) << 32))
                throw Error(MCS_E_INVALID_ARG,
                            "ranges_per_key[" + std::to_string(k) + "] is too large");
            nr += s.ranges_per_key[k];
        }
        need(s.bufs, nr, "bufs");
        need(s.range_sizes, nr, "range_sizes");
        need(s.offsets, nr, "offsets");
        call.bufs.resize(s.n);
        call.range_sizes.resize(s.n);
        call.offsets.resize(s.n);
        uint64_t q = 0;
        for (uint64_t k = 0; k < s.n; k++) {
            const uint64_t m = s.ranges_per_key[k];
            call.bufs[k].assign(s.bufs + q, s.bufs + q + m);
            call.range_sizes[k].assign(s.range_sizes + q, s.range_sizes + q + m);
            call.offsets[k].assign(s.offsets + q, s.offsets + q + m);
            q += m;
        }
    }
    std::vector<int> out = backend_->session(call);
    const uint64_t want = s.op == MCS_SESSION_GET_END ? 1 : s.n;
    for (uint64_t i = 0; i < want; i++) s.results[i] = i < out.size() ? out[i] : int64_t(-600);
    return MCS_OK;
}

}  // namespace mcs
