// What both halves of the C surface (capi.cpp, capi_data.cpp) use: the
// client handle, its validation and reference counting, the per-thread last
// error, and the wrappers that keep every C++ exception inside the shim.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "../engine/engine.hpp"
#include "../engine/integrity.hpp"
#include "../mooncake/mooncake_backend.hpp"

// A live client: the engine plus a reference count so a handle freed on one
// thread while another is inside a call stays valid until that call returns.
// The struct outlives mcs_client_free(): only its engine is destroyed (when the
// last reference goes), the few bytes of the struct are kept for the life of
// the process (in g_freed), so a stale handle is always recognized and a
// thread that validated a handle once may check it again without the
// registry's lock.
struct mcs_client {
    std::unique_ptr<mcs::Engine> engine;
    std::shared_ptr<mcs::IntegrityCounters> integrity;  // null without "integrity"
    pid_t pid = 0;
    std::atomic<int> refs{1};
    std::atomic<bool> freed{false};
};

namespace mcs::capi {

// Stores `msg` (or the code's description) as this thread's last error.
int fail(int code, const std::string &msg);
// Clears this thread's last error; MCS_OK.
int ok();
// Takes a reference on a live handle; nullptr (with rc set) otherwise.
mcs_client *acquire(mcs_client *c, int &rc);
// True in a child forked after the client was created.
bool forked(mcs_client *c);
void release(mcs_client *c);

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

}  // namespace mcs::capi
