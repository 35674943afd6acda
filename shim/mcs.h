/*
 * mcs.h - the C ABI of mooncake-cffi's shim over Mooncake Store's client.
 *
 * This header is the single source of the shim's declarations: the Python
 * package feeds it (minus preprocessor lines) to cffi, and a test fails if the
 * two ever disagree.  Keep everything between the MCS_CDEF markers parseable
 * by cffi: no macros in declarations, no inline functions.
 *
 * Conventions
 *  - Every function that can fail returns an int status: 0 (MCS_OK) when the
 *    call did what it was asked, a negative code when it did not.  For a batch
 *    that means: 0 = the batch ran, and each key's outcome is in `results`
 *    (a key can fail while the call succeeds); negative = the batch was
 *    refused or did not run, and `results` is undefined.  Codes above -10000
 *    are Mooncake's own ErrorCode values passed through unchanged (e.g. -706
 *    OBJECT_HAS_LEASE); codes from -10000 down are the shim's (enum
 *    mcs_status).  mcs_error_name() and mcs_strerror() describe any code;
 *    neither ever returns NULL.
 *  - When a call fails, a message saying why is stored per thread and read
 *    with mcs_last_error() (never NULL; "" when there is nothing to say).
 *  - Output parameters come first.  Objects returned through `T **out` belong
 *    to the caller and are released with their own _free function; every
 *    _free function accepts NULL.
 *  - Structs that may grow start with `uint32_t struct_size`, which the caller
 *    sets to sizeof(the struct) as it was compiled.  The library reads (or
 *    fills) only that many bytes, so a caller built against an older, shorter
 *    struct keeps working; fields it does not know take their defaults.
 *  - Keys cross the boundary packed: one byte buffer and n + 1 offsets (key i
 *    is bytes [offsets[i], offsets[i+1])), or one buffer of n NUL-terminated
 *    keys back to back, so a batch costs the caller O(1) allocations.  Keys
 *    are byte strings: non-empty, without NUL bytes.
 *  - Inputs are copied or only read during the call, except where a
 *    declaration says otherwise: the transfer buffers (`bufs`) and the
 *    `results` / `values` arrays of a batch submitted with mcs_submit(), or
 *    of an mcs_run() that timed out, are NOT copied: the caller keeps them
 *    alive and untouched until that batch's completion has been drained.
 *  - No C++ exception crosses this boundary; an unexpected one becomes
 *    MCS_E_INTERNAL with its message in mcs_last_error().
 *  - Misuse (NULL handle or pointer, a freed handle, bad counts, a call after
 *    close or in a forked child) returns an error code; it never crashes.
 *
 * Thread safety: every function may be called from any thread at any time,
 * concurrently on the same client, including mcs_client_close() and
 * mcs_client_free() while other threads are inside calls (those calls finish,
 * later ones are refused).
 */
#ifndef MCS_H
#define MCS_H

#include <stddef.h>
#include <stdint.h>

#define MCS_VERSION_MAJOR 0
#define MCS_VERSION_MINOR 1
#define MCS_VERSION_PATCH 0
/* Bumped whenever a declaration below changes incompatibly. */
#define MCS_ABI_VERSION 2

#if defined(__GNUC__)
#define MCS_API __attribute__((visibility("default")))
#else
#define MCS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* MCS_CDEF_BEGIN */

/* Status codes of the shim itself.  Mooncake's codes (0 .. -9999) pass
 * through unchanged and are not listed here. */
enum mcs_status {
    MCS_OK = 0,
    MCS_E_INVALID_ARG = -10001,    /* NULL pointer, bad count, empty key, ... */
    MCS_E_INVALID_HANDLE = -10002, /* NULL, never created or already freed */
    MCS_E_CLOSED = -10003,         /* the client was closed */
    MCS_E_FORKED = -10004,         /* used in a child process after fork() */
    MCS_E_NOT_LOADED = -10005,     /* mcs_load() has not succeeded */
    MCS_E_LOAD = -10006,           /* dlopen failed or a symbol is missing */
    MCS_E_QUEUE_FULL = -10007,     /* the lane's queue stayed full */
    MCS_E_OUTSIDE_L1 = -10008,     /* buffer not inside one registered block */
    MCS_E_DUPLICATE_KEY = -10009,  /* the same key twice in one batch */
    MCS_E_UNREACHABLE = -10010,    /* the master or metadata server is down */
    MCS_E_AGAIN = -10011,          /* nothing to drain right now */
    MCS_E_TIMEOUT = -10012,        /* a wait ran out */
    MCS_E_NOMEM = -10013,          /* allocation failed */
    MCS_E_STATE = -10014,          /* not allowed in the current state */
    MCS_E_INTERNAL = -10099        /* unexpected exception inside the shim */
};

