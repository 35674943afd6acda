// Transfers that end before their memory is let go.
//
// Mooncake 0.3.13.post1 waits for a batch of transfers in
// TransferFuture::wait() (get() jumps to it), which store.so calls through
// its PLT.  Its wait (TransferEngineOperationState::wait_for_completion)
// gives up after 60 s of the operation and answers TRANSFER_FAIL while the
// TCP transfers go on: a write is then revoked and the storage node's memory
// handed to the next write, a read's buffer is freed or handed back to its
// caller, and the late bytes land in another value.  The shim defines
// TransferFuture::wait() and get() too, and is loaded RTLD_GLOBAL before
// store.so, so those calls come here: the same wait without the 60 s cap, up
// to the time a peer's kernel takes to give a silent connection up
// (net.ipv4.tcp_retries2: about 15 minutes by default), after which no late
// byte can arrive; then Mooncake's own wait answers, as before.
// Where the interposition is not in effect, or the wheel lacks the symbols,
// every call is Mooncake's own and nothing changes.
#pragma once

#include <cstdint>

namespace mcs {

// Called by load_mooncake with store.so's handle: resolves Mooncake's own
// TransferFuture::wait and isReady.  True when waits come here.
bool transfer_wait_init(void *store_handle);

struct TransferWaitCounters {
    bool active;          // transfer_wait_init resolved the originals
    uint64_t waits;       // TransferFuture waits seen
    uint64_t past_60s;    // of them, still running when Mooncake would have given up
    uint64_t past_limit;  // of them, still running at the limit (Mooncake answered)
    uint64_t limit_s;     // the limit, seconds
};
TransferWaitCounters transfer_wait_counters();

}  // namespace mcs
