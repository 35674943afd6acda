// The extern "C" surface of the shim, part one: versions, error names, loading
// Mooncake, and a client's life (create, close, free, its settings and L1);
// with the handle registry, fork detection and per-thread last-error messages
// that every entry point uses (capi.hpp).  The data calls are in capi_data.cpp.
#include "capi.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "../engine/reaper.hpp"
#include "../mooncake/replica_choice.hpp"

namespace {

thread_local std::string t_last_error;

std::mutex g_registry_mu;
std::unordered_set<mcs_client *> *g_registry = new std::unordered_set<mcs_client *>();

// getpid() is a system call; keep it cached, refreshed in every child.
std::atomic<pid_t> g_pid{getpid()};
// The process that set up the first Mooncake client.  Mooncake's process-wide
// state (its transfer engine, RPC threads, connections) does not survive
// fork(): a client set up in a child of that process hangs in the master
// connect, so the child is refused at once.
std::atomic<pid_t> g_mooncake_pid{0};
// fork() while another thread holds the registry lock must not leave the
// child with it locked; the child also refreshes g_pid.
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

}  // namespace

namespace mcs::capi {

int fail(int code, const std::string &msg) {
    t_last_error = msg.empty() ? mcs::describe(code) : msg;
    return code;
}

int ok() {
    t_last_error.clear();
    return MCS_OK;
}

// Takes a reference on a live handle; nullptr (with rc set) otherwise.
// Handles once freed (kept reachable: see struct mcs_client).
std::vector<mcs_client *> *g_freed = new std::vector<mcs_client *>();
// The last handle this thread found in the registry: its struct is never freed,
// so checking it again needs no lock, only its `freed` flag.
thread_local mcs_client *t_known = nullptr;

mcs_client *acquire(mcs_client *c, int &rc) {
    if (!c) {
        rc = fail(MCS_E_INVALID_HANDLE, "client handle is NULL");
        return nullptr;
    }
    if (c != t_known) {
        std::lock_guard<std::mutex> lk(g_registry_mu);
        if (!g_registry->count(c)) {
            rc = fail(MCS_E_INVALID_HANDLE, "client handle is not a live client (freed?)");
            return nullptr;
        }
        t_known = c;
    }
    c->refs.fetch_add(1);
    if (c->freed.load()) {  // freed since this thread last found it
        c->refs.fetch_sub(1);
        rc = fail(MCS_E_INVALID_HANDLE, "client handle is not a live client (freed?)");
        return nullptr;
    }
    return c;
}

bool forked(mcs_client *c) {
    return c->pid != g_pid.load(std::memory_order_relaxed);
}

void release(mcs_client *c) {
    if (c->refs.fetch_sub(1) == 1) {
        if (!forked(c))
            c->engine.reset();
        else  // the engine's threads and Mooncake's state belong to the parent: leak them
            (void)c->engine.release();
    }
}

}  // namespace mcs::capi

using namespace mcs::capi;

namespace {

// The rest of a client's creation, whichever Mooncake client it drives: the
// fork check, the lanes, the engine and the registry.
template <class MakeBackend>
int create_client(mcs_client **out, const struct mcs_lanes *lanes, bool verify,
                  MakeBackend make_backend) {
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
    auto backend = make_backend();
    if (verify) {
        h->integrity = std::make_shared<mcs::IntegrityCounters>();
        backend = mcs::make_integrity_backend(std::move(backend), h->integrity);
    }
    h->engine = std::make_unique<mcs::Engine>(std::move(backend), &layout);
    {
        std::lock_guard<std::mutex> lk(g_registry_mu);
        g_registry->insert(h.get());
    }
    pid_t unset = 0;
    g_mooncake_pid.compare_exchange_strong(unset, me);
    *out = h.release();
    return MCS_OK;
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

int mcs_load(const char *store_so_path, const char *mooncake_version) {
    return guarded([&] {
        std::string msg;
        int rc = mcs::load_mooncake(store_so_path, mooncake_version, msg);
        return rc ? fail(rc, msg) : MCS_OK;
    });
}

int mcs_loaded(void) {
    return mcs::mooncake_loaded() ? 1 : 0;
}

const char *mcs_replica_layout(void) {
    return mcs::mooncake_loaded() ? mcs::layout_name(mcs::loaded_layout()) : "";
}

int mcs_replica_options_init(struct mcs_replica_options *opts) {
    if (!opts) return fail(MCS_E_INVALID_ARG, "opts is NULL");
    mcs::init_replica_options(opts);
    return ok();
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
        bool verify = false;
        for (size_t i = 0; i < n; i++) {
            if (!keys[i] || !values[i])
                return fail(MCS_E_INVALID_ARG,
                            "config entry #" + std::to_string(i) + " has a NULL key or value");
            if (!keys[i][0])
                return fail(MCS_E_INVALID_ARG,
                            "config entry #" + std::to_string(i) + " has an empty key");
            if (std::strcmp(keys[i], "integrity") == 0) {  // the shim's own, not Mooncake's
                const std::string mode = values[i];
                if (mode != "crc32c" && mode != "none" && !mode.empty())
                    return fail(MCS_E_INVALID_ARG,
                                "integrity: '" + mode + "' is not a known mode (crc32c, none)");
                verify = mode == "crc32c";
                continue;
            }
            k.emplace_back(keys[i]);
            v.emplace_back(values[i]);
        }
        return create_client(out, lanes, verify,
                             [&] { return mcs::make_mooncake_backend(k, v, probe_timeout_ms); });
    });
}