/* Operations; each one runs on its lane (see struct mcs_lanes). */
enum mcs_op {
    MCS_OP_EXISTS = 0,    /* lookup lane.   result: 1 present, 0 absent, <0 error */
    MCS_OP_GET = 1,       /* retrieve lane. result: bytes read, or <0 error */
    MCS_OP_PUT = 2,       /* store lane.    result: 0 stored, MCS_PUT_EXISTED, <0 */
    MCS_OP_UPSERT = 3,    /* store lane.    result: 0 written (overwrites), <0 */
    MCS_OP_REMOVE = 4,    /* delete lane.   result: 0 removed, <0 (-704 absent) */
    MCS_OP_SIZE = 5,      /* lookup lane.   result: value size in bytes, or <0 */
    MCS_OP_GET_BUFFER = 6 /* retrieve lane, no bufs: Mooncake reads each value
                          into its own local buffer (one round trip for the
                          batch).  result: the value's size, with values[i]
                          pointing at its bytes until mcs_release(); or
                          MCS_GET_UNREAD when Mooncake could not read it this
                          way (missing, its local buffer full, an error): ask
                          again with MCS_OP_EXISTS / SIZE / GET. */
};

/* Lanes, in the order mcs_client_lane_stats() numbers them. */
enum mcs_lane_id {
    MCS_LANE_LOOKUP = 0,
    MCS_LANE_RETRIEVE = 1,
    MCS_LANE_STORE = 2,
    MCS_LANE_DELETE = 3,
    MCS_LANE_SHARED = 4,
    MCS_LANE_COUNT = 5
};

/* Flags for mcs_submit() / mcs_run(). */
enum mcs_flags {
    MCS_FLAG_FORCE = 1,        /* REMOVE: ignore the read lease */
    MCS_FLAG_SKIP_EXISTING = 2 /* PUT: look keys up first; present ones are
                                  not sent and get MCS_PUT_EXISTED */
};

/* Per-key PUT result (positive, so not an error) for a key that already
 * held a value, which Mooncake keeps (first writer wins). */
enum mcs_put_result { MCS_PUT_EXISTED = 1 };

/* Per-key GET_BUFFER result (negative, but not an error: the key was not
 * read; see MCS_OP_GET_BUFFER). */
enum mcs_get_result { MCS_GET_UNREAD = -10020 };

/* Lane layout and limits, given at creation.  Zero fields take defaults. */
struct mcs_lanes {
    uint32_t struct_size; /* sizeof(struct mcs_lanes) */
    uint32_t num_workers; /* shared pool size; default 4 */
    uint32_t lookup;      /* workers of each lane; 0 = use the shared pool */
    uint32_t retrieve;
    uint32_t store;
    uint32_t del;
    uint32_t queue_capacity; /* batches queued or running per lane before
                                a submit must wait; default 1024 */
    int32_t queue_wait_ms;   /* a submit to a full lane waits this long,
                                then fails with MCS_E_QUEUE_FULL; -1 waits
                                forever, 0 fails at once.  Default 0 is
                                "fail at once". */
    uint32_t tile_keys;      /* split batches into tiles of at most this
                                many keys run in parallel; 0 = no limit */
    uint64_t tile_bytes;     /* ... and PUT/UPSERT batches into tiles of at
                                most this many bytes; 0 = no limit */
    uint32_t coalesce_keys;  /* a worker merges small GET or EXISTS batches
                                (<= 16 keys) waiting in its lane into one
                                Mooncake call of at most this many keys;
                                each batch still gets its own completion.
                                0 = 64, 1 = never merge */
};

/* One batch: its operation, keys, buffers and result arrays.  Read during
 * mcs_submit() / mcs_run(); see each field for what must outlive the call. */
struct mcs_batch {
    uint32_t struct_size;         /* sizeof(struct mcs_batch) */
    int32_t op;                   /* enum mcs_op */
    int32_t flags;                /* enum mcs_flags */
    int32_t timeout_ms;           /* mcs_run(): give up waiting after this long
                                     (MCS_E_TIMEOUT; the batch goes on and posts
                                     a completion).  <= 0: wait until done. */
    uint64_t n;                   /* number of keys, >= 1 */
    const char *key_data;         /* packed key bytes (copied) */
    uint64_t key_bytes;           /* size of key_data; no key may reach past it */
    const uint64_t *key_offsets;  /* n + 1 offsets into key_data (copied), or
                                     NULL: key_data holds exactly n
                                     NUL-terminated keys back to back,
                                     key_bytes of them in all */
    void *const *bufs;            /* GET: n destinations; PUT/UPSERT: n sources;
                                     NULL for other ops.  Borrowed. */
    const uint64_t *sizes;        /* their capacities / lengths (copied) */
    const void *replicate_config; /* PUT/UPSERT: a mooncake::ReplicateConfig,
                                    or NULL for the client's default.  Borrowed. */
    int64_t *results;             /* out: n per-key results (enum mcs_op) */
    const void **values;          /* out, GET_BUFFER only: n pointers */
};

