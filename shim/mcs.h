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
 *    `results` / `values` arrays of a batch submitted with mcs_client_submit(), or
 *    of an mcs_client_run() that timed out, are NOT copied: the caller keeps them
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
/* Bumped whenever a declaration below changes incompatibly.
 *
 * ABI history / compatibility
 *  3  Replica options as plain data: struct mcs_replica_options (with
 *     mcs_replica_options_init) replaces the pointer to Mooncake's C++
 *     ReplicateConfig in struct mcs_batch (field `replica`) and in
 *     mcs_client_set_replica_options() (was
 *     mcs_client_set_default_replicate_config); mcs_replicate_config_typeid
 *     is gone.  mcs_load() takes the wheel's version, which picks the layout
 *     of the ReplicateConfig the shim builds (see mcs_load).
 *     Data calls renamed into the client namespace: mcs_submit, mcs_run,
 *     mcs_run_one, mcs_run_keys, mcs_release, mcs_drain and mcs_wait are now
 *     mcs_client_submit, _run, _run_one, _run_keys, _release, _drain, _wait
 *     (same parameters).  mcs_client_drain() lost its elem_size parameter:
 *     out[0].struct_size carries it, as struct_size does for every struct.
 *     Added: multi-part values (struct mcs_batch.part_counts at its end,
 *     MCS_FLAG_TAIL_PART), mcs_client_remove_all, _remove_by_regex,
 *     _health_check, MCS_E_UNSUPPORTED, mcs_replica_layout; later, within
 *     ABI 3: mcs_client_register_buffer, mcs_client_unregister_buffer and
 *     mcs_client_get_into_ranges (struct mcs_ranges); the client option
 *     "integrity" with MCS_E_CORRUPT and mcs_client_integrity_stats
 *     (struct mcs_integrity_stats); mcs_client_session (struct
 *     mcs_session, enum mcs_session_op); mcs_client_replica_desc with
 *     mcs_replica_desc_free; mcs_client_withdraw; MCS_FLAG_LAND.
 *  2  Batches as struct mcs_batch with packed keys; struct_size on the
 *     growable structs; GET_BUFFER with mcs_release; per-operation stats.
 *  1  The first ABI: per-operation lanes, completions, L1 registration.
 * Within one ABI version, structs only grow at their end (struct_size tells
 * the library how much of them a caller knows) and functions are only added.
 * The Python package refuses a library whose MCS_ABI_VERSION differs from its
 * header's. */
#define MCS_ABI_VERSION 3

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
    MCS_E_UNSUPPORTED = -10015,    /* the loaded Mooncake wheel cannot do this */
    MCS_E_CORRUPT = -10016,        /* a value did not verify (client option
                                      "integrity"): its checksum trailer is
                                      missing or does not match its bytes,
                                      still after re-reading it */
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
                          pointing at its bytes until mcs_client_release(); or
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

