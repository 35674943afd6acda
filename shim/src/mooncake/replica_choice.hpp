// Reads that survive a storage node: the choice of the replica a read takes.
//
// Mooncake 0.3.13.post1's reads (RealClient get_buffer, batch_get_buffer,
// batch_get_into, their multi-buffer and ranged forms) ask
// mooncake::SelectBestReplica(replicas, local_endpoints) which replica of the
// key's list to read, and store.so calls it through its PLT.  The shim defines
// that symbol too (replica_choice.cpp), and is loaded RTLD_GLOBAL before it
// loads store.so, so those calls come here: the pick is Mooncake's own, unless
// its endpoint failed a transfer lately (a "suspect"), in which case another
// complete memory replica of the same list is returned -- a pointer into the
// caller's own vector, nothing copied.  A read whose transfer failed is tried
// again by the backend, which marks the endpoint that served the failed try.
// Where the interposition is not in effect (store.so loaded by someone else
// first) or the loaded wheel's Replica::Descriptor layout does not check out,
// every call is Mooncake's own and nothing changes.
#pragma once

#include <cstdint>
#include <string>

namespace mcs {

// Called by load_mooncake with store.so's handle: resolves Mooncake's own
// SelectBestReplica and checks the descriptor layout against its
// FindFirstCompleteReplica.  True when reads can go to another replica.
bool replica_choice_init(void *store_handle);
// Whether store.so's reads call the shim's SelectBestReplica (seen at least once).
bool replica_choice_seen();
// Marks `endpoint` (a replica's transport endpoint) as failing for a while.
void mark_suspect(const std::string &endpoint);
// Whether any endpoint is suspect now (cheap).
bool any_suspects();

// While alive on a thread, records the endpoint of each replica chosen there
// (the last one in `endpoint`, "" if none).
struct ChoiceRecorder {
    ChoiceRecorder();
    ~ChoiceRecorder();
    ChoiceRecorder(const ChoiceRecorder &) = delete;
    ChoiceRecorder &operator=(const ChoiceRecorder &) = delete;
    std::string endpoint;
    bool moved = false;  // the choice was changed away from a suspect
    ChoiceRecorder *outer;
};

struct ReplicaChoiceCounters {
    bool active;               // the layout checked out (replica_choice_init)
    bool seen;                 // store.so's reads have called the shim
    uint32_t suspects;         // endpoints suspect now
    uint64_t choices;          // SelectBestReplica calls seen
    uint64_t fallbacks;        // of them, answered with another replica than Mooncake's pick
    uint64_t suspects_marked;  // times an endpoint was marked suspect
    uint64_t retries;          // reads tried again after a failed transfer
    uint64_t recovered;        // of them, answered from another replica
};
ReplicaChoiceCounters replica_choice_counters();
void count_retry(bool recovered);

}  // namespace mcs
