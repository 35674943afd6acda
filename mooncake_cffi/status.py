"""The shim's codes: status codes (values, names, descriptions, retryability), and the
operation, lane and flag codes of a batch.

A pure module (no native library is loaded), so the error classes, the execution modules,
the CLI and the tests share one table of each.  Codes above -10000 are Mooncake's
``ErrorCode`` values, passed through by the shim unchanged; ``MCS_E_*`` (-10000 and below)
are the shim's own (``enum mcs_status`` in ``mcs.h``), with ``MCS_GET_UNREAD``, a per-key
result the shim names too.  Tests check these tables against the shim's own (``errors.cpp``,
the header's enums, ``mcs_error_name``) in both directions, so they cannot drift apart.
"""

from __future__ import annotations

__all__ = [
    "CODES",
    "FLAG_FORCE",
    "FLAG_LAND",
    "FLAG_SKIP_EXISTING",
    "GET_UNREAD",
    "LANES",
    "LANE_OPS",
    "OPS",
    "OP_CODES",
    "OP_LANE",
    "SESSION_OPS",
    "PUT_EXISTED",
    "RETRYABLE",
    "SHIM_BASE",
    "describe",
    "is_retryable",
    "name",
    "text",
]

#: Codes at or below this value are the shim's own (``MCS_E_*``).
SHIM_BASE = -10000