/* One finished batch, as returned by mcs_drain(). */
struct mcs_completion {
    uint32_t struct_size; /* set by the library */
    int32_t op;           /* enum mcs_op */
    uint64_t id;          /* as returned by mcs_submit() / a timed-out mcs_run() */
    int32_t status;       /* 0: the batch ran (outcomes in results); <0: it did
                             not run (results undefined) */
    int32_t first_error;  /* the first per-key error, 0 if none; -704 and
                             MCS_GET_UNREAD are reported per key only */
    uint32_t n_keys;
    uint32_t n_failed; /* keys whose result is an error (not -704) */
    int32_t timed_out; /* 1: an mcs_run() caller stopped waiting for it */
    uint32_t reserved;
    char message[240]; /* why, when status or first_error != 0 */
};

/* Counters of one lane (mcs_client_lane_stats). Latencies are per batch,
 * from submit to completion, in microseconds. */
struct mcs_lane_stats {
    uint32_t struct_size; /* set by the caller: sizeof(struct mcs_lane_stats) */
    uint32_t workers;     /* 0: this lane is served by the shared pool */
    uint32_t queued;      /* tiles waiting for a worker */
    uint32_t running;     /* tiles being executed */
    uint32_t pending;     /* batches accepted and not yet completed */
    uint64_t submitted;   /* batches accepted */
    uint64_t completed;   /* batches completed */
    uint64_t failed;      /* completed batches with status != 0 */
    uint64_t keys;        /* keys in completed batches */
    uint64_t rejected;    /* submits refused with MCS_E_QUEUE_FULL */
    double mean_us;
    double p50_us;
    double p90_us;
    double p99_us;
    double max_us;
    uint64_t merged; /* Mooncake calls that served several batches */
};

/* Counters of one operation (mcs_client_op_stats), whichever lane ran it.
 * A batch counts as failed when it did not run or some key got an error
 * other than -704 / MCS_GET_UNREAD. */
struct mcs_op_stats {
    uint32_t struct_size; /* set by the caller: sizeof(struct mcs_op_stats) */
    uint32_t reserved;
    uint64_t calls;          /* batches completed */
    uint64_t keys;           /* keys in them */
    uint64_t failed_calls;   /* batches with a failure */
    uint64_t failed_keys;    /* keys with an error */
    uint64_t bytes;          /* bytes moved (GET, GET_BUFFER, PUT, UPSERT) */
    uint64_t timeouts;       /* mcs_run() callers that stopped waiting */
    uint64_t no_space;       /* keys failed with NO_AVAILABLE_HANDLE (-200) */
    double sum_us;           /* total batch latency, submit to completion */
    uint64_t buckets[24];    /* latency histogram: bucket i counts batches
                                under 2^i microseconds (the last: the rest) */
    int32_t error_codes[16]; /* the first 16 distinct per-key errors seen ... */
    uint64_t error_keys[16]; /* ... and how many keys failed with each
                                (0 marks an unused slot); later new codes
                                count in failed_keys only */
};

typedef struct mcs_client mcs_client;

/* --- version and errors (always callable, thread-safe) --- */

/* MCS_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH of the loaded library. */
MCS_API int mcs_version(void);
/* "MAJOR.MINOR.PATCH", static storage. */
MCS_API const char *mcs_version_string(void);
/* MCS_ABI_VERSION of the loaded library. */
MCS_API int mcs_abi_version(void);
/* Symbolic name of any status code: "OK", "OBJECT_HAS_LEASE",
 * "MCS_E_CLOSED", or "UNKNOWN_ERROR".  Static storage, never NULL. */
MCS_API const char *mcs_error_name(int code);
/* A one-line description of any status code.  Static, never NULL. */
MCS_API const char *mcs_strerror(int code);
/* The message of the last failed call on this thread.  Valid until the next
 * call on this thread; never NULL. */
MCS_API const char *mcs_last_error(void);

/* --- loading Mooncake (process-wide) --- */

