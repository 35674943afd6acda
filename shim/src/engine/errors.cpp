// Names and one-line descriptions of every status code the shim returns:
// Mooncake's ErrorCode values (passed through unchanged) and the shim's own.
#include "engine.hpp"

namespace mcs {
namespace {

struct CodeInfo {
    int code;
    const char *name;
    const char *text;
};

constexpr CodeInfo kCodes[] = {
    {0, "OK", "success"},
    {-1, "INTERNAL_ERROR", "Mooncake internal error"},
    {-10, "BUFFER_OVERFLOW", "buffer overflow"},
    {-100, "SHARD_INDEX_OUT_OF_RANGE", "shard index out of range"},
    {-101, "SEGMENT_NOT_FOUND", "segment not found"},
    {-102, "SEGMENT_ALREADY_EXISTS", "segment already exists"},
    {-103, "CLIENT_NOT_FOUND", "client not found by the master"},
    {-200, "NO_AVAILABLE_HANDLE", "no space left in the cluster's memory segments"},
    {-300, "INVALID_VERSION", "invalid version"},
    {-400, "INVALID_KEY", "invalid key"},
    {-500, "WRITE_FAIL", "write failed"},
    {-600, "INVALID_PARAMS", "invalid parameters (empty key, zero size, buffer too small?)"},
    {-601, "ILLEGAL_CLIENT", "illegal client"},
    {-700, "INVALID_WRITE", "invalid write"},
    {-701, "INVALID_READ", "invalid read"},
    {-702, "INVALID_REPLICA", "invalid replica"},
    {-703, "REPLICA_IS_NOT_READY", "replica is not ready"},
    {-704, "OBJECT_NOT_FOUND", "key not found"},
    {-705, "OBJECT_ALREADY_EXISTS", "key already exists"},
    {-706, "OBJECT_HAS_LEASE", "key is under a read lease (force removes it)"},
    {-707, "LEASE_EXPIRED", "lease expired"},
    {-708, "OBJECT_HAS_REPLICATION_TASK", "object has a replication task"},
    {-709, "OBJECT_NO_REPLICATION_TASK", "object has no replication task"},
    {-710, "REPLICA_NOT_FOUND", "replica not found"},
    {-711, "REPLICA_ALREADY_EXISTS", "replica already exists"},
    {-712, "REPLICA_IS_GONE", "replica is gone"},
    {-713, "REPLICA_NOT_IN_LOCAL_MEMORY", "replica not in local memory"},
    {-714, "OBJECT_REPLICA_BUSY", "object replica busy"},
    {-800, "TRANSFER_FAIL", "data transfer failed (storage node down?)"},
    {-801, "CHECKSUM_MISMATCH", "checksum mismatch"},
    {-900, "RPC_FAIL", "RPC to the master failed (master down?)"},
    {-901, "RPC_TIMEOUT", "RPC to the master timed out"},
    {-1000, "ETCD_OPERATION_ERROR", "etcd operation error"},
    {-1001, "ETCD_KEY_NOT_EXIST", "etcd key does not exist"},
    {-1002, "ETCD_TRANSACTION_FAIL", "etcd transaction failed"},
    {-1003, "ETCD_CTX_CANCELLED", "etcd context cancelled"},
    {-1004, "OPLOG_ENTRY_NOT_FOUND", "oplog entry not found"},
    {-1005, "K8S_LEASE_OPERATION_ERROR", "k8s lease operation error"},
    {-1006, "K8S_LEASE_NOT_FOUND", "k8s lease not found"},
    {-1007, "INCOMPLETE_OPLOG_CATCH_UP", "incomplete oplog catch-up"},
    {-1010, "UNAVAILABLE_IN_CURRENT_STATUS", "unavailable in the current status"},
    {-1011, "UNAVAILABLE_IN_CURRENT_MODE", "unavailable in the current mode"},
    {-1012, "NOT_SUPPORTED", "not supported"},
    {-1100, "FILE_NOT_FOUND", "file not found"},
    {-1101, "FILE_OPEN_FAIL", "file open failed"},
    {-1102, "FILE_READ_FAIL", "file read failed"},
    {-1103, "FILE_WRITE_FAIL", "file write failed"},
    {-1104, "FILE_INVALID_BUFFER", "invalid file buffer"},
    {-1105, "FILE_LOCK_FAIL", "file lock failed"},
    {-1106, "FILE_INVALID_HANDLE", "invalid file handle"},
    {-1200, "BUCKET_NOT_FOUND", "bucket not found"},
    {-1201, "BUCKET_ALREADY_EXISTS", "bucket already exists"},
    {-1202, "KEYS_EXCEED_BUCKET_LIMIT", "keys exceed the bucket limit"},
    {-1203, "KEYS_ULTRA_LIMIT", "too many keys"},
    {-1300, "UNABLE_OFFLOAD", "unable to offload"},
    {-1301, "UNABLE_OFFLOADING", "unable to offload (offloading)"},
    {-1400, "TASK_NOT_FOUND", "task not found"},
    {-1401, "TASK_PENDING_LIMIT_EXCEEDED", "task pending limit exceeded"},
    {-1402, "JOB_NOT_FOUND", "job not found"},
    {-1500, "SERIALIZE_UNSUPPORTED", "serialisation unsupported"},
    {-1501, "SERIALIZE_FAIL", "serialisation failed"},
    {-1502, "DESERIALIZE_FAIL", "deserialisation failed"},
    {-1503, "PERSISTENT_FAIL", "persistence failed"},
    {-1600, "DFS_NETWORK_TIMEOUT", "DFS network timeout"},
    {-1601, "DFS_SERVICE_UNAVAILABLE", "DFS service unavailable"},
    {-1602, "DFS_QUOTA_EXCEEDED", "DFS quota exceeded"},
    {-1603, "DFS_PERMISSION_DENIED", "DFS permission denied"},
    {-1604, "DFS_STALE_HANDLE", "DFS stale handle"},
    {-1605, "DFS_PARTIAL_WRITE", "DFS partial write"},
    {-1700, "TENANT_QUOTA_EXCEEDED", "tenant quota exceeded"},
    {-1701, "TENANT_NOT_REGISTERED", "tenant not registered"},
    {-1702, "TENANT_NOT_EMPTY", "tenant not empty"},
    {MCS_E_INVALID_ARG, "MCS_E_INVALID_ARG", "invalid argument"},
    {MCS_E_INVALID_HANDLE, "MCS_E_INVALID_HANDLE", "invalid or freed client handle"},
    {MCS_E_CLOSED, "MCS_E_CLOSED", "the client is closed"},
    {MCS_E_FORKED, "MCS_E_FORKED", "client used in a forked child; create a new one there"},
    {MCS_E_NOT_LOADED, "MCS_E_NOT_LOADED", "Mooncake is not loaded (call mcs_load first)"},
    {MCS_E_LOAD, "MCS_E_LOAD", "loading Mooncake's store.so failed"},
    {MCS_E_QUEUE_FULL, "MCS_E_QUEUE_FULL", "the lane's queue is full"},
    {MCS_E_OUTSIDE_L1, "MCS_E_OUTSIDE_L1", "buffer is not inside one registered L1 block"},
    {MCS_E_DUPLICATE_KEY, "MCS_E_DUPLICATE_KEY", "the same key appears twice in a batch"},
    {MCS_E_UNREACHABLE, "MCS_E_UNREACHABLE", "master or metadata server unreachable"},
    {MCS_E_AGAIN, "MCS_E_AGAIN", "nothing to drain"},
    {MCS_E_TIMEOUT, "MCS_E_TIMEOUT", "timed out"},
    {MCS_E_NOMEM, "MCS_E_NOMEM", "out of memory"},
    {MCS_E_STATE, "MCS_E_STATE", "not allowed in the current state"},
    {MCS_E_UNSUPPORTED, "MCS_E_UNSUPPORTED", "the loaded Mooncake wheel cannot do this"},
    {MCS_E_CORRUPT, "MCS_E_CORRUPT", "the value did not verify against its checksum trailer"},
    {MCS_E_INTERNAL, "MCS_E_INTERNAL", "unexpected internal error in the shim"},
    {MCS_GET_UNREAD, "MCS_GET_UNREAD", "not read through Mooncake's buffer; read it another way"},
};

const CodeInfo *find(int code) {
    for (const auto &info : kCodes)
        if (info.code == code) return &info;
    return nullptr;
}

}  // namespace

const char *error_name(int code) {
    const CodeInfo *info = find(code);
    return info ? info->name : "UNKNOWN_ERROR";
}

const char *error_text(int code) {
    const CodeInfo *info = find(code);
    return info ? info->text : "unknown error code";
}

std::string describe(int code) {
    return std::string(error_name(code)) + " (" + std::to_string(code) + "): " + error_text(code);
}

}  // namespace mcs