#: (code, name, one-line description), in the shim's order.
CODES: tuple[tuple[int, str, str], ...] = (
    (0, "OK", "success"),
    (-1, "INTERNAL_ERROR", "Mooncake internal error"),
    (-10, "BUFFER_OVERFLOW", "buffer overflow"),
    (-100, "SHARD_INDEX_OUT_OF_RANGE", "shard index out of range"),
    (-101, "SEGMENT_NOT_FOUND", "segment not found"),
    (-102, "SEGMENT_ALREADY_EXISTS", "segment already exists"),
    (-103, "CLIENT_NOT_FOUND", "client not found by the master"),
    (-200, "NO_AVAILABLE_HANDLE", "no space left in the cluster's memory segments"),
    (-300, "INVALID_VERSION", "invalid version"),
    (-400, "INVALID_KEY", "invalid key"),
    (-500, "WRITE_FAIL", "write failed"),
    (-600, "INVALID_PARAMS", "invalid parameters (empty key, zero size, buffer too small?)"),
    (-601, "ILLEGAL_CLIENT", "illegal client"),
    (-700, "INVALID_WRITE", "invalid write"),
    (-701, "INVALID_READ", "invalid read"),
    (-702, "INVALID_REPLICA", "invalid replica"),
    (-703, "REPLICA_IS_NOT_READY", "replica is not ready"),
    (-704, "OBJECT_NOT_FOUND", "key not found"),
    (-705, "OBJECT_ALREADY_EXISTS", "key already exists"),
    (-706, "OBJECT_HAS_LEASE", "key is under a read lease (force removes it)"),
    (-707, "LEASE_EXPIRED", "lease expired"),
    (-708, "OBJECT_HAS_REPLICATION_TASK", "object has a replication task"),
    (-709, "OBJECT_NO_REPLICATION_TASK", "object has no replication task"),
    (-710, "REPLICA_NOT_FOUND", "replica not found"),
    (-711, "REPLICA_ALREADY_EXISTS", "replica already exists"),
    (-712, "REPLICA_IS_GONE", "replica is gone"),
    (-713, "REPLICA_NOT_IN_LOCAL_MEMORY", "replica not in local memory"),
    (-714, "OBJECT_REPLICA_BUSY", "object replica busy"),
    (-800, "TRANSFER_FAIL", "data transfer failed (storage node down?)"),
    (-801, "CHECKSUM_MISMATCH", "checksum mismatch"),
    (-900, "RPC_FAIL", "RPC to the master failed (master down?)"),
    (-901, "RPC_TIMEOUT", "RPC to the master timed out"),
    (-1000, "ETCD_OPERATION_ERROR", "etcd operation error"),
    (-1001, "ETCD_KEY_NOT_EXIST", "etcd key does not exist"),
    (-1002, "ETCD_TRANSACTION_FAIL", "etcd transaction failed"),
    (-1003, "ETCD_CTX_CANCELLED", "etcd context cancelled"),
    (-1004, "OPLOG_ENTRY_NOT_FOUND", "oplog entry not found"),
    (-1005, "K8S_LEASE_OPERATION_ERROR", "k8s lease operation error"),
    (-1006, "K8S_LEASE_NOT_FOUND", "k8s lease not found"),
    (-1007, "INCOMPLETE_OPLOG_CATCH_UP", "incomplete oplog catch-up"),
    (-1010, "UNAVAILABLE_IN_CURRENT_STATUS", "unavailable in the current status"),
    (-1011, "UNAVAILABLE_IN_CURRENT_MODE", "unavailable in the current mode"),
    (-1012, "NOT_SUPPORTED", "not supported"),
    (-1100, "FILE_NOT_FOUND", "file not found"),
    (-1101, "FILE_OPEN_FAIL", "file open failed"),
    (-1102, "FILE_READ_FAIL", "file read failed"),
    (-1103, "FILE_WRITE_FAIL", "file write failed"),
    (-1104, "FILE_INVALID_BUFFER", "invalid file buffer"),
    (-1105, "FILE_LOCK_FAIL", "file lock failed"),
    (-1106, "FILE_INVALID_HANDLE", "invalid file handle"),
    (-1200, "BUCKET_NOT_FOUND", "bucket not found"),
    (-1201, "BUCKET_ALREADY_EXISTS", "bucket already exists"),
    (-1202, "KEYS_EXCEED_BUCKET_LIMIT", "keys exceed the bucket limit"),
    (-1203, "KEYS_ULTRA_LIMIT", "too many keys"),
    (-1300, "UNABLE_OFFLOAD", "unable to offload"),
    (-1301, "UNABLE_OFFLOADING", "unable to offload (offloading)"),
    (-1400, "TASK_NOT_FOUND", "task not found"),
    (-1401, "TASK_PENDING_LIMIT_EXCEEDED", "task pending limit exceeded"),
    (-1402, "JOB_NOT_FOUND", "job not found"),
    (-1500, "SERIALIZE_UNSUPPORTED", "serialisation unsupported"),
    (-1501, "SERIALIZE_FAIL", "serialisation failed"),
    (-1502, "DESERIALIZE_FAIL", "deserialisation failed"),
    (-1503, "PERSISTENT_FAIL", "persistence failed"),
    (-1600, "DFS_NETWORK_TIMEOUT", "DFS network timeout"),
    (-1601, "DFS_SERVICE_UNAVAILABLE", "DFS service unavailable"),
    (-1602, "DFS_QUOTA_EXCEEDED", "DFS quota exceeded"),
    (-1603, "DFS_PERMISSION_DENIED", "DFS permission denied"),
    (-1604, "DFS_STALE_HANDLE", "DFS stale handle"),
    (-1605, "DFS_PARTIAL_WRITE", "DFS partial write"),
    (-1700, "TENANT_QUOTA_EXCEEDED", "tenant quota exceeded"),
    (-1701, "TENANT_NOT_REGISTERED", "tenant not registered"),
    (-1702, "TENANT_NOT_EMPTY", "tenant not empty"),
    (-10001, "MCS_E_INVALID_ARG", "invalid argument"),
    (-10002, "MCS_E_INVALID_HANDLE", "invalid or freed client handle"),
    (-10003, "MCS_E_CLOSED", "the client is closed"),
    (-10004, "MCS_E_FORKED", "client used in a forked child; create a new one there"),
    (-10005, "MCS_E_NOT_LOADED", "Mooncake is not loaded (call mcs_load first)"),
    (-10006, "MCS_E_LOAD", "loading Mooncake's store.so failed"),
    (-10007, "MCS_E_QUEUE_FULL", "the lane's queue is full"),
    (-10008, "MCS_E_OUTSIDE_L1", "buffer is not inside one registered L1 block"),
    (-10009, "MCS_E_DUPLICATE_KEY", "the same key appears twice in a batch"),
    (-10010, "MCS_E_UNREACHABLE", "master or metadata server unreachable"),
    (-10011, "MCS_E_AGAIN", "nothing to drain"),
    (-10012, "MCS_E_TIMEOUT", "timed out"),
    (-10013, "MCS_E_NOMEM", "out of memory"),
    (-10014, "MCS_E_STATE", "not allowed in the current state"),
    (-10015, "MCS_E_UNSUPPORTED", "the loaded Mooncake wheel cannot do this"),
    (-10016, "MCS_E_CORRUPT", "the value did not verify against its checksum trailer"),
    (-10099, "MCS_E_INTERNAL", "unexpected internal error in the shim"),
    (-10020, "MCS_GET_UNREAD", "not read through Mooncake's buffer; read it another way"),
)