/* dlopen()s Mooncake's store.so at `store_so_path` and resolves every symbol
 * the shim uses, naming any that is missing.  Idempotent: later calls with
 * any path return 0 once loaded.  Silences Mooncake's logging (level 3). */
MCS_API int mcs_load(const char *store_so_path);
/* 1 if mcs_load() has succeeded, else 0. */
MCS_API int mcs_loaded(void);
/* Mooncake's glog threshold: 0 INFO, 1 WARNING, 2 ERROR, 3 silent (FATAL
 * only).  Process-wide. */
MCS_API int mcs_set_log_level(int level);

/* --- clients --- */

/* Creates a client and sets it up: the `n` key/value strings are handed to
 * Mooncake's setup unchanged.  `lanes` may be NULL for defaults.  Before the
 * setup, the master (master_server_addr) and an http:// metadata_server are
 * probed with a `probe_timeout_ms` TCP connect (0 = 2000 ms, <0 = no probe) so
 * an unreachable address fails fast with MCS_E_UNREACHABLE.  On success *out
 * owns a client, released with mcs_client_free(); on failure *out is NULL.
 * Blocks for the setup (tens of ms).  In a child forked from a process that
 * had set up a client it fails at once with MCS_E_FORKED (Mooncake's
 * process-wide state does not survive fork()). */
MCS_API int mcs_client_create(mcs_client **out, const char *const *keys, const char *const *values,
                              size_t n, const struct mcs_lanes *lanes, int probe_timeout_ms);

/* Stops accepting calls, lets accepted batches and calls in other threads
 * finish, joins the workers, unregisters L1 and tears Mooncake down.
 * Idempotent: later calls return 0.  Completions of finished batches stay
 * drainable until mcs_client_free().  In a forked child it only marks the
 * client closed (the parent's client cannot be torn down from there). */
MCS_API int mcs_client_close(mcs_client *c);

/* For a process that is about to _exit(): like mcs_client_close() (accepted
 * work finishes, workers are joined, L1 is unregistered) but Mooncake's own
 * teardown, which takes 0.3-1 s, is skipped.  The master forgets the client
 * once its TTL passes; the caller should remove the client's metadata
 * entries (see mcs_client_hostname) and must not return to code that may
 * use Mooncake again.  Idempotent with mcs_client_close(). */
MCS_API int mcs_client_close_for_exit(mcs_client *c);

/* The name this client registered with the cluster ("host:port", the port
 * chosen by Mooncake's setup), NUL-terminated, into buf[0..cap). */
MCS_API int mcs_client_hostname(mcs_client *c, char *buf, size_t cap);

/* Closes if needed, then releases the client and its eventfd.  NULL or an
 * already-freed handle is a no-op.  The handle is invalid afterwards. */
MCS_API void mcs_client_free(mcs_client *c);

/* Hands the shim the address of a mooncake::ReplicateConfig C++ object that
 * PUT/UPSERT use when mcs_submit() gets none.  The object is NOT copied: the
 * caller keeps it alive and unchanged until the client is freed.  Until one
 * is set, a PUT without a config fails with MCS_E_INVALID_ARG. */
MCS_API int mcs_client_set_default_replicate_config(mcs_client *c, const void *rc);

/* Address of the std::type_info of mooncake::ReplicateConfig, for pybind11's
 * type-checked pointer hand-off (see the Python package). */
MCS_API const void *mcs_replicate_config_typeid(void);

/* The completion eventfd: non-blocking, close-on-exec, readable while
 * completions wait to be drained.  Owned by the client; do not close it. */
MCS_API int mcs_client_fd(mcs_client *c, int *fd_out);

/* --- L1 memory --- */

/* Registers [ptr, ptr+size) with Mooncake in blocks of at most `max_block`
 * bytes (0: $MC_MAX_MR_SIZE, else 1 TiB), in order; if one fails, the ones
 * already registered are unregistered newest first and the error returned.
 * While registered, every transfer buffer must lie inside one block, else
 * its batch fails with MCS_E_OUTSIDE_L1.  One region per client. */
MCS_API int mcs_client_register_l1(mcs_client *c, void *ptr, uint64_t size, uint64_t max_block);
/* Unregisters the L1 region (newest block first).  0 if none. */
MCS_API int mcs_client_unregister_l1(mcs_client *c);
/* Number of registered L1 blocks (0 when none) into *blocks_out. */
MCS_API int mcs_client_l1_blocks(mcs_client *c, uint32_t *blocks_out);

/* --- batches --- */

