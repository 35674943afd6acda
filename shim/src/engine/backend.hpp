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

#include "../../mcs.h"

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

// A write's replica options (struct mcs_replica_options, read and checked).
struct ReplicaOptions {
    uint64_t replica_num = 1;
    uint64_t nof_replica_num = 0;
    uint64_t dfs_replica_num = 0;
    int soft_pin_action = MCS_SOFT_PIN_PRESERVE;
    bool has_soft_pin_ttl = false;
    uint64_t soft_pin_ttl_ms = 0;
    bool with_hard_pin = false;
    bool prefer_alloc_in_same_node = false;
    uint8_t data_type = 0;
    StrVec preferred_segments;
    std::string preferred_segment;
    StrVec preferred_nof_segments;
    bool has_group_ids = false;
    StrVec group_ids;  // one per key of the batch when has_group_ids
};

// One call of Mooncake's session API (struct mcs_session, read and checked).
struct SessionCall {
    int op = 0;  // enum mcs_session_op
    StrVec keys;
    std::vector<size_t> sizes;  // PUT_START
    ReplicaOptions replica;     // PUT_START
    // *_RANGES, per key: buffers, their sizes, offsets into the object.
    std::vector<std::vector<void *>> bufs;
    std::vector<std::vector<size_t>> range_sizes;
    std::vector<std::vector<size_t>> offsets;
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
    // Throws Error (MCS_E_UNSUPPORTED) for replica options the store cannot
    // honour; called when a batch or a client default is accepted.
    virtual void check_replica(const ReplicaOptions &) {}
    // group_ids: one per key of this call, or nullptr (opts.group_ids is the
    // whole batch's and is not read here).
    virtual std::vector<int> put_from(const StrVec &keys, const std::vector<void *> &bufs,
                                      const std::vector<size_t> &sizes, const ReplicaOptions &opts,
                                      const StrVec *group_ids, bool upsert) = 0;
    // Multi-part values: key i's parts are bufs/sizes [first[i], first[i+1])
    // (first has keys.size() + 1 entries).  A get reads only when the parts'
    // total is the value's size, as Mooncake does (larger: -800, smaller:
    // -600); the engine handles the rest.
    virtual std::vector<int64_t> get_into_parts(const StrVec &keys, const std::vector<void *> &bufs,
                                                const std::vector<size_t> &sizes,
                                                const std::vector<size_t> &first) = 0;
    virtual std::vector<int> put_from_parts(const StrVec &keys, const std::vector<void *> &bufs,
                                            const std::vector<size_t> &sizes,
                                            const std::vector<size_t> &first,
                                            const ReplicaOptions &opts, const StrVec *group_ids,
                                            bool upsert) = 0;
    // A skip-existing PUT of keys found absent just before (first = nullptr:
    // one buffer per key): put_from / put_from_parts.  A store that can tell
    // whose write a key holds afterwards answers MCS_PUT_EXISTED where another
    // writer's value won, and says so with confirms_first_writer().
    virtual std::vector<int> put_first_writer(const StrVec &keys, const std::vector<void *> &bufs,
                                              const std::vector<size_t> &sizes,
                                              const std::vector<size_t> *first,
                                              const ReplicaOptions &opts, const StrVec *group_ids) {
        return first ? put_from_parts(keys, bufs, sizes, *first, opts, group_ids, false)
                     : put_from(keys, bufs, sizes, opts, group_ids, false);
    }
    virtual bool confirms_first_writer() const { return false; }
    // Throws Error (MCS_E_UNSUPPORTED) if the store cannot run `op` with parts.
    virtual void check_parts(int /*op*/) {}
    virtual std::vector<int> remove(const StrVec &keys, bool force) = 0;
    // The number of keys removed, or a negative code.
    virtual int64_t remove_all(bool force) = 0;
    virtual int64_t remove_by_regex(const std::string &pattern, bool force) = 0;
    // 0 healthy, 1 not set up or closed, 2 master unreachable.
    virtual int health_check() = 0;
    virtual int64_t size(const std::string &key) = 0;
    // One key, no vectors (the single-key calls' path, Engine::run_one); by
    // default the batch calls for one key.
    virtual int64_t exists_one(const std::string &key) { return exists(StrVec{key}).at(0); }
    virtual int64_t get_one(const std::string &key, void *buf, size_t size) {
        return get_into(StrVec{key}, {buf}, {size}).at(0);
    }
    virtual int64_t remove_one(const std::string &key, bool force) {
        return remove(StrVec{key}, force).at(0);
    }
    virtual int64_t put_one(const std::string &key, void *buf, size_t size,
                            const ReplicaOptions &opts, bool upsert) {
        return put_from(StrVec{key}, {buf}, {size}, opts, nullptr, upsert).at(0);
    }
    virtual int register_buffer(void *ptr, size_t size) = 0;
    virtual int unregister_buffer(void *ptr) = 0;
    // Mooncake's get_into_ranges: for buffer b, key j of it, range k:
    // bytes read or a negative code, as results[b][j][k].  Throws Error
    // (MCS_E_UNSUPPORTED) where the store has none.
    virtual std::vector<std::vector<std::vector<int64_t>>> get_into_ranges(
        const std::vector<void *> & /*bufs*/, const std::vector<StrVec> & /*keys*/,
        const std::vector<std::vector<std::vector<size_t>>> & /*dst_offsets*/,
        const std::vector<std::vector<std::vector<size_t>>> & /*src_offsets*/,
        const std::vector<std::vector<std::vector<size_t>>> & /*sizes*/) {
        throw Error(MCS_E_UNSUPPORTED, "this store cannot read byte ranges (get_into_ranges)");
    }
    // Mooncake's session API (mcs_client_session): the store's answer per key
    // (MCS_SESSION_GET_END: one).  Throws Error (MCS_E_UNSUPPORTED) where the
    // store has none.
    virtual std::vector<int> session(const SessionCall & /*call*/) {
        throw Error(MCS_E_UNSUPPORTED, "this store has no session API");
    }
    // What the master knows of each key's replicas (Mooncake's
    // batch_get_replica_desc): one entry per key, in order, each the JSON list
    // of the key's replica descriptors as the store prints them, or "" where
    // it gave none for the key.  Throws Error (MCS_E_UNSUPPORTED) where the
    // store cannot tell.
    virtual std::vector<std::string> replica_desc(const StrVec & /*keys*/) {
        throw Error(MCS_E_UNSUPPORTED, "this store cannot list replica descriptors");
    }
    // Called once, by Engine::close(), after every worker has stopped and
    // every held value has been released.
    virtual void teardown() = 0;
    // How long close() waits for teardown(): negative until it ends (run on
    // the closing thread); else it runs on a thread of its own, which close()
    // leaves running in the background after this long (see reaper.hpp).
    virtual std::chrono::milliseconds teardown_wait() const {
        return std::chrono::milliseconds(-1);
    }
    // Whether a teardown still running in the background when the process
    // exits must end first (the store would otherwise go on listing memory of
    // this client that no longer exists).
    virtual bool teardown_before_exit() const { return false; }
    // Makes teardown() a no-op (the process is about to _exit).
    virtual void skip_teardown() {}
    // The name the store registered this client under ("" if none).
    virtual std::string hostname() { return {}; }
};

}  // namespace mcs
