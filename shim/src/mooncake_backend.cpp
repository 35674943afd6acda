// The Mooncake backend: reaches mooncake::RealClient inside the wheel's
// store.so without headers, through dlsym'd member functions called with
// `this` as their first argument (x86-64 Itanium ABI; a by-value class return
// travels through the hidden pointer before `this`, as for a free function).
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <typeinfo>

#include "internal.hpp"
#include "probe.hpp"

namespace mooncake {
class RealClient;
class TransferEngine;  // only passed as an empty shared_ptr (see LegacySetup)
// Opaque: reached only through its exported ptr() / size() and destroyed
// through the shared_ptr control block store.so created.
class BufferHandle;
// Only its typeid is used (to receive a pointer from pybind11); the layout
// of the real ReplicateConfig is never touched here.
struct ReplicateConfig {};
}  // namespace mooncake

namespace mcs {
namespace {

using mooncake::BufferHandle;
using mooncake::RealClient;
using HandlePtr = std::shared_ptr<BufferHandle>;
using mooncake::ReplicateConfig;
using ConfigDict = std::unordered_map<std::string, std::string>;
using PtrVec = std::vector<void *>;
using SizeVec = std::vector<size_t>;

// tl::expected<void, ErrorCode>: 8 bytes in RAX, low 32 bits the error code,
// byte 4 has_value.  Trivially copyable here so it is returned the same way.
struct ExpectedVoid {
    int32_t error;
    uint8_t has_value;
    uint8_t pad[3];
};
static_assert(sizeof(ExpectedVoid) == 8, "ExpectedVoid must be 8 bytes");

struct Symbols {
    std::shared_ptr<RealClient> (*create)();
    ExpectedVoid (*setup)(RealClient *, const ConfigDict &);
    int (*teardown)(RealClient *);
    std::vector<int> (*batch_exists)(RealClient *, const StrVec &);
    std::vector<int> (*batch_put)(RealClient *, const StrVec &, const PtrVec &, const SizeVec &,
                                  const ReplicateConfig &);
    std::vector<int> (*batch_upsert)(RealClient *, const StrVec &, const PtrVec &, const SizeVec &,
                                     const ReplicateConfig &);
    std::vector<int64_t> (*batch_get)(RealClient *, const StrVec &, const PtrVec &,
                                      const SizeVec &);
    std::vector<int> (*batch_remove)(RealClient *, const StrVec &, bool);
    int (*register_buffer)(RealClient *, void *, size_t);
    int (*unregister_buffer)(RealClient *, void *);
    int64_t (*get_size)(RealClient *, const std::string &);
    int (*is_exist)(RealClient *, const std::string &);
    std::string (*get_hostname)(const RealClient *);
    int64_t (*get_into)(RealClient *, const std::string &, void *, size_t);
    HandlePtr (*get_buffer)(RealClient *, const std::string &);
    std::vector<HandlePtr> (*batch_get_buffer)(RealClient *, const StrVec &);
    void *(*handle_ptr)(const BufferHandle *);
    size_t (*handle_size)(const BufferHandle *);
    int32_t *minloglevel;
};

struct SymbolName {
    const char *mangled;
    const char *pretty;
};

// In the order of the fields of Symbols.
constexpr SymbolName kSymbols[] = {
    {"_ZN8mooncake10RealClient6createEv", "RealClient::create()"},
    {"_ZN8mooncake10RealClient14setup_internalERKSt13unordered_mapINSt7__cxx1112basic_"
     "stringIcSt11char_traitsIcESaIcEEES7_St4hashIS7_ESt8equal_toIS7_ESaISt4pairIKS7_S7_EEE",
     "RealClient::setup_internal(ConfigDict const&)"},
    {"_ZN8mooncake10RealClient11tearDownAllEv", "RealClient::tearDownAll()"},
    {"_ZN8mooncake10RealClient12batchIsExistERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EE",
     "RealClient::batchIsExist(keys)"},
    {"_ZN8mooncake10RealClient14batch_put_fromERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EERKS1_IPvSaISC_EERKS1_ImSaImEERKNS_15ReplicateConfigE",
     "RealClient::batch_put_from(keys, bufs, sizes, ReplicateConfig)"},
    {"_ZN8mooncake10RealClient17batch_upsert_fromERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EERKS1_IPvSaISC_EERKS1_ImSaImEERKNS_15ReplicateConfigE",
     "RealClient::batch_upsert_from(keys, bufs, sizes, ReplicateConfig)"},
    {"_ZN8mooncake10RealClient14batch_get_intoERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EERKS1_IPvSaISC_EERKS1_ImSaImEE",
     "RealClient::batch_get_into(keys, bufs, sizes)"},
    {"_ZN8mooncake10RealClient11batchRemoveERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EEb",
     "RealClient::batchRemove(keys, bool)"},
    {"_ZN8mooncake10RealClient15register_bufferEPvm", "RealClient::register_buffer(void*, size_t)"},
    {"_ZN8mooncake10RealClient17unregister_bufferEPv", "RealClient::unregister_buffer(void*)"},
    {"_ZN8mooncake10RealClient7getSizeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "RealClient::getSize(key)"},
    {"_ZN8mooncake10RealClient7isExistERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "RealClient::isExist(key)"},
    {"_ZNK8mooncake10RealClient12get_hostnameB5cxx11Ev", "RealClient::get_hostname()"},
    {"_ZN8mooncake10RealClient8get_intoERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPvm",
     "RealClient::get_into(key, void*, size_t)"},
    {"_ZN8mooncake10RealClient10get_bufferERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "RealClient::get_buffer(key)"},
    {"_ZN8mooncake10RealClient16batch_get_bufferERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEESaIS7_EE",
     "RealClient::batch_get_buffer(keys)"},
    {"_ZNK8mooncake12BufferHandle3ptrEv", "BufferHandle::ptr()"},
    {"_ZNK8mooncake12BufferHandle4sizeEv", "BufferHandle::size()"},
    {"_ZN3fLI17FLAGS_minloglevelE", "glog FLAGS_minloglevel"},
};
static_assert(sizeof(kSymbols) / sizeof(kSymbols[0]) == sizeof(Symbols) / sizeof(void *),
              "one name per symbol");

// ---- Wheels before 0.3.12 (0.3.10.post2 .. 0.3.11.post1) -------------------
// Their setup_internal(ConfigDict) refuses global_segment_size 0 (it wants 1 KiB
// .. 1 TiB, and then 16 MiB to allocate), so a client could not contribute no
// memory.  Those wheels, and only those, also export the 13-parameter overload
// that ConfigDict setup forwards to and that skips the mount for a size of 0;
// its mangled name (the parameter list is part of it) changed in 0.3.12, so
// resolving it by name finds it exactly on the wheels that need it.
using LegacySetup = ExpectedVoid (*)(RealClient *, const std::string &, const std::string &, size_t,
                                     size_t, const std::string &, const std::string &,
                                     const std::string &,
                                     const std::shared_ptr<mooncake::TransferEngine> &,
                                     const std::string &, int, bool, bool, const std::string &);
constexpr const char *kLegacySetup =
    "_ZN8mooncake10RealClient14setup_internalERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEES8_mmS8_S8_S8_RKSt10shared_ptrINS_14TransferEngineEES8_ibbS8_";
LegacySetup g_legacy_setup = nullptr;

std::string config_or(const ConfigDict &cfg, const char *key, const char *fallback) {
    auto it = cfg.find(key);
    return it == cfg.end() ? fallback : it->second;
}

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

// The setup of ConfigDict setup on those wheels (same keys, same defaults, the
// same fixed local RPC port and offload server), called with a segment of 0.
ExpectedVoid legacy_setup_without_segment(RealClient *client, const ConfigDict &cfg) {
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

bool wants_no_segment(const ConfigDict &cfg) {
    auto it = cfg.find("global_segment_size");
    return it != cfg.end() && it->second == "0";
}
// ---------------------------------------------------------------------------

std::mutex g_load_mu;
std::atomic<bool> g_loaded{false};
Symbols g_sym{};
int g_log_level = 3;

class MooncakeBackend final : public Backend {
public:
    explicit MooncakeBackend(std::shared_ptr<RealClient> client) : client_(std::move(client)) {}
    ~MooncakeBackend() override {
        if (leak_) {
            // The process is about to _exit: destroying RealClient would run the
            // slow teardown that close_for_exit skipped.  Leak it on purpose.
            new std::shared_ptr<RealClient>(std::move(client_));
            return;
        }
        teardown();
    }

    // Single keys take Mooncake's single-key calls: one RPC without the
    // batch bookkeeping (measurably faster for the small-operation path).
    std::vector<int> exists(const StrVec &keys) override {
        if (keys.size() == 1) return {g_sym.is_exist(client_.get(), keys[0])};
        return g_sym.batch_exists(client_.get(), keys);
    }
    std::vector<int64_t> get_into(const StrVec &keys, const PtrVec &bufs,
                                  const SizeVec &sizes) override {
        if (keys.size() == 1 && single_get_)
            return {g_sym.get_into(client_.get(), keys[0], bufs[0], sizes[0])};
        return g_sym.batch_get(client_.get(), keys, bufs, sizes);
    }
    // Mooncake sizes and reads each value into its client's local buffer in
    // one round trip (a batch query, then the transfers).  A null handle
    // means it did not: missing, not ready, the local buffer full, or a
    // failed transfer -- Mooncake does not say which, so it is "unread".
    HeldValues get_buffers(const StrVec &keys) override {
        auto handles = std::make_shared<std::vector<HandlePtr>>();
        if (keys.size() == 1)
            handles->push_back(g_sym.get_buffer(client_.get(), keys[0]));
        else
            *handles = g_sym.batch_get_buffer(client_.get(), keys);
        HeldValues out;
        const size_t n = handles->size();
        out.values.resize(n, nullptr);
        out.sizes.resize(n, MCS_GET_UNREAD);
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            const BufferHandle *h = (*handles)[i].get();
            if (!h) continue;
            out.values[i] = g_sym.handle_ptr(h);
            out.sizes[i] = int64_t(g_sym.handle_size(h));
            any = true;
        }
        if (any) out.hold = std::move(handles);
        return out;
    }
    std::vector<int> put_from(const StrVec &keys, const PtrVec &bufs, const SizeVec &sizes,
                              const void *rcfg, bool upsert) override {
        auto &cfg = *static_cast<const ReplicateConfig *>(rcfg);
        return upsert ? g_sym.batch_upsert(client_.get(), keys, bufs, sizes, cfg)
                      : g_sym.batch_put(client_.get(), keys, bufs, sizes, cfg);
    }
    std::vector<int> remove(const StrVec &keys, bool force) override {
        return g_sym.batch_remove(client_.get(), keys, force);
    }
    int64_t size(const std::string &key) override { return g_sym.get_size(client_.get(), key); }
    int register_buffer(void *ptr, size_t size) override {
        return g_sym.register_buffer(client_.get(), ptr, size);
    }
    int unregister_buffer(void *ptr) override {
        return g_sym.unregister_buffer(client_.get(), ptr);
    }
    void skip_teardown() override {
        torn_down_ = true;
        leak_ = true;
    }
    std::string hostname() override { return g_sym.get_hostname(client_.get()); }
    void teardown() override {
        if (client_ && !torn_down_) {
            torn_down_ = true;
            g_sym.teardown(client_.get());
        }
    }

private:
    std::shared_ptr<RealClient> client_;
    bool torn_down_ = false;
    bool leak_ = false;
    bool single_get_ = std::getenv("MCS_BATCH_GET_ONLY") == nullptr;
};

}  // namespace

int load_mooncake(const char *path, std::string &msg) {
    std::lock_guard<std::mutex> lk(g_load_mu);
    if (g_loaded.load()) return MCS_OK;
    if (!path || !*path) {
        msg = "path to Mooncake's store.so is NULL or empty";
        return MCS_E_INVALID_ARG;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        msg = std::string("dlopen(") + path + ") failed: " + (e ? e : "unknown error");
        return MCS_E_LOAD;
    }
    void *ptrs[sizeof(kSymbols) / sizeof(kSymbols[0])];
    std::string missing;
    for (size_t i = 0; i < sizeof(kSymbols) / sizeof(kSymbols[0]); i++) {
        ptrs[i] = dlsym(h, kSymbols[i].mangled);
        if (!ptrs[i]) missing += std::string(missing.empty() ? "" : ", ") + kSymbols[i].pretty;
    }
    if (!missing.empty()) {
        // dlclose would not unload it anyway; keep the handle.
        msg = std::string(path) + " lacks symbols this shim needs (" + missing +
              "); install mooncake-transfer-engine(-non-cuda)==0.3.13.post1";
        return MCS_E_LOAD;
    }
    static_assert(sizeof(Symbols) == sizeof(ptrs), "layout");
    std::memcpy(&g_sym, ptrs, sizeof ptrs);
    g_legacy_setup = reinterpret_cast<LegacySetup>(dlsym(h, kLegacySetup));  // optional
    *g_sym.minloglevel = g_log_level;
    g_loaded.store(true);
    return MCS_OK;
}

const void *replicate_config_typeid() {
    return &typeid(ReplicateConfig);
}

bool mooncake_loaded() {
    return g_loaded.load();
}

int set_log_level(int level) {
    if (level < 0 || level > 3) return MCS_E_INVALID_ARG;
    std::lock_guard<std::mutex> lk(g_load_mu);
    g_log_level = level;
    if (g_loaded.load()) *g_sym.minloglevel = level;
    return MCS_OK;
}

std::unique_ptr<Backend> make_mooncake_backend(const StrVec &keys, const StrVec &values,
                                               int probe_timeout_ms) {
    if (!g_loaded.load())
        throw Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
    ConfigDict cfg;
    for (size_t i = 0; i < keys.size(); i++) cfg[keys[i]] = values[i];
    // Setup re-reads glog's threshold from MC_LOG_LEVEL in places; re-assert.
    *g_sym.minloglevel = g_log_level;

    prepare_connection(cfg, probe_timeout_ms);
    std::shared_ptr<RealClient> client = g_sym.create();
    if (!client) throw Error(MCS_E_INTERNAL, "RealClient::create() returned null");
    ExpectedVoid r = g_legacy_setup && wants_no_segment(cfg)
                         ? legacy_setup_without_segment(client.get(), cfg)
                         : g_sym.setup(client.get(), cfg);
    *g_sym.minloglevel = g_log_level;
    if (!r.has_value) {
        int code = r.error ? r.error : -1;
        g_sym.teardown(client.get());
        throw Error(code, "Mooncake setup failed: " + describe(code));
    }
    return std::make_unique<MooncakeBackend>(std::move(client));
}

}  // namespace mcs