_BY_CODE = {code: (nm, txt) for code, nm, txt in CODES}

OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SHARD_INDEX_OUT_OF_RANGE = -100
SEGMENT_NOT_FOUND = -101
SEGMENT_ALREADY_EXISTS = -102
CLIENT_NOT_FOUND = -103
NO_AVAILABLE_HANDLE = -200
INVALID_VERSION = -300
INVALID_KEY = -400
WRITE_FAIL = -500
INVALID_PARAMS = -600
ILLEGAL_CLIENT = -601
INVALID_WRITE = -700
INVALID_READ = -701
INVALID_REPLICA = -702
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
OBJECT_HAS_REPLICATION_TASK = -708
OBJECT_NO_REPLICATION_TASK = -709
REPLICA_NOT_FOUND = -710
REPLICA_ALREADY_EXISTS = -711
REPLICA_IS_GONE = -712
REPLICA_NOT_IN_LOCAL_MEMORY = -713
OBJECT_REPLICA_BUSY = -714
TRANSFER_FAIL = -800
CHECKSUM_MISMATCH = -801
RPC_FAIL = -900
RPC_TIMEOUT = -901
ETCD_OPERATION_ERROR = -1000
ETCD_KEY_NOT_EXIST = -1001
ETCD_TRANSACTION_FAIL = -1002
ETCD_CTX_CANCELLED = -1003
OPLOG_ENTRY_NOT_FOUND = -1004
K8S_LEASE_OPERATION_ERROR = -1005
K8S_LEASE_NOT_FOUND = -1006
INCOMPLETE_OPLOG_CATCH_UP = -1007
UNAVAILABLE_IN_CURRENT_STATUS = -1010
UNAVAILABLE_IN_CURRENT_MODE = -1011
NOT_SUPPORTED = -1012
FILE_NOT_FOUND = -1100
FILE_OPEN_FAIL = -1101
FILE_READ_FAIL = -1102
FILE_WRITE_FAIL = -1103
FILE_INVALID_BUFFER = -1104
FILE_LOCK_FAIL = -1105
FILE_INVALID_HANDLE = -1106
BUCKET_NOT_FOUND = -1200
BUCKET_ALREADY_EXISTS = -1201
KEYS_EXCEED_BUCKET_LIMIT = -1202
KEYS_ULTRA_LIMIT = -1203
UNABLE_OFFLOAD = -1300
UNABLE_OFFLOADING = -1301
TASK_NOT_FOUND = -1400
TASK_PENDING_LIMIT_EXCEEDED = -1401
JOB_NOT_FOUND = -1402
SERIALIZE_UNSUPPORTED = -1500
SERIALIZE_FAIL = -1501
DESERIALIZE_FAIL = -1502
PERSISTENT_FAIL = -1503
DFS_NETWORK_TIMEOUT = -1600
DFS_SERVICE_UNAVAILABLE = -1601
DFS_QUOTA_EXCEEDED = -1602
DFS_PERMISSION_DENIED = -1603
DFS_STALE_HANDLE = -1604
DFS_PARTIAL_WRITE = -1605
TENANT_QUOTA_EXCEEDED = -1700
TENANT_NOT_REGISTERED = -1701
TENANT_NOT_EMPTY = -1702
MCS_E_INVALID_ARG = -10001
MCS_E_INVALID_HANDLE = -10002
MCS_E_CLOSED = -10003
MCS_E_FORKED = -10004
MCS_E_NOT_LOADED = -10005
MCS_E_LOAD = -10006
MCS_E_QUEUE_FULL = -10007
MCS_E_OUTSIDE_L1 = -10008
MCS_E_DUPLICATE_KEY = -10009
MCS_E_UNREACHABLE = -10010
MCS_E_AGAIN = -10011
MCS_E_TIMEOUT = -10012
MCS_E_NOMEM = -10013
MCS_E_STATE = -10014
MCS_E_UNSUPPORTED = -10015
#: A value that did not verify (the ``integrity`` option), still after re-reading it.
MCS_E_CORRUPT = -10016
MCS_E_INTERNAL = -10099
#: A per-key GET_BUFFER result, not an error: the key was not read that way.
MCS_GET_UNREAD = -10020

