// What the engine needs from a store (mcs::Backend), the error type thrown
// inside the shim, and the status-code helpers.  The Mooncake backend
// forwards to mooncake::RealClient; the engine tests use an in-memory one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../mcs.h"

namespace mcs {

using StrVec = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr int kObjectNotFound = -704;
constexpr int kNoAvailableHandle = -200;

const char *error_name(int code);
const char *error_text(int code);
// "NAME (code): text"
std::string describe(int code);

// An error carrying a status code, thrown inside the shim and turned into a
// return code at the C boundary.
struct Error : std::runtime_error {
    int code;
    Error(int c, const std::string &msg) : std::runtime_error(msg), code(c) {}
};

// Values a store read into memory it owns: values[i] points at key i's bytes
// (sizes[i] of them) while `hold` is alive; a key it could not read this way
// has sizes[i] == MCS_GET_UNREAD and values[i] == nullptr.
struct HeldValues {
    std::vector<const void *> values;
    std::vector<int64_t> sizes;
    std::shared_ptr<void> hold;
};

// Methods may be called from several threads at once.
class Backend {
public:
    virtual ~Backend() = default;
    virtual std::vector<int> exists(const StrVec &keys) = 0;
    virtual std::vector<int64_t> get_into(const StrVec &keys, const std::vector<void *> &bufs,
                                          const std::vector<size_t> &sizes) = 0;
    // One round trip: the store sizes and reads every key into its own memory.
    virtual HeldValues get_buffers(const StrVec &keys) = 0;
    virtual std::vector<int> put_from(const StrVec &keys, const std::vector<void *> &bufs,
                                      const std::vector<size_t> &sizes, const void *rcfg,
                                      bool upsert) = 0;
    virtual std::vector<int> remove(const StrVec &keys, bool force) = 0;
    virtual int64_t size(const std::string &key) = 0;
    virtual int register_buffer(void *ptr, size_t size) = 0;
    virtual int unregister_buffer(void *ptr) = 0;
    // Called once, by Engine::close(), after every worker has stopped and
    // every held value has been released.
    virtual void teardown() = 0;
    // Makes teardown() a no-op (the process is about to _exit).
    virtual void skip_teardown() {}
    // The name the store registered this client under ("" if none).
    virtual std::string hostname() { return {}; }
};

}  // namespace mcs