/* Queues `batch` on its operation's lane and returns at once with its id in
 * *id_out.  The batch's keys and sizes are copied; its bufs, results, values
 * and replicate_config must stay valid until its completion is drained.
 * Refused (nothing queued, no completion): MCS_E_INVALID_ARG for n == 0, bad
 * offsets, an empty key or one with a NUL byte, a NULL or zero-sized
 * buffer, missing or unexpected arrays; MCS_E_DUPLICATE_KEY for a key twice;
 * MCS_E_OUTSIDE_L1; MCS_E_QUEUE_FULL; MCS_E_CLOSED.  Exactly one completion
 * is posted per accepted batch. */
MCS_API int mcs_submit(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch);

/* Runs `batch` and waits for it: 0 when it ran (each key's outcome in its
 * results; no completion is posted), or a negative code when it was refused
 * (as for mcs_submit) or did not run.  If the lane has an idle worker slot
 * and no timeout is set, the batch runs on the calling thread.  With
 * batch->timeout_ms > 0, a batch not done in time makes this return
 * MCS_E_TIMEOUT with its id in *id_out (id_out may be NULL otherwise): the
 * batch goes on, its buffers and arrays must then stay valid until its
 * completion (timed_out = 1) is drained, exactly as after mcs_submit(). */
MCS_API int mcs_run(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch);

/* One key, run like a one-key mcs_run() without a deadline: the call for
 * callers whose fixed cost per call matters (no struct to fill).  `key` is
 * key_len bytes (not NUL-terminated; no NUL inside); `buf` / `size` as
 * bufs[0] / sizes[0] for GET, PUT and UPSERT, NULL / 0 for the others.  0
 * when it ran, its outcome in *result_out; otherwise a negative code as for
 * mcs_run().  MCS_OP_GET_BUFFER is refused (its value is released by batch
 * id: use mcs_run()). */
MCS_API int mcs_run_one(mcs_client *c, int64_t *result_out, int op, int flags, const char *key,
                        uint64_t key_len, void *buf, uint64_t size);

/* A batch of keys only (MCS_OP_EXISTS, MCS_OP_SIZE, MCS_OP_REMOVE), run like
 * mcs_run() without a deadline, with no struct to fill: `key_data` holds
 * exactly n NUL-terminated keys back to back, key_bytes in all (as
 * mcs_batch's key_data with key_offsets NULL).  Each key's outcome goes to
 * results[0..n).  0 when it ran; otherwise a negative code as for mcs_run(). */
MCS_API int mcs_run_keys(mcs_client *c, int64_t *results, int op, int flags, const char *key_data,
                         uint64_t key_bytes, uint64_t n);

/* Releases what Mooncake holds for the values of GET_BUFFER batch `id`
 * (its values[] pointers become invalid).  Unknown ids are ignored (0).
 * Until released, the values occupy Mooncake's local buffer
 * (local_buffer_size).  mcs_client_close() releases everything. */
MCS_API int mcs_release(mcs_client *c, uint64_t id);

/* Copies the values of a finished GET_BUFFER batch back to back into
 * dst[0..cap): for i = 0..n-1 in order, the results[i] bytes at values[i]
 * of every key with results[i] >= 0 (others are skipped), so a caller can
 * cut one buffer into values with no per-key call.  *written_out gets the
 * bytes written.  MCS_E_INVALID_ARG if they would exceed cap.  Touches no
 * client: call it before mcs_release() of that batch. */
MCS_API int mcs_gather(uint64_t *written_out, void *dst, uint64_t cap, const void *const *values,
                       const int64_t *results, uint64_t n);

/* Moves up to `cap` completions into `out`, an array of elements of
 * `elem_size` bytes (sizeof(struct mcs_completion) as the caller knows it),
 * oldest first, and returns how many (>= 0); never blocks.  Resets the
 * eventfd once none remain. */
MCS_API int mcs_drain(mcs_client *c, struct mcs_completion *out, size_t cap, size_t elem_size);

/* Blocks until a completion is waiting or `timeout_ms` passes (-1 forever).
 * 0 when one is waiting, MCS_E_TIMEOUT otherwise. */
MCS_API int mcs_wait(mcs_client *c, int timeout_ms);

/* --- statistics --- */

/* Counters of lane `lane` (enum mcs_lane_id) into *out (out->struct_size set
 * by the caller). */
MCS_API int mcs_client_lane_stats(mcs_client *c, int lane, struct mcs_lane_stats *out);

/* Counters of operation `op` (enum mcs_op) into *out (out->struct_size set
 * by the caller). */
MCS_API int mcs_client_op_stats(mcs_client *c, int op, struct mcs_op_stats *out);

/* MCS_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* MCS_H */
