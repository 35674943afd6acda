// The pool of kept HA clients (ha_pool.hpp).
#include "ha_pool.hpp"

#include <map>
#include <mutex>

#include "../engine/reaper.hpp"

namespace mcs {

namespace {

// Leaked on purpose: a kept client must not be destroyed by static
// destruction at exit (its teardown would wait out the leader monitor).
struct Pool {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<mooncake::RealClient>> kept;
};
Pool &pool() {
    static Pool *p = new Pool();
    return *p;
}

}  // namespace

std::string pool_key(const std::unordered_map<std::string, std::string> &cfg) {
    std::map<std::string, std::string> sorted(cfg.begin(), cfg.end());
    std::string key;
    for (const auto &[k, v] : sorted) {
        key += std::to_string(k.size()) + ":" + k + "=" + std::to_string(v.size()) + ":" + v;
        key += '\n';
    }
    return key;
}

std::shared_ptr<mooncake::RealClient> take_kept(const std::string &key) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    auto it = p.kept.find(key);
    if (it == p.kept.end()) return nullptr;
    std::shared_ptr<mooncake::RealClient> c = std::move(it->second);
    p.kept.erase(it);
    keep_until_exit(-1);
    return c;
}

bool keep(const std::string &key, std::shared_ptr<mooncake::RealClient> client) {
    Pool &p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    if (p.kept.count(key)) return false;
    keep_until_exit(+1);
    p.kept.emplace(key, std::move(client));
    return true;
}

int kept_clients() {
    Pool &p = pool();
    std::lock_guard<std::mutex> lk(p.mu);
    return int(p.kept.size());
}

}  // namespace mcs