#: Failures that may succeed when tried again: a full pool that eviction may free, a transfer
#: or RPC that a healed link or a restarted process may complete, a replica still being
#: written, a lane queue that drains, a deadline that passed.
RETRYABLE: frozenset[int] = frozenset(
    {
        NO_AVAILABLE_HANDLE,
        REPLICA_IS_NOT_READY,
        OBJECT_REPLICA_BUSY,
        TRANSFER_FAIL,
        RPC_FAIL,
        RPC_TIMEOUT,
        ETCD_OPERATION_ERROR,
        ETCD_TRANSACTION_FAIL,
        UNAVAILABLE_IN_CURRENT_STATUS,
        MCS_E_QUEUE_FULL,
        MCS_E_UNREACHABLE,
        MCS_E_TIMEOUT,
        MCS_E_AGAIN,
    }
)


def name(code: int) -> str:
    """Symbolic name of a status code (``"OK"``, ``"OBJECT_HAS_LEASE"``, ``"UNKNOWN_ERROR"``)."""
    entry = _BY_CODE.get(int(code))
    return entry[0] if entry else "UNKNOWN_ERROR"


def text(code: int) -> str:
    """A one-line description of a status code."""
    entry = _BY_CODE.get(int(code))
    return entry[1] if entry else "unknown error code"


def describe(code: int) -> str:
    """``"NAME (code): description"``."""
    return f"{name(code)} ({int(code)}): {text(code)}"


def is_retryable(code: int) -> bool:
    """True when trying the same call again may succeed (see :data:`RETRYABLE`)."""
    return int(code) in RETRYABLE


# ------------------------------------------------------------- batch codes (mcs.h)

#: Operation names, in the shim's order (``enum mcs_op``: the index is the code).
OPS: tuple[str, ...] = ("exists", "get", "put", "upsert", "remove", "size", "get_buffer")
#: Operation codes by name.
OP_CODES: dict[str, int] = {op: code for code, op in enumerate(OPS)}
OP_EXISTS, OP_GET, OP_PUT, OP_UPSERT, OP_REMOVE, OP_SIZE, OP_GET_BUFFER = range(len(OPS))

#: Lane names, in the shim's order (``enum mcs_lane_id``: the index is the id).
LANES: tuple[str, ...] = ("lookup", "retrieve", "store", "delete", "shared")
#: The operations each lane serves (``shared`` serves those of lanes without workers).
LANE_OPS: dict[str, tuple[str, ...]] = {
    "lookup": ("exists", "size"),
    "retrieve": ("get", "get_buffer"),
    "store": ("put", "upsert"),
    "delete": ("remove",),
}
#: The lane of each operation.
OP_LANE: dict[str, str] = {op: lane for lane, ops in LANE_OPS.items() for op in ops}

#: Mooncake's session calls, in the shim's order (``enum mcs_session_op``: the index is the
#: code): batch_put_session_start, batch_put_from_multi_buffer_ranges,
#: batch_put_session_end, batch_put_session_revoke, batch_get_session_start,
#: batch_get_into_multi_buffer_ranges, batch_get_session_end.
SESSION_OPS: tuple[str, ...] = (
    "put_start",
    "put_ranges",
    "put_end",
    "put_revoke",
    "get_start",
    "get_ranges",
    "get_end",
)
(
    SESSION_PUT_START,
    SESSION_PUT_RANGES,
    SESSION_PUT_END,
    SESSION_PUT_REVOKE,
    SESSION_GET_START,
    SESSION_GET_RANGES,
    SESSION_GET_END,
) = range(len(SESSION_OPS))

#: ``enum mcs_flags``: REMOVE ignores the read lease.
FLAG_FORCE = 1
#: ``enum mcs_flags``: PUT looks keys up first; present ones get :data:`PUT_EXISTED`.
FLAG_SKIP_EXISTING = 2
#: ``enum mcs_flags``: a GET run by a waiting caller reads into the shim's memory first and
#: copies into the caller's buffers only while the caller still waits.
FLAG_LAND = 8
#: Per-key PUT result for a key that already held a value (``MCS_PUT_EXISTED``).
PUT_EXISTED = 1
#: Per-key GET_BUFFER result for a key not read that way (``MCS_GET_UNREAD``).
GET_UNREAD = -10020
