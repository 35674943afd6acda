// The extern "C" surface of the shim: handle validation, fork detection,
// per-thread last-error messages, and a try/catch around every body.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "internal.hpp"

// A live client: the engine plus a reference count so a handle freed on one
// thread while another is inside a call stays valid until that call returns.
struct mcs_client {
    std::unique_ptr<mcs::Engine> engine;
    pid_t pid = 0;
    std::atomic<int> refs{1};
};

namespace {

thread_local std::string t_last_error;

std::mutex g_registry_mu;
std::unordered_set<mcs_client *> *g_registry = new std::unordered_set<mcs_client *>();

// fork() while another thread holds the registry lock must not leave the
// child with it locked.
// getpid() is a system call; keep it cached, refreshed in every child.
std::atomic<pid_t> g_pid{getpid()};
// The process that set up the first Mooncake client.  Mooncake's process-wide
// state (its transfer engine, RPC threads, connections) does not survive
// fork(): a client set up in a child of that process hangs in the master
// connect, so the child is refused at once.
std::atomic<pid_t> g_mooncake_pid{0};
void atfork_prepare() {
    g_registry_mu.lock();
}
void atfork_parent() {
    g_registry_mu.unlock();
}
void atfork_child() {
    g_pid.store(getpid());
    g_registry_mu.unlock();
}
[[maybe_unused]] const int g_atfork = pthread_atfork(atfork_prepare, atfork_parent, atfork_child);

int fail(int code, const std::string &msg) {
    t_last_error = msg.empty() ? mcs::describe(code) : msg;
    return code;
}

int ok() {
    t_last_error.clear();
    return MCS_OK;
}

// Takes a reference on a live handle; nullptr (with rc set) otherwise.
mcs_client *acquire(mcs_client *c, int &rc) {
    if (!c) {
        rc = fail(MCS_E_INVALID_HANDLE, "client handle is NULL");
        return nullptr;
    }
    std::lock_guard<std::mutex> lk(g_registry_mu);
    if (!g_registry->count(c)) {
        rc = fail(MCS_E_INVALID_HANDLE, "client handle is not a live client (freed?)");
        return nullptr;
    }
    c->refs.fetch_add(1);
    return c;
}

bool forked(mcs_client *c) {
    return c->pid != g_pid.load(std::memory_order_relaxed);
}

void release(mcs_client *c) {
    if (c->refs.fetch_sub(1) == 1) {
        if (!forked(c)) delete c;
        // In a forked child the engine's threads and Mooncake's state belong
        // to the parent: leak them rather than touch them.
    }
}

// Runs `body` (returning a status) with every exception turned into a status
// and a message: no C++ exception crosses the C boundary.
template <class F>
int guarded(F &&body) {
    int rc;
    try {
        rc = body();
        if (rc >= 0) ok();
    } catch (const mcs::Error &e) {
        rc = fail(e.code, e.what());
    } catch (const std::bad_alloc &) {
        rc = fail(MCS_E_NOMEM, "out of memory");
    } catch (const std::exception &e) {
        rc = fail(MCS_E_INTERNAL, std::string("unexpected exception: ") + e.what());
    } catch (...) {
        rc = fail(MCS_E_INTERNAL, "unexpected non-standard exception");
    }
    return rc;
}

// Runs `body` on a live, open client of this process.
template <class F>
int with_open_client(mcs_client *c, F &&body) {
    int rc = MCS_OK;
    mcs_client *h = acquire(c, rc);
    if (!h) return rc;
    if (forked(h)) {
        release(h);
        return fail(MCS_E_FORKED, "this client was created in process " + std::to_string(h->pid) +
                                      " and cannot be used after fork(); create a new one");
    }
    rc = h->engine->enter();
    if (rc) {
        release(h);
        return fail(rc, "the client is closed");
    }
    rc = guarded([&] { return body(*h->engine); });
    h->engine->leave();
    release(h);
    return rc;
}

// Like with_open_client, but also allowed after close (drain, stats, fd).
template <class F>
int with_client(mcs_client *c, F &&body) {
    int rc = MCS_OK;
    mcs_client *h = acquire(c, rc);
    if (!h) return rc;
    if (forked(h)) {
        release(h);
        return fail(MCS_E_FORKED, "client used in a forked child");
    }
    rc = guarded([&] { return body(*h->engine); });
    release(h);
    return rc;
}

// Reads a caller's struct that starts with `uint32_t struct_size`: only the
// bytes the caller knows, the rest zero (their defaults).
template <class T>
T read_sized(const T *in, const char *what) {
    T out{};
    if (!in) return out;
    uint32_t size = in->struct_size;
    if (size < sizeof(uint32_t))
        throw mcs::Error(MCS_E_INVALID_ARG, std::string(what) + ".struct_size is " +
                                                std::to_string(size) + ": set it to sizeof(" +
                                                what + ")");
    std::memcpy(static_cast<void *>(&out), in, std::min<size_t>(size, sizeof(T)));
    out.struct_size = uint32_t(sizeof(T));
    return out;
}

// Fills a caller's struct that starts with `uint32_t struct_size` with at
// most that many bytes of `full`.
template <class T>
void write_sized(T *out, const T &full, const char *what) {
    if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
    uint32_t size = out->struct_size;
    if (size < sizeof(uint32_t))
        throw mcs::Error(MCS_E_INVALID_ARG, std::string(what) + ".struct_size is " +
                                                std::to_string(size) + ": set it to sizeof(" +
                                                what + ")");
    size_t n = std::min<size_t>(size, sizeof(T));
    std::memcpy(static_cast<void *>(out), &full, n);
    out->struct_size = uint32_t(n);
}

}  // namespace

