// The checks before Mooncake's setup: the form of the addresses and the
// protocol, the fail-fast probe, and the environment Mooncake reads instead
// of its config.
//
// Validation (always, whatever the probe timeout): Mooncake's setup crashes on
// an empty master_server_addr (MasterClient::Connect), spends ~90 s retrying
// one without a port, and answers a bare INTERNAL_ERROR for an unknown
// protocol.  So before Mooncake sees them:
//   master_server_addr  host:port (port 1..65535, [v6]:port), or an HA entry
//                       etcd://host:port[;host:port..], redis://..., k8s://...
//   protocol            one of the transports Mooncake knows (tcp, rdma, efa,
//                       cxi, cxl, ub, ubshmem, ascend, sunrise_link,
//                       nvlink_intra, rpc_only), lower case
//   metadata_server     non-empty, no white space
// anything else fails with MCS_E_INVALID_ARG naming the key and the value.
//
// Probe (probe_timeout_ms >= 0; 0 means 2000 ms): Mooncake's setup against an
// unreachable master retries for about 90 s; the probe gives a clear
// MCS_E_UNREACHABLE within the timeout instead:
//   master_server_addr  host:port                 TCP connect
//                       etcd://host:port[;h:p..]  an HTTP GET of etcd's
//                                                 /health on each endpoint;
//                                                 one answering is enough;
//                                                 then a read of its
//                                                 mooncake-store/<cluster
//                                                 id>/master_view: while
//                                                 that holds a new leader's
//                                                 warming placeholder
//                                                 (__mooncake_service_
//                                                 warming__:<lease id>) it
//                                                 is re-read until the
//                                                 timeout, then "no leader
//                                                 yet" (MCS_E_UNREACHABLE)
//                       redis://, k8s://          not probed
//   metadata_server     http://host[:port]/...    TCP connect
//                       etcd://host:port[;h:p..]  as above
//                       P2PHANDSHAKE, others      not probed
//
// Process-wide settings: Mooncake reads the cluster id only from the
// environment variable MC_STORE_CLUSTER_ID, once per process, and keeps one
// etcd connection per process (EtcdHelper refuses other endpoints).  So a
// `cluster_id` key is exported to the environment (overriding an inherited
// value) right before the first setup that uses one, and a later client
// that needs another cluster id, or an etcd:// master with other endpoints,
// than this process's clients is refused (MCS_E_INVALID_ARG) before anything
// runs, naming both.  Not thread-safe against concurrent getenv/setenv
// elsewhere.
#pragma once

#include <string>
#include <unordered_map>

namespace mcs {

using ConfigMap = std::unordered_map<std::string, std::string>;

// Validates the config's addresses and protocol, checks its cluster id and
// etcd endpoints against this process's, then (when probe_timeout_ms >= 0)
// probes the master and the metadata server.  No side effects.  Throws
// mcs::Error: MCS_E_INVALID_ARG for a malformed value or a second cluster id
// or etcd, MCS_E_UNREACHABLE naming the address and the reason.
void prepare_connection(const ConfigMap &cfg, int probe_timeout_ms);

// Right before Mooncake's setup: exports cluster_id to MC_STORE_CLUSTER_ID
// and records the process's cluster id and etcd endpoints (re-checked:
// throws as above if another thread set up different ones meanwhile).
void commit_process_wide(const ConfigMap &cfg);

// Before a standalone (dummy) client's setup: `addr` must be host:port of a
// Mooncake client service (mooncake_client / real_client_main); when
// probe_timeout_ms >= 0 (0: 2000 ms) its RPC port must accept a TCP connection.
// Returns the port.  Throws mcs::Error: MCS_E_INVALID_ARG naming the value,
// MCS_E_UNREACHABLE naming the address and the reason.
int prepare_client_service(const std::string &addr, int probe_timeout_ms);

}  // namespace mcs
