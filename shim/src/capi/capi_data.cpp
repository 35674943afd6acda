// The extern "C" surface of the shim, part two: the data calls (batches,
// single keys, completions, held values, counters, the cluster-wide calls),
// each run on a live, open client through the wrappers of capi.hpp.
#include <cstdlib>

#include "capi.hpp"

using namespace mcs::capi;

extern "C" {

int mcs_client_submit(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!batch) throw mcs::Error(MCS_E_INVALID_ARG, "batch is NULL");
        return e.submit(read_sized(batch, "struct mcs_batch"), false, id_out);
    });
}

int mcs_client_run(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!batch) throw mcs::Error(MCS_E_INVALID_ARG, "batch is NULL");
        return e.submit(read_sized(batch, "struct mcs_batch"), true, id_out);
    });
}

int mcs_client_run_one(mcs_client *c, int64_t *result_out, int op, int flags, const char *key,
                       uint64_t key_len, void *buf, uint64_t size) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!result_out) throw mcs::Error(MCS_E_INVALID_ARG, "result_out is NULL");
        if (!key) throw mcs::Error(MCS_E_INVALID_ARG, "key is NULL");
        if (op == MCS_OP_GET_BUFFER)
            throw mcs::Error(
                MCS_E_INVALID_ARG,
                "get_buffer needs mcs_client_run(): its value is released by batch id");
        return e.run_one(op, flags, key, key_len, buf, size, result_out);
    });
}

int mcs_client_get_into_ranges(mcs_client *c, const struct mcs_ranges *ranges) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!ranges) throw mcs::Error(MCS_E_INVALID_ARG, "ranges is NULL");
        return e.get_into_ranges(read_sized(ranges, "struct mcs_ranges"));
    });
}

int mcs_client_session(mcs_client *c, const struct mcs_session *session) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!session) throw mcs::Error(MCS_E_INVALID_ARG, "session is NULL");
        return e.session(read_sized(session, "struct mcs_session"));
    });
}

int mcs_client_run_keys(mcs_client *c, int64_t *results, int op, int flags, const char *key_data,
                        uint64_t key_bytes, uint64_t n) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (op != MCS_OP_EXISTS && op != MCS_OP_SIZE && op != MCS_OP_REMOVE)
            throw mcs::Error(MCS_E_INVALID_ARG,
                             "mcs_client_run_keys runs exists, size and remove only (op " +
                                 std::to_string(op) + "): use mcs_client_run()");
        mcs_batch b{};
        b.struct_size = sizeof b;
        b.op = op;
        b.flags = flags;
        b.n = n;
        b.key_data = key_data;
        b.key_bytes = key_bytes;
        b.results = results;
        return e.submit(b, true, nullptr);
    });
}

int mcs_client_release(mcs_client *c, uint64_t id) {
    return with_client(c, [&](mcs::Engine &e) { return e.release(id); });
}

int mcs_client_withdraw(mcs_client *c, uint64_t id) {
    return with_open_client(c, [&](mcs::Engine &e) { return e.withdraw(id); });
}

int mcs_client_remove_all(mcs_client *c, int64_t *removed_out, int force) {
    return with_open_client(c, [&](mcs::Engine &e) -> int {
        if (!removed_out) throw mcs::Error(MCS_E_INVALID_ARG, "removed_out is NULL");
        int64_t n = e.remove_all(force != 0);
        if (n < 0) return fail(int(n), "removeAll failed: " + mcs::describe(int(n)));
        *removed_out = n;
        return MCS_OK;
    });
}

int mcs_client_replica_desc(mcs_client *c, char **json_out, uint64_t *len_out, const char *key_data,
                            uint64_t key_bytes, uint64_t n) {
    if (json_out) *json_out = nullptr;
    return with_open_client(c, [&](mcs::Engine &e) -> int {
        if (!json_out) throw mcs::Error(MCS_E_INVALID_ARG, "json_out is NULL");
        if (n && !key_data) throw mcs::Error(MCS_E_INVALID_ARG, "key_data is NULL");
        mcs::StrVec keys;
        keys.reserve(n);
        uint64_t at = 0;
        for (uint64_t i = 0; i < n; i++) {
            const void *nul =
                at < key_bytes ? std::memchr(key_data + at, 0, key_bytes - at) : nullptr;
            if (!nul) throw mcs::Error(MCS_E_INVALID_ARG, "keys overrun key_bytes");
            uint64_t len = uint64_t(static_cast<const char *>(nul) - (key_data + at));
            if (!len) throw mcs::Error(MCS_E_INVALID_ARG, "empty key");
            keys.emplace_back(key_data + at, len);
            at += len + 1;
        }
        std::string json = "[";
        if (n) {
            std::vector<std::string> lists = e.replica_desc(keys);
            for (size_t i = 0; i < lists.size(); i++) {
                if (i) json += ",";
                json += lists[i].empty() ? "null" : lists[i];
            }
        }
        json += "]";
        char *out = static_cast<char *>(std::malloc(json.size() + 1));
        if (!out) throw mcs::Error(MCS_E_NOMEM, "out of memory");
        std::memcpy(out, json.c_str(), json.size() + 1);
        *json_out = out;
        if (len_out) *len_out = json.size();
        return MCS_OK;
    });
}

void mcs_replica_desc_free(char *json) {
    std::free(json);
}