extern "C" {

int mcs_version(void) {
    return MCS_VERSION_MAJOR * 10000 + MCS_VERSION_MINOR * 100 + MCS_VERSION_PATCH;
}

#define MCS_STR2(x) #x
#define MCS_STR(x) MCS_STR2(x)
const char *mcs_version_string(void) {
    return MCS_STR(MCS_VERSION_MAJOR) "." MCS_STR(MCS_VERSION_MINOR) "." MCS_STR(MCS_VERSION_PATCH);
}

int mcs_abi_version(void) {
    return MCS_ABI_VERSION;
}

const char *mcs_error_name(int code) {
    return mcs::error_name(code);
}

const char *mcs_strerror(int code) {
    return mcs::error_text(code);
}

const char *mcs_last_error(void) {
    return t_last_error.c_str();
}

int mcs_load(const char *store_so_path) {
    return guarded([&] {
        std::string msg;
        int rc = mcs::load_mooncake(store_so_path, msg);
        return rc ? fail(rc, msg) : MCS_OK;
    });
}

int mcs_loaded(void) {
    return mcs::mooncake_loaded() ? 1 : 0;
}

int mcs_set_log_level(int level) {
    int rc = mcs::set_log_level(level);
    return rc ? fail(rc, "log level must be 0 (INFO) .. 3 (silent)") : ok();
}

int mcs_client_create(mcs_client **out, const char *const *keys, const char *const *values,
                      size_t n, const struct mcs_lanes *lanes, int probe_timeout_ms) {
    if (!out) return fail(MCS_E_INVALID_ARG, "out is NULL");
    *out = nullptr;
    if (n && (!keys || !values)) return fail(MCS_E_INVALID_ARG, "keys or values is NULL");
    return guarded([&]() -> int {
        mcs::StrVec k, v;
        for (size_t i = 0; i < n; i++) {
            if (!keys[i] || !values[i])
                return fail(MCS_E_INVALID_ARG,
                            "config entry #" + std::to_string(i) + " has a NULL key or value");
            if (!keys[i][0])
                return fail(MCS_E_INVALID_ARG,
                            "config entry #" + std::to_string(i) + " has an empty key");
            k.emplace_back(keys[i]);
            v.emplace_back(values[i]);
        }
        const pid_t me = g_pid.load();
        const pid_t owner = g_mooncake_pid.load();
        if (owner != 0 && owner != me)
            return fail(MCS_E_FORKED,
                        "this process was forked from process " + std::to_string(owner) +
                            ", which had set up a Mooncake client: Mooncake's process-wide "
                            "state does not survive fork(), so no client can be created here; "
                            "start children with the 'spawn' or 'forkserver' method "
                            "(multiprocessing.set_start_method), or create clients only in "
                            "processes that never had one");
        auto h = std::make_unique<mcs_client>();
        h->pid = me;
        // Validate the lane layout before touching the network.
        mcs_lanes layout = read_sized(lanes, "struct mcs_lanes");
        mcs::Engine::validate_lanes(&layout);
        auto backend = mcs::make_mooncake_backend(k, v, probe_timeout_ms);
        h->engine = std::make_unique<mcs::Engine>(std::move(backend), &layout);
        {
            std::lock_guard<std::mutex> lk(g_registry_mu);
            g_registry->insert(h.get());
        }
        pid_t unset = 0;
        g_mooncake_pid.compare_exchange_strong(unset, me);
        *out = h.release();
        return MCS_OK;
    });
}

}  // extern "C"

namespace {

// Closes a live handle (a forked child only marks it closed).  for_exit skips
// Mooncake's teardown.
int close_client(mcs_client *c, bool for_exit) {
    int rc = MCS_OK;
    mcs_client *h = acquire(c, rc);
    if (!h) return rc;
    rc = guarded([&] {
        if (forked(h))
            h->engine->abandon();
        else if (for_exit)
            h->engine->close_for_exit();
        else
            h->engine->close();
        return MCS_OK;
    });
    release(h);
    return rc;
}

}  // namespace

