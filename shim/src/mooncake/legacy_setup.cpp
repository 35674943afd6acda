// Wheels before 0.3.12 (0.3.10.post2 .. 0.3.11.post1): a client without a segment.
#include "legacy_setup.hpp"

#include <dlfcn.h>

#include <cctype>
#include <memory>

#include "../engine/engine.hpp"
#include "mooncake_backend.hpp"

namespace mcs {
namespace {

// Their setup_internal(ConfigDict) refuses global_segment_size 0 (it wants 1 KiB
// .. 1 TiB, and then 16 MiB to allocate), so a client could not contribute no
// memory.  Those wheels, and only those, also export the 13-parameter overload
// that ConfigDict setup forwards to and that skips the mount for a size of 0;
// its mangled name (the parameter list is part of it) changed in 0.3.12, so
// resolving it by name finds it exactly on the wheels that need it.
using LegacySetup = ExpectedVoid (*)(mooncake::RealClient *, const std::string &,
                                     const std::string &, size_t, size_t, const std::string &,
                                     const std::string &, const std::string &,
                                     const std::shared_ptr<mooncake::TransferEngine> &,
                                     const std::string &, int, bool, bool, const std::string &);
constexpr const char *kLegacySetup =
    "_ZN8mooncake10RealClient14setup_internalERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEES8_mmS8_S8_S8_RKSt10shared_ptrINS_14TransferEngineEES8_ibbS8_";
LegacySetup g_legacy_setup = nullptr;

// A size key as those wheels read it (digits only: units were expanded in Python).
size_t legacy_size(const ConfigDict &cfg, const char *key, bool zero_ok) {
    std::string v = config_or(cfg, key, "16777216");
    bool digits =
        !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
    size_t n = digits ? std::stoull(v) : 0;
    if (!digits || (n == 0 && !zero_ok) || (n != 0 && (n < 1024 || n > (1ULL << 40))))
        throw Error(MCS_E_INVALID_ARG, std::string(key) + " '" + v +
                                           "' must be a byte count from 1024 to 1 TiB" +
                                           (zero_ok ? " or 0" : ""));
    return n;
}

}  // namespace

std::string config_or(const ConfigDict &cfg, const char *key, const char *fallback) {
    auto it = cfg.find(key);
    return it == cfg.end() ? fallback : it->second;
}

bool wants_no_segment(const ConfigDict &cfg) {
    auto it = cfg.find("global_segment_size");
    return it != cfg.end() && it->second == "0";
}

void resolve_legacy_setup(void *handle) {
    g_legacy_setup = reinterpret_cast<LegacySetup>(dlsym(handle, kLegacySetup));
}

bool has_legacy_setup() {
    return g_legacy_setup != nullptr;
}

// The setup of ConfigDict setup on those wheels (same keys, same defaults, the
// same fixed local RPC port and offload server), called with a segment of 0.
ExpectedVoid legacy_setup_without_segment(mooncake::RealClient *client, const ConfigDict &cfg) {
    std::string protocol = config_or(cfg, "protocol", "tcp");
    if (protocol != "tcp" && protocol != "rdma")
        throw Error(MCS_E_INVALID_ARG, "protocol '" + protocol + "' must be tcp or rdma");
    std::string offload = config_or(cfg, "enable_ssd_offload", "false");
    for (auto &ch : offload) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return g_legacy_setup(
        client, config_or(cfg, "local_hostname", ""), config_or(cfg, "metadata_server", ""), 0,
        legacy_size(cfg, "local_buffer_size", true), protocol, config_or(cfg, "rdma_devices", ""),
        config_or(cfg, "master_server_addr", "127.0.0.1:50051"), {},
        config_or(cfg, "ipc_socket_path", ""), 50052, offload == "true" || offload == "1", true,
        config_or(cfg, "ssd_offload_path", ""));
}

}  // namespace mcs
