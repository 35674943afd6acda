// The fail-fast check before Mooncake's setup, and the environment Mooncake
// reads instead of its config.
//
// Mooncake's setup against an unreachable master retries for about 90 s; the
// probe gives a clear MCS_E_UNREACHABLE within the timeout instead.  It
// understands the address forms Mooncake accepts:
//   master_server_addr  host:port                 TCP connect
//                       etcd://host:port[;h:p..]  (HA masters) an HTTP GET of
//                                                 etcd's /health on each
//                                                 endpoint; one answering
//                                                 etcd is enough
//   metadata_server     http://host[:port]/...    TCP connect
//                       etcd://host:port[;h:p..]  as above
//                       P2PHANDSHAKE, others      not probed
// and `cluster_id` (HA): Mooncake reads the cluster id only from the
// environment variable MC_STORE_CLUSTER_ID, so a `cluster_id` key in the
// config is exported to it (process-wide, overriding an inherited value)
// before setup.  Not thread-safe against concurrent getenv/setenv elsewhere.
#pragma once

#include <string>
#include <unordered_map>

namespace mcs {

// Applies cluster_id, then (when probe_timeout_ms >= 0; 0 means 2000 ms)
// probes the master and the metadata server.  Throws mcs::Error
// (MCS_E_UNREACHABLE naming the address and the reason, MCS_E_INVALID_ARG for
// a malformed etcd:// address) on failure.
void prepare_connection(const std::unordered_map<std::string, std::string> &cfg,
                        int probe_timeout_ms);

}  // namespace mcs