/* Flags for mcs_client_submit() / mcs_client_run(). */
enum mcs_flags {
    MCS_FLAG_FORCE = 1,         /* REMOVE: ignore the read lease */
    MCS_FLAG_SKIP_EXISTING = 2, /* PUT: look keys up first; present ones are
                                   not sent and get MCS_PUT_EXISTED.  On a
                                   client with "integrity" the trailer of
                                   each key sent is read back (16 bytes):
                                   one that holds another write gets
                                   MCS_PUT_EXISTED too (see mcs_client_create) */
    MCS_FLAG_TAIL_PART = 4,     /* GET with part_counts: each key's last part
                                   receives the value's last bytes (see
                                   struct mcs_batch) */
    MCS_FLAG_LAND = 8           /* GET: Mooncake reads into memory of the
                                   shim's, and each key's bytes are copied
                                   into bufs when its read ends while the
                                   caller still waits: in mcs_client_run()
                                   (or mcs_client_run_one()) until its
                                   timeout_ms, for mcs_client_submit() until
                                   mcs_client_withdraw() of the batch.  A read
                                   that outlives a timed-out call or a
                                   withdrawn batch (Mooncake cannot cancel a
                                   transfer) lands in that memory, never in
                                   bufs, which the caller may reuse as soon as
                                   the call or the withdraw returns; a copy
                                   under way then finishes first.  A withdrawn
                                   batch's keys read but not copied answer
                                   MCS_E_TIMEOUT.  The shim's memory is not
                                   registered: for protocols that read only
                                   into registered memory (rdma) read into
                                   bufs directly.  Refused (MCS_E_INVALID_ARG)
                                   for other ops and with MCS_FLAG_TAIL_PART. */
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

/* Soft pin a write asks for (Mooncake's SoftPinAction). */
enum mcs_soft_pin {
    MCS_SOFT_PIN_PRESERVE = 0, /* keep the key's soft pin as it is (new keys: none) */
    MCS_SOFT_PIN_ENABLE = 1,   /* pin: evicted only after unpinned keys */
    MCS_SOFT_PIN_DISABLE = 2   /* unpin */
};

/* A list of strings packed like keys without offsets: `data` holds exactly n
 * NUL-terminated strings back to back, `bytes` bytes in all (so bytes >= n);
 * strings may be empty.  n == 0: the empty list (data may be NULL). */
struct mcs_strings {
    const char *data;
    uint64_t bytes;
    uint64_t n;
};

/* How a PUT / UPSERT stores its values: Mooncake's ReplicateConfig as plain
 * data.  Start from mcs_replica_options_init() (Mooncake's defaults, and
 * struct_size), then set fields.  Every function that takes one copies it
 * during the call: nothing in it needs to outlive that call.
 *
 * The shim builds Mooncake's C++ ReplicateConfig from it in the layout of the
 * loaded wheel (see mcs_load).  A field that wheel lacks may only hold its
 * default; any other value is refused with MCS_E_UNSUPPORTED naming the field
 * and the version it needs, never silently dropped.  Wheels before 0.3.13
 * have a soft-pin flag instead of an action: ENABLE sets it, PRESERVE and
 * DISABLE leave it clear. */
struct mcs_replica_options {
    uint32_t struct_size;                      /* sizeof(struct mcs_replica_options) */
    int32_t soft_pin_action;                   /* enum mcs_soft_pin; default PRESERVE */
    uint64_t replica_num;                      /* memory replicas, each on its own segment;
                                                  default 1.  Passed on as given (Mooncake
                                                  refuses 0 unless another kind is asked for) */
    uint64_t nof_replica_num;                  /* NoF replicas (0.3.11+); default 0 */
    uint64_t dfs_replica_num;                  /* DFS replicas (0.3.13+); default 0 */
    uint64_t soft_pin_ttl_ms;                  /* the soft pin's lifetime, when has_soft_pin_ttl */
    int32_t has_soft_pin_ttl;                  /* 1: use soft_pin_ttl_ms (0.3.13+); 0 (default):
                                                  the master's default TTL */
    int32_t with_hard_pin;                     /* 1: never evicted; default 0 */
    int32_t prefer_alloc_in_same_node;         /* default 0 */
    int32_t data_type;                         /* Mooncake's ObjectDataType, 0 (UNKNOWN, the
                                                  default) .. 255 (0.3.11+) */
    struct mcs_strings preferred_segments;     /* segments ("host:port") to
                                                  place replicas on first */
    const char *preferred_segment;             /* deprecated single segment;
                                                  NULL or "" = none */
    struct mcs_strings preferred_nof_segments; /* (0.3.11+) */
    struct mcs_strings group_ids;              /* per-key routing groups (0.3.12+), one per
                                                  key of the batch ("" = ungrouped), when
                                                  has_group_ids; not in a client default */
    int32_t has_group_ids;                     /* 0 (default): no groups */
    int32_t reserved;                          /* 0 */
};

/* One batch: its operation, keys, buffers and result arrays.  Read during
 * mcs_client_submit() / mcs_client_run(); see each field for what must outlive the call. */
struct mcs_batch {
    uint32_t struct_size;                      /* sizeof(struct mcs_batch) */
    int32_t op;                                /* enum mcs_op */
    int32_t flags;                             /* enum mcs_flags */
    int32_t timeout_ms;                        /* mcs_client_run(): give up waiting after this long
                                                  (MCS_E_TIMEOUT; the batch goes on and posts
                                                  a completion, its tiles not yet started
                                                  withdrawn).  <= 0: wait until done. */
    uint64_t n;                                /* number of keys, >= 1 */
    const char *key_data;                      /* packed key bytes (copied) */
    uint64_t key_bytes;                        /* size of key_data; no key may reach past it */
    const uint64_t *key_offsets;               /* n + 1 offsets into key_data (copied), or
                                                  NULL: key_data holds exactly n
                                                  NUL-terminated keys back to back,
                                                  key_bytes of them in all */
    void *const *bufs;                         /* GET: n destinations; PUT/UPSERT: n sources;
                                                  NULL for other ops.  Borrowed. */
    const uint64_t *sizes;                     /* their capacities / lengths (copied) */
    const struct mcs_replica_options *replica; /* PUT/UPSERT: how to store, or
                                                  NULL for the client's default
                                                  (copied); NULL for other ops */
    int64_t *results;                          /* out: n per-key results (enum mcs_op) */
    const void **values;                       /* out, GET_BUFFER only: n pointers */
    const uint32_t *part_counts;               /* GET/PUT/UPSERT: NULL (one buffer per
                                                  key), or n counts >= 1 (copied): see
                                                  "Multi-part values" below */
};

/* Multi-part values (part_counts != NULL).  Key i owns part_counts[i]
 * consecutive entries of bufs / sizes, after those of keys 0..i-1, so bufs and
 * sizes then hold sum(part_counts) entries, each a non-NULL buffer of a
 * non-zero size.
 *  PUT / UPSERT: the value is the concatenation of the key's parts, in order
 *    (Mooncake's batch_put_from_multi_buffers; UPSERT needs a wheel that has
 *    batch_upsert_from_multi_buffers, 0.3.13 on, else MCS_E_UNSUPPORTED).
 *  GET: the value's bytes fill the key's parts in order, leading parts whole,
 *    the part where the value ends partly, later parts untouched; the result
 *    is the value's size.  With MCS_FLAG_TAIL_PART the key's last part
 *    receives the value's last bytes and is filled exactly (a value shorter
 *    than it fails with -600), the bytes before them fill the other parts as
 *    above: so [a buffer of the largest value, a trailer buffer] reads a value
 *    stored with a trailer after it, wherever its end falls.  A value longer
 *    than all its parts together fails with -600 INVALID_PARAMS.
 * Mooncake's own batch_get_into_multi_buffers reads only when the parts'
 * total is exactly the value's size (larger: -800 TRANSFER_FAIL, smaller:
 * -600, nothing written); the shim tries that first and, for a key it
 * refused, asks for the size and reads again into the parts cut to it (two
 * more round trips for that key).  Mooncake reports multi-part results as
 * int: values of 2 GiB or more are not supported this way.  The batch is not
 * merged with others (coalesce_keys) and tiles split it between keys, never
 * inside one. */

/* Byte ranges of values read into buffers (mcs_client_get_into_ranges, which
 * is Mooncake's get_into_ranges).  Buffer b (0 <= b < n_bufs) at bufs[b]
 * receives ranges of keys_per_buf[b] keys; the keys of all buffers, in
 * buffer order, are packed in key_data as for mcs_client_run_keys(): exactly
 * sum(keys_per_buf) NUL-terminated keys back to back, key_bytes in all (a key
 * may appear more than once).  Key k (in that order) has ranges_per_key[k]
 * ranges, numbered on from the ranges of the keys before it; range r copies
 * sizes[r] bytes from offset src_offsets[r] of the key's value to offset
 * dst_offsets[r] of its key's buffer.  Every array is read during the call
 * only; results (one per range) is filled by it.  Arrays whose count is 0
 * may be NULL. */
struct mcs_ranges {
    uint32_t struct_size;           /* sizeof(struct mcs_ranges) */
    uint32_t reserved;              /* 0 */
    uint64_t n_bufs;                /* buffers, >= 0 */
    void *const *bufs;              /* n_bufs destinations (registered memory) */
    const uint64_t *keys_per_buf;   /* n_bufs counts */
    const char *key_data;           /* the packed keys */
    uint64_t key_bytes;             /* size of key_data */
    const uint64_t *ranges_per_key; /* one count per key */
    const uint64_t *dst_offsets;    /* one per range: into its key's buffer */
    const uint64_t *src_offsets;    /* one per range: into the key's value */
    const uint64_t *sizes;          /* one per range: bytes to copy */
    int64_t *results;               /* out, one per range: bytes read, or <0 */
};

/* Mooncake's session API (Mooncake 0.3.13 and later), one call of it per
 * mcs_client_session(): RealClient keeps the sessions (a put session's
 * reserved objects, a get session's queried replicas and their lease). */
enum mcs_session_op {
    MCS_SESSION_PUT_START = 0,  /* batch_put_session_start: reserve sizes[i] bytes per key */
    MCS_SESSION_PUT_RANGES = 1, /* batch_put_from_multi_buffer_ranges */
    MCS_SESSION_PUT_END = 2,    /* batch_put_session_end: make the objects readable */
    MCS_SESSION_PUT_REVOKE = 3, /* batch_put_session_revoke: drop the reservations */
    MCS_SESSION_GET_START = 4,  /* batch_get_session_start: query replicas once */
    MCS_SESSION_GET_RANGES = 5, /* batch_get_into_multi_buffer_ranges */
    MCS_SESSION_GET_END = 6     /* batch_get_session_end (one result) */
};

/* One session call.  The n keys are packed in key_data as for
 * mcs_client_run_keys() (an empty key is passed on).  PUT_START reads sizes
 * (n) and replica (NULL: Mooncake's defaults).  PUT_RANGES and GET_RANGES
 * read ranges_per_key (n counts); range r (numbered across the keys in
 * order) moves range_sizes[r] bytes between bufs[r] and offset offsets[r] of
 * its key's object.  Every array is read during the call only.  results gets
 * Mooncake's per-key answer (n of them; GET_END: one, results[0]). */
struct mcs_session {
    uint32_t struct_size; /* sizeof(struct mcs_session) */
    int32_t op;           /* enum mcs_session_op */
    uint64_t n;           /* keys */
    const char *key_data;
    uint64_t key_bytes;
    const uint64_t *sizes;                     /* PUT_START: n object sizes */
    const struct mcs_replica_options *replica; /* PUT_START, or NULL */
    const uint64_t *ranges_per_key;            /* *_RANGES: n counts */
    void *const *bufs;                         /* *_RANGES: one per range */
    const uint64_t *range_sizes;               /* *_RANGES: one per range */
    const uint64_t *offsets;                   /* *_RANGES: one per range, into the object */
    int64_t *results;                          /* out */
};

/* One finished batch, as returned by mcs_client_drain(). */
struct mcs_completion {
    uint32_t struct_size; /* out[0]'s set by the caller (see mcs_client_drain) */
    int32_t op;           /* enum mcs_op */
    uint64_t id;          /* as returned by mcs_client_submit() / a timed-out mcs_client_run() */
    int32_t status;       /* 0: the batch ran (outcomes in results); <0: it did
                             not run (results undefined) */
    int32_t first_error;  /* the first per-key error, 0 if none; -704 and
                             MCS_GET_UNREAD are reported per key only */
    uint32_t n_keys;
    uint32_t n_failed; /* keys whose result is an error (not -704) */
    int32_t timed_out; /* 1: an mcs_client_run() caller stopped waiting for it */
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
    /* Later within ABI 3: */
    uint32_t abandoned; /* of `running`: tiles of batches whose mcs_client_run()
                           caller stopped waiting (a Mooncake call cannot be
                           cancelled: each holds its worker until it returns) */
    uint32_t reserved;
    uint64_t withdrawn; /* tiles never run: still queued when their caller
                           stopped waiting (nothing of them was sent) */
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
    uint64_t timeouts;       /* mcs_client_run() callers that stopped waiting */
    uint64_t no_space;       /* keys failed with NO_AVAILABLE_HANDLE (-200) */
    double sum_us;           /* total batch latency, submit to completion */
    uint64_t buckets[24];    /* latency histogram: bucket i counts batches
                                under 2^i microseconds (the last: the rest) */
    int32_t error_codes[16]; /* the first 16 distinct per-key errors seen ... */
    uint64_t error_keys[16]; /* ... and how many keys failed with each
                                (0 marks an unused slot); later new codes
                                count in failed_keys only */
};

/* Counters of a client's value verification (mcs_client_integrity_stats). */
struct mcs_integrity_stats {
    uint32_t struct_size; /* set by the caller: sizeof(struct mcs_integrity_stats) */
    int32_t enabled;      /* 1: the client was created with "integrity": "crc32c" */
    uint64_t written;     /* values stored with a trailer */
    uint64_t verified;    /* values read whose trailer matched */
    uint64_t retried;     /* re-reads of values that did not verify */
    uint64_t failed;      /* keys answered MCS_E_CORRUPT */
};

/* Reads that survive a storage node, process-wide.  Mooncake 0.3.13.post1's
 * reads take one replica (its SelectBestReplica: the first memory replica
 * the master lists) and do not go on to another when its transfer fails.
 * The shim loads store.so after itself with its own SelectBestReplica in the
 * global scope, so store.so's reads ask the shim: Mooncake's pick, unless its
 * endpoint failed a transfer in the last 30 s ("suspect"), then another
 * complete memory replica of the key.  A GET whose transfer failed
 * (TRANSFER_FAIL) is tried again up to 3 times, marking the endpoint of each
 * failed try suspect; a one-key read that failed marks its endpoint at once.
 * Only a wheel whose replica layout the shim checked (0.3.13.post1) takes
 * part (active = 1); otherwise, or when store.so was loaded before the
 * shim (the interposition is then not in effect: seen = 0), every read is
 * Mooncake's own.  Counters since the process started. */
struct mcs_replica_choice_stats {
    uint32_t struct_size; /* sizeof(struct mcs_replica_choice_stats) */
    uint32_t active;      /* 1: the loaded wheel's layout checked out */
    uint32_t seen;        /* 1: store.so's reads have asked the shim */
    uint32_t suspects;    /* endpoints suspect now */
    uint64_t choices;     /* replica choices made with a suspect known or recorded */
    uint64_t fallbacks;   /* of them, another replica than Mooncake's pick */
    uint64_t marked;      /* times an endpoint was marked suspect */
    uint64_t retries;     /* reads tried again after a failed transfer */
    uint64_t recovered;   /* of them, read from another replica */
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

/* --- the process: loading Mooncake, its log level, background teardowns --- */

/* dlopen()s Mooncake's store.so at `store_so_path` and resolves every symbol
 * the shim uses, naming any that is missing.  `mooncake_version` is the
 * version of the wheel that store.so came from, as pip shows it
 * ("0.3.13.post1"); it picks the layout of mooncake::ReplicateConfig, which
 * the shim builds for every write and which changed between wheels:
 *   0.3.10.post2                 the 0.3.10 layout
 *   0.3.11, 0.3.11.post1         the 0.3.11 layout (+ NoF replicas, data_type)
 *   0.3.12, 0.3.12.post1         the 0.3.12 layout (+ host_id, group_ids)
 *   0.3.13, 0.3.13.post1         the 0.3.13 layout (+ DFS replicas, soft-pin
 *                                action and TTL instead of a flag)
 * The choice is checked against store.so itself: ReplicateConfig's printer
 * in it names the fields that layout has, and a store.so whose names do not
 * match fails to load (MCS_E_LOAD) rather than be handed a wrong layout.  For
 * a version not listed (or NULL) the load succeeds, but every PUT / UPSERT
 * is refused with MCS_E_UNSUPPORTED (reads, lookups and removes work); see
 * mcs_replica_layout().  Idempotent: later calls with any arguments return 0
 * once loaded.  Silences Mooncake's logging (level 3). */
MCS_API int mcs_load(const char *store_so_path, const char *mooncake_version);

/* 1 if mcs_load() has succeeded, else 0. */
MCS_API int mcs_loaded(void);

/* The ReplicateConfig layout in use, named by the first wheel that has it
 * ("0.3.10", "0.3.11", "0.3.12", "0.3.13"), "unknown" when writes are refused,
 * or "" before mcs_load().  Static storage, never NULL. */
MCS_API const char *mcs_replica_layout(void);

/* Mooncake's glog threshold: 0 INFO, 1 WARNING, 2 ERROR, 3 silent (FATAL
 * only).  Process-wide. */
MCS_API int mcs_set_log_level(int level);

/* Teardowns that mcs_client_close() left running in the background (see
 * there), of every client of the process: how many (>= 0).  Thread-safe. */
MCS_API int mcs_teardowns_pending(void);

/* Waits until no background teardown runs (0) or timeout_ms passes
 * (MCS_E_TIMEOUT; -1 waits forever). */
MCS_API int mcs_teardowns_wait(int timeout_ms);

/* The process's read-failover counters (struct mcs_replica_choice_stats) into
 * *out, its struct_size set by the caller.  Thread-safe. */
MCS_API int mcs_replica_choice_stats(struct mcs_replica_choice_stats *out);

/* --- a client's life --- */

/* Creates a client and sets it up: the `n` key/value strings are handed to
 * Mooncake's setup unchanged.  `lanes` may be NULL for defaults.  Before the
 * setup, whatever probe_timeout_ms says, values Mooncake would crash or hang
 * on are refused with MCS_E_INVALID_ARG naming the key and the value:
 * master_server_addr must be host:port (port 1..65535) or an HA entry
 * (etcd://host:port[;host:port...], redis://..., k8s://...), protocol a
 * transport Mooncake knows (tcp, rdma, efa, cxi, cxl, ub, ubshmem, ascend,
 * sunrise_link, nvlink_intra, rpc_only), metadata_server non-empty without
 * white space.  Mooncake keeps one cluster id (MC_STORE_CLUSTER_ID, which a
 * `cluster_id` key is exported to) and one etcd connection per process: a
 * client needing another cluster id or another etcd than this process's
 * earlier clients is refused the same way.  Then the master and an http://
 * metadata_server are probed with a `probe_timeout_ms` TCP connect (0 =
 * 2000 ms, <0 = no probe) so an unreachable address fails fast with
 * MCS_E_UNREACHABLE.
 *
 * One key is the shim's own and is not handed to Mooncake: "integrity",
 * "crc32c" or "none" (also "" or absent: the default), anything else refused
 * with MCS_E_INVALID_ARG.  With "crc32c" every PUT / UPSERT stores a 16-byte
 * trailer right after the value's bytes, little-endian {uint32 magic
 * 0x3249434D ("MCI2"), uint32 CRC32C of the key's bytes followed by the
 * value's (a value landed under another key does not verify), uint64 nonce
 * unique to the write; values with a version-1 trailer, magic 0x3149434D
 * ("MCI1") and the CRC32C of the value alone, still verify}, as one more
 * part of a multi-part write (the value is not copied; UPSERT needs a wheel
 * with batch_upsert_from_multi_buffers, else
 * MCS_E_UNSUPPORTED), and every GET, GET_BUFFER and SIZE checks it: results
 * and sizes are the value's own (without the trailer).  SIZE reads the 16
 * bytes at the value's end and checks their magic (not the CRC: that needs
 * the whole value), so a value without a trailer is refused by it as by a
 * GET.  A value whose trailer is missing or does not match its bytes (torn
 * by a concurrent
 * UPSERT, written by a client without the option, damaged) is read again
 * up to 4 times over about 15 ms; if it still does not verify its key's
 * result is MCS_E_CORRUPT, and a GET's buffer holds no verified value.
 * A PUT with MCS_FLAG_SKIP_EXISTING then also tells the first writer: after
 * writing, it reads back each written key's trailer with Mooncake's
 * get_into_ranges (through 64 KiB of scratch memory the client registers
 * once) and answers MCS_PUT_EXISTED where the key holds another write's
 * nonce, a value of another size, or one still being written (-703); a key
 * gone meanwhile is written again (up to 3 times).  A
 * single-buffer GET into a buffer larger than the value may leave the
 * trailer's 16 bytes after the value's end.  Byte ranges
 * (mcs_client_get_into_ranges) are read as they are, unverified, but each
 * is checked against its value's own size first (each key of the call
 * sized as by SIZE; one without a trailer: MCS_E_CORRUPT): a range past it
 * answers -600, as Mooncake answers a range past a value's end, and reads
 * nothing, so the trailer is never read as data.  A client without the
 * option sees every value 16 bytes longer.  Values of
 * 2 GiB or more are not supported with the option (Mooncake reports
 * multi-part results as int).
 *
 * On success *out
 * owns a client, released with mcs_client_free(); on failure *out is NULL.
 * Blocks for the setup (tens of ms).  In a child forked from a process that
 * had set up a client it fails at once with MCS_E_FORKED (Mooncake's
 * process-wide state does not survive fork()).  Such a child's exit() runs
 * none of the exit handlers registered before the first client was created
 * (Mooncake's atexit teardown of the parent's client, which crashes there,
 * and store.so's static destructors): it flushes stdio and ends with
 * _exit(status), status unchanged; handlers registered after that point
 * (Python's atexit runs before exit()) still run. */
MCS_API int mcs_client_create(mcs_client **out, const char *const *keys, const char *const *values,
                              size_t n, const struct mcs_lanes *lanes, int probe_timeout_ms);

/* Creates a client of a standalone Mooncake client service (Mooncake's
 * mooncake_client / real_client_main, what its mooncake_store_service runs),
 * as Mooncake's setup_dummy does: the client is Mooncake's DummyClient, which
 * holds no transfer engine and forwards every call over RPC to the service at
 * `server_address` (host:port of its RPC port), sharing memory with it through
 * the service's IPC socket "@mooncake_client_<port>.sock".  It allocates
 * `local_buffer_size` bytes of shared memory (mcs_shm_alloc's kind) for the
 * values it reads by copy and registers them with the service;
 * `mem_pool_size` is handed to Mooncake (which does not use it in
 * 0.3.13.post1).  `lanes` and `probe_timeout_ms` as for mcs_client_create
 * (the probe is a TCP connect to server_address).
 *
 * Memory: every call is Mooncake's DummyClient's own, and Mooncake moves
 * the bytes of a call by their address in this process, which the service
 * translates through the segments registered with it: a buffer must lie
 * inside a whole segment from mcs_shm_alloc registered with
 * mcs_client_register_buffer (its start and its exact size, as Mooncake's
 * DummyClient::register_buffer requires; otherwise -1).  A buffer outside
 * them gets Mooncake's answer, -600 (INVALID_PARAMS).  Reads into memory of
 * the client's own take MCS_OP_GET_BUFFER (the service copies the value into
 * the local buffer).  The session API answers MCS_E_UNSUPPORTED; the
 * integrity option is not available here.
 *
 * Returns MCS_E_INVALID_ARG for a NULL out or server_address or one that is
 * not host:port (port 1..65535), MCS_E_UNREACHABLE when the probe fails or
 * Mooncake's setup_dummy fails (no service, or not Mooncake's), MCS_E_UNSUPPORTED
 * when the loaded wheel has no DummyClient, MCS_E_FORKED as mcs_client_create.
 * Close and free it as any client. */
MCS_API int mcs_client_create_dummy(mcs_client **out, uint64_t mem_pool_size,
                                    uint64_t local_buffer_size, const char *server_address,
                                    const struct mcs_lanes *lanes, int probe_timeout_ms);

/* Stops accepting calls, lets accepted batches and calls in other threads
 * finish, joins the workers, releases held values, unregisters L1 and tears
 * Mooncake down.  Idempotent: later calls return 0.  Completions of finished
 * batches stay drainable until mcs_client_free().  In a forked child it only
 * marks the client closed (the parent's client cannot be torn down from there).
 *
 * Closing, and what may go on after it returns.  When this returns, no call
 * of the client runs or can start, Mooncake touches none of the caller's
 * buffers again (every accepted batch has ended), held values are released
 * and L1 is unregistered.  Mooncake's own teardown (RealClient::tearDownAll)
 * comes last.  A client of a single master (master_server_addr host:port)
 * waits for it (0.3-1 s).  A client of HA masters (etcd://, redis://, k8s://)
 * with global_segment_size 0 is not torn down: its buffers registered through
 * mcs_client_register_buffer are unregistered and Mooncake's client is kept,
 * one per setup configuration, for the next client created in the process
 * with the same configuration, which takes it over without a new setup (a
 * second one closed while one is kept is torn down as below); a kept client
 * is never torn down, and the process exits without it.  Any other client
 * of HA masters waits for it at most 1 s, then leaves it to a thread of its
 * own: Mooncake's teardown joins its leader monitor, which waits up to 30 s
 * for a master view change (EtcdLeaderCoordinator::WaitForViewChange) and
 * cannot be woken.  That
 * thread, counted by mcs_teardowns_pending(), runs for the rest of that wait
 * (at most 30 s, counted from the monitor's last wake-up), then Mooncake
 * unmounts the client's segment (global_segment_size > 0), frees it and
 * releases the client's port.  Meanwhile the client sends no more heartbeats
 * (its heartbeat thread is joined first), so the master drops the client and
 * its segment once its client TTL passes, if that comes first; until then the
 * segment stays mounted and served (its memory is freed only after the
 * unmount).  Creating a new client meanwhile works.  At process exit, from an
 * on_exit() handler that runs before the exit handlers and static destructors
 * of store.so: the exit first waits for such teardowns of clients that
 * contribute a segment (global_segment_size not 0), for the rest of their
 * wait, so no master is left listing memory that is gone; then, if other
 * teardowns still run, the shim flushes stdio and ends the process with
 * _exit(status), leaving what was not torn down to the kernel and to the
 * master (the client's TTL) rather than destroying it under a thread that
 * may still use it. */
MCS_API int mcs_client_close(mcs_client *c);

/* For a process that is about to _exit(): like mcs_client_close() (accepted
 * work finishes, workers are joined, L1 is unregistered) but Mooncake's own
 * teardown, which takes 0.3-1 s, is skipped.  The master forgets the client
 * once its TTL passes; the caller should remove the client's metadata
 * entries (see mcs_client_hostname) and must not return to code that may
 * use Mooncake again.  Idempotent with mcs_client_close(). */
MCS_API int mcs_client_close_for_exit(mcs_client *c);

/* Closes if needed, then releases the client and its eventfd.  NULL or an
 * already-freed handle is a no-op.  The handle is invalid afterwards. */
MCS_API void mcs_client_free(mcs_client *c);

/* The name this client registered with the cluster ("host:port", the port
 * chosen by Mooncake's setup), NUL-terminated, into buf[0..cap). */
MCS_API int mcs_client_hostname(mcs_client *c, char *buf, size_t cap);

/* --- replica options (how writes are stored) --- */

/* Sets *opts to Mooncake's defaults (replica_num 1, everything else 0 / empty)
 * and opts->struct_size to sizeof(struct mcs_replica_options). */
MCS_API int mcs_replica_options_init(struct mcs_replica_options *opts);

/* The replica options PUT / UPSERT batches use when theirs is NULL (copied;
 * NULL restores Mooncake's defaults, which a new client starts with).
 * Batches already accepted keep the options they were accepted with.
 * MCS_E_UNSUPPORTED for a field the loaded wheel lacks; group_ids are per
 * batch and refused here. */
MCS_API int mcs_client_set_replica_options(mcs_client *c, const struct mcs_replica_options *opts);

/* --- calls that block the calling thread until they ran --- */

/* Runs `batch` and waits for it: 0 when it ran (each key's outcome in its
 * results; no completion is posted), or a negative code when it was refused
 * (as for mcs_client_submit) or did not run.  If the lane has an idle worker slot
 * and no timeout is set, the batch runs on the calling thread.  With
 * batch->timeout_ms > 0, a batch not done in time makes this return
 * MCS_E_TIMEOUT with its id in *id_out (id_out may be NULL otherwise): the
 * batch goes on, its buffers and arrays must then stay valid until its
 * completion (timed_out = 1) is drained, exactly as after mcs_client_submit().
 * What "goes on" is only what Mooncake already runs: tiles still queued at
 * the deadline are withdrawn (their keys answer MCS_E_TIMEOUT in the
 * completion, nothing of them is sent; the completion may be posted before
 * this returns), so a burst of timed-out calls leaves no queue of work
 * nobody waits for.  A running tile keeps its worker until Mooncake returns
 * (mcs_lane_stats.abandoned counts them); a call queued behind such tiles
 * fails at its own deadline, saying so ("did not start"). */
MCS_API int mcs_client_run(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch);

/* One key, run like a one-key mcs_client_run() without a deadline: the call for
 * callers whose fixed cost per call matters (no struct to fill).  `key` is
 * key_len bytes (not NUL-terminated; no NUL inside); `buf` / `size` as
 * bufs[0] / sizes[0] for GET, PUT and UPSERT, NULL / 0 for the others.  0
 * when it ran, its outcome in *result_out; otherwise a negative code as for
 * mcs_client_run().  MCS_OP_GET_BUFFER is refused (its value is released by batch
 * id: use mcs_client_run()). */
MCS_API int mcs_client_run_one(mcs_client *c, int64_t *result_out, int op, int flags,
                               const char *key, uint64_t key_len, void *buf, uint64_t size);

/* A batch of keys only (MCS_OP_EXISTS, MCS_OP_SIZE, MCS_OP_REMOVE), run like
 * mcs_client_run() without a deadline, with no struct to fill: `key_data` holds
 * exactly n NUL-terminated keys back to back, key_bytes in all (as
 * mcs_batch's key_data with key_offsets NULL).  Each key's outcome goes to
 * results[0..n).  0 when it ran; otherwise a negative code as for mcs_client_run(). */
MCS_API int mcs_client_run_keys(mcs_client *c, int64_t *results, int op, int flags,
                                const char *key_data, uint64_t key_bytes, uint64_t n);

/* Reads byte ranges of values into registered buffers (see struct
 * mcs_ranges), one Mooncake call on the calling thread.  0 when it ran, each
 * range's outcome in ranges->results: its size in bytes, or Mooncake's code
 * (-704 a missing key; -600 a range outside its value or its buffer's
 * registered region, a buffer not registered or NULL; -800 a transfer that
 * failed).  A negative return when it did not run: MCS_E_INVALID_ARG for
 * NULL arrays with non-zero counts, counts that do not add up or keys that
 * overrun key_bytes, an empty key; MCS_E_UNSUPPORTED when the loaded wheel
 * has no get_into_ranges; MCS_E_CLOSED.  Counted in the GET operation's
 * statistics (one call; its keys; the bytes read). */
MCS_API int mcs_client_get_into_ranges(mcs_client *c, const struct mcs_ranges *ranges);

/* Runs one call of Mooncake's session API (struct mcs_session) on the
 * calling thread: 0 when it ran, Mooncake's answers in session->results
 * (0 or bytes moved per key, or Mooncake's code).  A negative return when it
 * did not run: MCS_E_INVALID_ARG for an unknown op, NULL arrays with non-zero
 * counts or keys that overrun key_bytes; MCS_E_UNSUPPORTED when the loaded
 * wheel has no session API (before 0.3.13) or for replica options it cannot
 * honour; MCS_E_CLOSED. */
MCS_API int mcs_client_session(mcs_client *c, const struct mcs_session *session);

/* Removes every key of the cluster (Mooncake's removeAll; the whole cluster,
 * not only this client's keys).  force also removes keys under a read lease.
 * 0 with the number removed in *removed_out, or Mooncake's negative code. */
MCS_API int mcs_client_remove_all(mcs_client *c, int64_t *removed_out, int force);

/* Removes every key in which `pattern`, an ECMAScript regular expression
 * (NUL-terminated, non-empty), finds a match (the master's std::regex_search:
 * anchor it with ^...$ for whole keys); otherwise as mcs_client_remove_all().  A pattern the
 * master cannot compile: -600 INVALID_PARAMS. */
MCS_API int mcs_client_remove_by_regex(mcs_client *c, int64_t *removed_out, const char *pattern,
                                       int force);

/* Mooncake's health_check() into *status_out: 0 healthy, 1 not set up or
 * closed (also for a closed client here), 2 master unreachable as Mooncake's
 * own ping loop last saw it.  No liveness probe: it asks nobody, and a client
 * with global_segment_size 0 runs no ping loop, so it stays 0 after the
 * master dies. */
MCS_API int mcs_client_health_check(mcs_client *c, int *status_out);

/* What the master knows of each key's replicas, as Mooncake's
 * batch_get_replica_desc() asks it (one BatchQuery round trip; like Mooncake's
 * query it may take a read lease).  The n keys are packed as for
 * mcs_client_run_keys(): n NUL-terminated keys back to back, key_bytes in all.
 * On success *json_out receives a NUL-terminated JSON array of n elements, in
 * the keys' order (its length, without the NUL, in *len_out, which may be
 * NULL): null where the master gave no replicas for the key (missing, not yet
 * complete, or the query failed for it: Mooncake's call leaves such a key out
 * of its dict), else the key's replica descriptors as a list of objects, each
 * printed by the wheel's own serializer (struct_json; Mooncake 0.3.13.post1:
 * {"id", "descriptor_variant", "status"}, the variant's alternative as an
 * object of its fields).  The text belongs to the caller, released with
 * mcs_replica_desc_free().  MCS_E_UNSUPPORTED where the loaded wheel lacks
 * the call; MCS_E_INVALID_ARG for NULL pointers or keys that overrun
 * key_bytes; MCS_E_CLOSED. */
MCS_API int mcs_client_replica_desc(mcs_client *c, char **json_out, uint64_t *len_out,
                                    const char *key_data, uint64_t key_bytes, uint64_t n);

/* Releases a text from mcs_client_replica_desc(); NULL is ignored. */
MCS_API void mcs_replica_desc_free(char *json);

/* --- batches in the background and their completions (never block, but mcs_client_wait) --- */

/* Queues `batch` on its operation's lane and returns at once with its id in
 * *id_out.  The batch's keys, sizes and replica options are copied; its
 * bufs, results and values must stay valid until its completion is drained.
 * Refused (nothing queued, no completion): MCS_E_INVALID_ARG for n == 0, bad
 * offsets, an empty key or one with a NUL byte, a NULL or zero-sized
 * buffer, missing or unexpected arrays, malformed replica options (or
 * group_ids not one per key); MCS_E_UNSUPPORTED for a replica field the
 * loaded wheel lacks; MCS_E_DUPLICATE_KEY for a key twice; MCS_E_OUTSIDE_L1;
 * MCS_E_QUEUE_FULL; MCS_E_CLOSED.  Exactly one completion is posted per
 * accepted batch. */
MCS_API int mcs_client_submit(mcs_client *c, uint64_t *id_out, const struct mcs_batch *batch);

/* The completion eventfd: non-blocking, close-on-exec, readable while
 * completions wait to be drained.  Owned by the client; do not close it. */
MCS_API int mcs_client_fd(mcs_client *c, int *fd_out);

/* Moves up to `cap` completions into `out`, oldest first, and returns how
 * many (>= 0); never blocks.  Versioned like the other structs, through the
 * first element only: the caller sets out[0].struct_size to
 * sizeof(struct mcs_completion) as it was compiled, which is also the stride
 * of the array; the library fills at most that many bytes of each element
 * (a cut message stays NUL-terminated) and sets each filled element's
 * struct_size to the bytes it wrote.  A struct_size that does not reach
 * message[0] is refused (MCS_E_INVALID_ARG).  out may be NULL when cap is 0.
 * Resets the eventfd once none remain. */
MCS_API int mcs_client_drain(mcs_client *c, struct mcs_completion *out, size_t cap);

/* Blocks until a completion is waiting or `timeout_ms` passes (-1 forever).
 * 0 when one is waiting, MCS_E_TIMEOUT otherwise. */
MCS_API int mcs_client_wait(mcs_client *c, int timeout_ms);

/* Withdraws what of background batch `id` (from mcs_client_submit) is still
 * queued, for a caller that stopped waiting for it at a deadline of its own:
 * none of that is sent, its keys answer MCS_E_TIMEOUT, and the batch's one
 * completion is posted once its parts already running end (Mooncake cannot
 * stop a transfer it started).  Without it a lane goes on to run, later,
 * work nobody waits for (each blocking call's timeout_ms does this by
 * itself).  A batch submitted with MCS_FLAG_LAND writes none of its bufs
 * once this returns, whether or not any of it was queued.  Returns the
 * number of keys withdrawn, 0 when none of the batch is queued (it runs, has
 * ended, is a blocking call's, or is unknown). */
MCS_API int mcs_client_withdraw(mcs_client *c, uint64_t id);

/* Releases what Mooncake holds for the values of GET_BUFFER batch `id`
 * (its values[] pointers become invalid).  Unknown ids are ignored (0).
 * Until released, the values occupy Mooncake's local buffer
 * (local_buffer_size).  mcs_client_close() releases everything. */
MCS_API int mcs_client_release(mcs_client *c, uint64_t id);

/* Copies the values of a finished GET_BUFFER batch back to back into
 * dst[0..cap): for i = 0..n-1 in order, the results[i] bytes at values[i]
 * of every key with results[i] >= 0 (others are skipped), so a caller can
 * cut one buffer into values with no per-key call.  *written_out gets the
 * bytes written.  MCS_E_INVALID_ARG if they would exceed cap.  Touches no
 * client: call it before mcs_client_release() of that batch. */
MCS_API int mcs_gather(uint64_t *written_out, void *dst, uint64_t cap, const void *const *values,
                       const int64_t *results, uint64_t n);

/* --- memory: the L1 region, registered buffers --- */

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

/* Registers [ptr, ptr+size) with Mooncake as it is (Mooncake's own
 * register_buffer): for RDMA transfers into or out of it, and for
 * mcs_client_get_into_ranges(), which reads only into registered memory.
 * Several regions may be registered; unlike L1, a registered region does not
 * restrict where other transfer buffers may lie.  Mooncake's code passes
 * through: 0, or -600 (INVALID_PARAMS) for NULL, a size of 0, or a region
 * registered already.  The caller keeps the memory alive until it is
 * unregistered or the client is closed (closing unregisters nothing itself:
 * Mooncake's teardown drops its registrations). */
MCS_API int mcs_client_register_buffer(mcs_client *c, void *ptr, uint64_t size);

/* Unregisters a region registered with mcs_client_register_buffer() at ptr:
 * 0, or Mooncake's -600 for an address it does not know. */
MCS_API int mcs_client_unregister_buffer(mcs_client *c, void *ptr);

/* Mooncake's process-wide shared-memory allocator (store.so's ShmHelper, what
 * Mooncake's MooncakeHostMemAllocator and DummyClient::alloc_from_mem_pool
 * use): `size` bytes of a new memfd-backed segment, mapped shared, its start
 * in *ptr_out (NULL on failure).  Needs mcs_load(); no client is needed.
 * Returns MCS_E_INVALID_ARG for a NULL ptr_out or size 0, MCS_E_NOMEM when
 * Mooncake cannot create or map the segment, MCS_E_UNSUPPORTED when the
 * loaded wheel has none, MCS_E_NOT_LOADED. */
MCS_API int mcs_shm_alloc(void **ptr_out, uint64_t size);

/* Unmaps and closes a segment from mcs_shm_alloc: `ptr` must be its start
 * (else MCS_E_INVALID_ARG, and nothing is freed).  A segment still
 * registered with a client's service must be unregistered first. */
MCS_API int mcs_shm_free(void *ptr);

/* --- statistics --- */

/* Counters of lane `lane` (enum mcs_lane_id) into *out (out->struct_size set
 * by the caller). */
MCS_API int mcs_client_lane_stats(mcs_client *c, int lane, struct mcs_lane_stats *out);

/* Counters of operation `op` (enum mcs_op) into *out (out->struct_size set
 * by the caller). */
MCS_API int mcs_client_op_stats(mcs_client *c, int op, struct mcs_op_stats *out);

/* The client's verification counters into *out (out->struct_size set by
 * the caller); all 0 with enabled 0 for a client without "integrity". */
MCS_API int mcs_client_integrity_stats(mcs_client *c, struct mcs_integrity_stats *out);

/* --- for tests of the shim itself, not for applications --- */

/* `native` is the address of a live mooncake::ReplicateConfig that Mooncake's
 * own code built (e.g. taken from its Python binding), of the wheel loaded.
 * Compares it, field by field through the layout mcs_load() picked, with the
 * ReplicateConfig the shim builds from `opts`: returns how many fields differ
 * (0: none) and names them in diff[0..cap) (diff may be NULL), or a negative
 * code (MCS_E_UNSUPPORTED without a known layout). */
MCS_API int mcs_debug_replica_compare(char *diff, size_t cap, const void *native,
                                      const struct mcs_replica_options *opts);

/* Assigns the ReplicateConfig the shim builds from `opts` to `native` (as
 * above), so a test can ask Mooncake's own code what it reads there. */
MCS_API int mcs_debug_replica_assign(void *native, const struct mcs_replica_options *opts);

/* MCS_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* MCS_H */