extern "C" {

int mcs_client_close(mcs_client *c) {
    return close_client(c, false);
}

int mcs_client_close_for_exit(mcs_client *c) {
    return close_client(c, true);
}

int mcs_client_hostname(mcs_client *c, char *buf, size_t cap) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!buf || !cap) throw mcs::Error(MCS_E_INVALID_ARG, "buf is NULL or cap is 0");
        std::string name = e.hostname();
        if (name.size() + 1 > cap)
            throw mcs::Error(MCS_E_INVALID_ARG, "buf too small for the hostname");
        std::memcpy(buf, name.c_str(), name.size() + 1);
        return MCS_OK;
    });
}

void mcs_client_free(mcs_client *c) {
    if (!c) return;
    {
        std::lock_guard<std::mutex> lk(g_registry_mu);
        if (!g_registry->erase(c)) return;  // never created or already freed
    }
    try {
        if (forked(c))
            c->engine->abandon();
        else
            c->engine->close();
    } catch (...) {
    }
    release(c);  // the creator's reference
}

int mcs_client_set_default_replicate_config(mcs_client *c, const void *rc) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!rc) throw mcs::Error(MCS_E_INVALID_ARG, "ReplicateConfig pointer is NULL");
        e.set_default_rcfg(rc);
        return MCS_OK;
    });
}

const void *mcs_replicate_config_typeid(void) {
    return mcs::replicate_config_typeid();
}

int mcs_client_fd(mcs_client *c, int *fd_out) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!fd_out) throw mcs::Error(MCS_E_INVALID_ARG, "fd_out is NULL");
        *fd_out = e.fd();
        return MCS_OK;
    });
}

int mcs_client_register_l1(mcs_client *c, void *ptr, uint64_t size, uint64_t max_block) {
    return with_open_client(c, [&](mcs::Engine &e) { return e.register_l1(ptr, size, max_block); });
}

int mcs_client_unregister_l1(mcs_client *c) {
    return with_open_client(c, [&](mcs::Engine &e) { return e.unregister_l1(); });
}

int mcs_client_l1_blocks(mcs_client *c, uint32_t *blocks_out) {
    return with_client(c, [&](mcs::Engine &e) {
        if (!blocks_out) throw mcs::Error(MCS_E_INVALID_ARG, "blocks_out is NULL");
        *blocks_out = e.l1_blocks();
        return MCS_OK;
    });
}

int mcs_submit(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!batch) throw mcs::Error(MCS_E_INVALID_ARG, "batch is NULL");
        return e.submit(read_sized(batch, "struct mcs_batch"), false, id_out);
    });
}

int mcs_run(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!batch) throw mcs::Error(MCS_E_INVALID_ARG, "batch is NULL");
        return e.submit(read_sized(batch, "struct mcs_batch"), true, id_out);
    });
}

int mcs_run_one(mcs_client *c, int64_t *result_out, int op, int flags, const char *key,
                uint64_t key_len, void *buf, uint64_t size) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (!result_out) throw mcs::Error(MCS_E_INVALID_ARG, "result_out is NULL");
        if (!key) throw mcs::Error(MCS_E_INVALID_ARG, "key is NULL");
        if (op == MCS_OP_GET_BUFFER)
            throw mcs::Error(MCS_E_INVALID_ARG,
                             "get_buffer needs mcs_run(): its value is released by batch id");
        const uint64_t offsets[2] = {0, key_len};
        void *const bufs[1] = {buf};
        const uint64_t sizes[1] = {size};
        mcs_batch b{};
        b.struct_size = sizeof b;
        b.op = op;
        b.flags = flags;
        b.n = 1;
        b.key_data = key;
        b.key_bytes = key_len;
        b.key_offsets = offsets;
        if (buf || size) {
            b.bufs = bufs;
            b.sizes = sizes;
        }
        b.results = result_out;
        return e.submit(b, true, nullptr);
    });
}

int mcs_run_keys(mcs_client *c, int64_t *results, int op, int flags, const char *key_data,
                 uint64_t key_bytes, uint64_t n) {
    return with_open_client(c, [&](mcs::Engine &e) {
        if (op != MCS_OP_EXISTS && op != MCS_OP_SIZE && op != MCS_OP_REMOVE)
            throw mcs::Error(MCS_E_INVALID_ARG,
                             "mcs_run_keys runs exists, size and remove only (op " +
                                 std::to_string(op) + "): use mcs_run()");
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

int mcs_release(mcs_client *c, uint64_t id) {
    return with_client(c, [&](mcs::Engine &e) { return e.release(id); });
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

int mcs_drain(mcs_client *c, struct mcs_completion *out, size_t cap, size_t elem_size) {
    return with_client(c, [&](mcs::Engine &e) { return e.drain(out, cap, elem_size); });
}

int mcs_wait(mcs_client *c, int timeout_ms) {
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

}  // extern "C"