int mcs_client_remove_by_regex(mcs_client *c, int64_t *removed_out, const char *pattern,
                               int force) {
    return with_open_client(c, [&](mcs::Engine &e) -> int {
        if (!removed_out) throw mcs::Error(MCS_E_INVALID_ARG, "removed_out is NULL");
        if (!pattern || !*pattern) throw mcs::Error(MCS_E_INVALID_ARG, "pattern is NULL or empty");
        int64_t n = e.remove_by_regex(pattern, force != 0);
        if (n < 0)
            return fail(int(n), "removeByRegex('" + std::string(pattern) +
                                    "') failed: " + mcs::describe(int(n)) +
                                    (n == -600 ? " (is it a valid ECMAScript regex?)" : ""));
        *removed_out = n;
        return MCS_OK;
    });
}

int mcs_client_health_check(mcs_client *c, int *status_out) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!status_out) throw mcs::Error(MCS_E_INVALID_ARG, "status_out is NULL");
        if (e.enter() != MCS_OK) {  // closed: what Mooncake says of a torn-down client
            *status_out = 1;
            return MCS_OK;
        }
        try {
            *status_out = e.health_check();
        } catch (...) {
            e.leave();
            throw;
        }
        e.leave();
        return MCS_OK;
    });
}

int mcs_gather(uint64_t *written_out, void *dst, uint64_t cap, const void *const *values,
               const int64_t *results, uint64_t n) {
    return guarded([&] {
        if (!written_out || !values || !results || (!dst && cap))
            throw mcs::Error(MCS_E_INVALID_ARG, "written_out, dst, values or results is NULL");
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (results[i] < 0) continue;
            if (!values[i] && results[i] > 0)
                throw mcs::Error(MCS_E_INVALID_ARG, "value #" + std::to_string(i) + " is NULL");
            total += uint64_t(results[i]);
        }
        if (total > cap)
            throw mcs::Error(MCS_E_INVALID_ARG, "the values need " + std::to_string(total) +
                                                    " bytes but dst holds " + std::to_string(cap));
        auto *out = static_cast<char *>(dst);
        for (uint64_t i = 0; i < n; i++) {
            if (results[i] <= 0) continue;
            std::memcpy(out, values[i], size_t(results[i]));
            out += results[i];
        }
        *written_out = total;
        return MCS_OK;
    });
}

int mcs_client_drain(mcs_client *c, struct mcs_completion *out, size_t cap) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!cap) return e.drain(nullptr, 0, 0);
        if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
        return e.drain(out, cap, out->struct_size);
    });
}

int mcs_client_wait(mcs_client *c, int timeout_ms) {
    return with_client(c, [&](mcs::Engine &e) { return e.wait(timeout_ms); });
}

int mcs_client_lane_stats(mcs_client *c, int lane, struct mcs_lane_stats *out) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
        mcs_lane_stats full{};
        e.lane_stats(lane, &full);
        full.struct_size = sizeof full;
        write_sized(out, full, "struct mcs_lane_stats");
        return MCS_OK;
    });
}

int mcs_client_op_stats(mcs_client *c, int op, struct mcs_op_stats *out) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
        mcs::OpCounters o;
        e.op_stats(op, &o);
        mcs_op_stats full{};
        full.struct_size = sizeof full;
        full.calls = o.calls;
        full.keys = o.keys;
        full.failed_calls = o.failed_calls;
        full.failed_keys = o.failed_keys;
        full.bytes = o.bytes;
        full.timeouts = o.timeouts;
        full.no_space = o.no_space;
        full.sum_us = o.sum_us;
        static_assert(sizeof full.buckets == sizeof o.buckets, "bucket count");
        std::memcpy(full.buckets, o.buckets, sizeof full.buckets);
        static_assert(sizeof full.error_codes == sizeof o.error_codes, "error slots");
        std::memcpy(full.error_codes, o.error_codes, sizeof full.error_codes);
        std::memcpy(full.error_keys, o.error_keys, sizeof full.error_keys);
        write_sized(out, full, "struct mcs_op_stats");
        return MCS_OK;
    });
}

int mcs_client_integrity_stats(mcs_client *c, struct mcs_integrity_stats *out) {
    int rc = MCS_OK;
    mcs_client *h = acquire(c, rc);
    if (!h) return rc;
    rc = guarded([&] {
        if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
        mcs_integrity_stats full{};
        full.struct_size = sizeof full;
        if (const auto &n = h->integrity) {
            full.enabled = 1;
            full.written = n->written;
            full.verified = n->verified;
            full.retried = n->retried;
            full.failed = n->failed;
        }
        write_sized(out, full, "struct mcs_integrity_stats");
        return MCS_OK;
    });
    release(h);
    return rc;
}

int mcs_debug_replica_compare(char *diff, size_t cap, const void *native,
                              const struct mcs_replica_options *opts) {
    return guarded([&] {
        if (!native) throw mcs::Error(MCS_E_INVALID_ARG, "native is NULL");
        if (!mcs::mooncake_loaded())
            throw mcs::Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
        std::string text;
        int n = mcs::compare_replicate_config(mcs::loaded_layout(), native,
                                              mcs::read_replica_options(opts), text);
        if (diff && cap) std::snprintf(diff, cap, "%s", text.c_str());
        return n;
    });
}

int mcs_debug_replica_assign(void *native, const struct mcs_replica_options *opts) {
    return guarded([&] {
        if (!native) throw mcs::Error(MCS_E_INVALID_ARG, "native is NULL");
        if (!mcs::mooncake_loaded())
            throw mcs::Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
        mcs::assign_replicate_config(mcs::loaded_layout(), native, mcs::read_replica_options(opts));
        return MCS_OK;
    });
}

}  // extern "C"
