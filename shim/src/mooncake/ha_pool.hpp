// Mooncake clients of closed HA clients, kept for the next client of the same
// configuration.  Mooncake's teardown of an HA client cannot end before its
// leader monitor's 30 s wait does (EtcdLeaderCoordinator::WaitForViewChange),
// so tearing one down per close held ~21 threads and ~11 fds per closed
// client for up to 30 s.  A closed HA client that contributes no memory hands
// its Mooncake client here instead (one per configuration); the next client
// created with that configuration takes it without a new setup.  What is kept
// is never torn down: the process exits without it (reaper.hpp).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

namespace mooncake {
class RealClient;
}

namespace mcs {

// The pool's key of a setup configuration (every key and value, in order).
std::string pool_key(const std::unordered_map<std::string, std::string> &cfg);
// The kept client of `key`, taken out of the pool, or null.
std::shared_ptr<mooncake::RealClient> take_kept(const std::string &key);
// Keeps `client` under `key`; false (and nothing kept) if one is kept there already.
bool keep(const std::string &key, std::shared_ptr<mooncake::RealClient> client);
// Clients kept now.
int kept_clients();

}  // namespace mcs