int mcs_client_create_dummy(mcs_client **out, uint64_t mem_pool_size, uint64_t local_buffer_size,
                            const char *server_address, const struct mcs_lanes *lanes,
                            int probe_timeout_ms) {
    if (!out) return fail(MCS_E_INVALID_ARG, "out is NULL");
    *out = nullptr;
    if (!server_address) return fail(MCS_E_INVALID_ARG, "server_address is NULL");
    return guarded([&]() -> int {
        const std::string addr = server_address;
        return create_client(out, lanes, false, [&] {
            return mcs::make_dummy_backend(size_t(mem_pool_size), size_t(local_buffer_size), addr,
                                           probe_timeout_ms);
        });
    });
}

int mcs_shm_alloc(void **ptr_out, uint64_t size) {
    if (!ptr_out) return fail(MCS_E_INVALID_ARG, "ptr_out is NULL");
    *ptr_out = nullptr;
    return guarded([&] {
        *ptr_out = mcs::shm_alloc(size_t(size));
        return MCS_OK;
    });
}

int mcs_shm_free(void *ptr) {
    if (!ptr) return fail(MCS_E_INVALID_ARG, "ptr is NULL");
    return guarded([&] {
        if (!mcs::shm_free(ptr))
            return fail(MCS_E_INVALID_ARG, "not the start of a segment mcs_shm_alloc returned");
        return ok();
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

int mcs_teardowns_pending(void) {
    return guarded([] { return mcs::background_teardowns(); });
}

int mcs_replica_choice_stats(struct mcs_replica_choice_stats *out) {
    return guarded([&] {
        if (!out) throw mcs::Error(MCS_E_INVALID_ARG, "out is NULL");
        if (out->struct_size < offsetof(struct mcs_replica_choice_stats, choices))
            throw mcs::Error(MCS_E_INVALID_ARG,
                             "out->struct_size is " + std::to_string(out->struct_size) +
                                 ": set it to sizeof(struct mcs_replica_choice_stats)");
        mcs::ReplicaChoiceCounters c = mcs::replica_choice_counters();
        struct mcs_replica_choice_stats full {};
        full.struct_size = uint32_t(std::min<size_t>(out->struct_size, sizeof full));
        full.active = c.active ? 1 : 0;
        full.seen = c.seen ? 1 : 0;
        full.suspects = c.suspects;
        full.choices = c.choices;
        full.fallbacks = c.fallbacks;
        full.marked = c.suspects_marked;
        full.retries = c.retries;
        full.recovered = c.recovered;
        std::memcpy(out, &full, full.struct_size);
        return MCS_OK;
    });
}

int mcs_teardowns_wait(int timeout_ms) {
    return guarded([&] {
        if (timeout_ms < -1) throw mcs::Error(MCS_E_INVALID_ARG, "timeout_ms must be -1 or >= 0");
        if (!mcs::wait_background_teardowns(std::chrono::milliseconds(timeout_ms)))
            throw mcs::Error(MCS_E_TIMEOUT, std::to_string(mcs::background_teardowns()) +
                                                " teardowns still running after " +
                                                std::to_string(timeout_ms) + " ms");
        return MCS_OK;
    });
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
        c->freed.store(true);
        g_freed->push_back(c);
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

int mcs_client_set_replica_options(mcs_client *c, const struct mcs_replica_options *opts) {
    return with_open_client(c, [&](mcs::Engine &e) {
        e.set_default_replica(mcs::read_replica_options(opts));
        return MCS_OK;
    });
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

int mcs_client_register_buffer(mcs_client *c, void *ptr, uint64_t size) {
    return with_open_client(c, [&](mcs::Engine &e) -> int {
        int rc = e.register_buffer(ptr, size);
        if (rc < 0) return fail(rc, "register_buffer failed: " + mcs::describe(rc));
        return MCS_OK;
    });
}

int mcs_client_unregister_buffer(mcs_client *c, void *ptr) {
    return with_open_client(c, [&](mcs::Engine &e) -> int {
        int rc = e.unregister_buffer(ptr);
        if (rc < 0) return fail(rc, "unregister_buffer failed: " + mcs::describe(rc));
        return MCS_OK;
    });
}

}  // extern "C"
