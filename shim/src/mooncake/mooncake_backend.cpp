// The Mooncake backend: reaches mooncake::RealClient inside the wheel's
// store.so without headers, through dlsym'd member functions called with
// `this` as their first argument (x86-64 Itanium ABI; a by-value class return
// travels through the hidden pointer before `this`, as for a free function).
#include "mooncake_backend.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "../engine/engine.hpp"
#include "../engine/reaper.hpp"
#include "../engine/replica.hpp"
#include "fds.hpp"
#include "ha_pool.hpp"
#include "legacy_setup.hpp"
#include "probe.hpp"
#include "replica_choice.hpp"

namespace mooncake {
// Opaque: reached only through its exported ptr() / size() and destroyed
// through the shared_ptr control block store.so created.
class BufferHandle;
// Built by replica.cpp in the loaded wheel's layout; only passed by reference here.
struct ReplicateConfig;
}  // namespace mooncake

namespace mcs {
namespace {

using mooncake::BufferHandle;
using mooncake::RealClient;
using HandlePtr = std::shared_ptr<BufferHandle>;
using mooncake::ReplicateConfig;
using PtrVec = std::vector<void *>;
using SizeVec = std::vector<size_t>;
using PtrVecs = std::vector<PtrVec>;
using SizeVecs = std::vector<SizeVec>;

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
    long (*remove_all)(RealClient *, bool);
    long (*remove_by_regex)(RealClient *, const std::string &, bool);
    int (*health_check)(RealClient *);
    std::vector<int> (*batch_get_multi)(RealClient *, const StrVec &, const PtrVecs &,
                                        const SizeVecs &, bool);
    std::vector<int> (*batch_put_multi)(RealClient *, const StrVec &, const PtrVecs &,
                                        const SizeVecs &, const ReplicateConfig &);
    int (*put_one)(RealClient *, const std::string &, void *, size_t, const ReplicateConfig &);
    int (*upsert_one)(RealClient *, const std::string &, void *, size_t, const ReplicateConfig &);
    int (*remove_one)(RealClient *, const std::string &, bool);
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
    {"_ZN8mooncake10RealClient9removeAllEb", "RealClient::removeAll(bool)"},
    {"_ZN8mooncake10RealClient13removeByRegexERKNSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEEb",
     "RealClient::removeByRegex(pattern, bool)"},
    {"_ZN8mooncake10RealClient12health_checkEv", "RealClient::health_check()"},
    {"_ZN8mooncake10RealClient28batch_get_into_multi_buffersERKSt6vectorINSt7__cxx1112basic_"
     "stringIcSt11char_traitsIcESaIcEEESaIS7_EERKS1_IS1_IPvSaISC_EESaISE_EERKS1_IS1_"
     "ImSaImEESaISK_EEb",
     "RealClient::batch_get_into_multi_buffers(keys, bufs, sizes, bool)"},
    {"_ZN8mooncake10RealClient28batch_put_from_multi_buffersERKSt6vectorINSt7__cxx1112basic_"
     "stringIcSt11char_traitsIcESaIcEEESaIS7_EERKS1_IS1_IPvSaISC_EESaISE_EERKS1_IS1_"
     "ImSaImEESaISK_EERKNS_15ReplicateConfigE",
     "RealClient::batch_put_from_multi_buffers(keys, bufs, sizes, ReplicateConfig)"},
    {"_ZN8mooncake10RealClient8put_fromERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPvm"
     "RKNS_15ReplicateConfigE",
     "RealClient::put_from(key, void*, size_t, ReplicateConfig)"},
    {"_ZN8mooncake10RealClient11upsert_fromERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
     "PvmRKNS_15ReplicateConfigE",
     "RealClient::upsert_from(key, void*, size_t, ReplicateConfig)"},
    {"_ZN8mooncake10RealClient6removeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb",
     "RealClient::remove(key, bool)"},
    {"_ZN3fLI17FLAGS_minloglevelE", "glog FLAGS_minloglevel"},
};

// Optional: batch_upsert_from_multi_buffers exists from 0.3.13 on.
using UpsertMulti = std::vector<int> (*)(RealClient *, const StrVec &, const PtrVecs &,
                                         const SizeVecs &, const ReplicateConfig &);
constexpr const char *kUpsertMulti =
    "_ZN8mooncake10RealClient31batch_upsert_from_multi_buffersERKSt6vectorINSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEESaIS7_EERKS1_IS1_IPvSaISC_EESaISE_EERKS1_IS1_ImSaImEESaISK_"
    "EERKNS_15ReplicateConfigE";
UpsertMulti g_upsert_multi = nullptr;

// Optional: get_into_ranges, in every supported wheel but with two signatures:
// 0.3.12 added a trailing `const QueryResultCache *` (nullptr: no cache).
using Ranges = std::vector<std::vector<std::vector<int64_t>>>;
using SizeNest = std::vector<SizeVecs>;
using IntoRanges5 = Ranges (*)(RealClient *, const PtrVec &, const std::vector<StrVec> &,
                               const SizeNest &, const SizeNest &, const SizeNest &);
using IntoRanges6 = Ranges (*)(RealClient *, const PtrVec &, const std::vector<StrVec> &,
                               const SizeNest &, const SizeNest &, const SizeNest &, const void *);
constexpr const char *kIntoRanges5 =
    "_ZN8mooncake10RealClient15get_into_rangesERKSt6vectorIPvSaIS2_EERKS1_IS1_INSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEESaISC_EESaISE_EERKS1_IS1_IS1_ImSaImEESaISK_EESaISM_EESQ_SQ_";
constexpr const char *kIntoRanges6 =
    "_ZN8mooncake10RealClient15get_into_rangesERKSt6vectorIPvSaIS2_EERKS1_IS1_INSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEESaISC_EESaISE_EERKS1_IS1_IS1_ImSaImEESaISK_EESaISM_EESQ_SQ_"
    "PKSt13unordered_mapISC_N2tl8expectedINS_11QueryResultENS_9ErrorCodeEEESt4hashISC_ESt8equal_"
    "toISC_ESaISt4pairIKSC_SW_EEE";
IntoRanges5 g_into_ranges5 = nullptr;
IntoRanges6 g_into_ranges6 = nullptr;
// Set once by load_mooncake: reads can go to another replica (replica_choice.hpp).
bool g_replica_choice = false;

// Optional: the session API (upstream PR #2881), from 0.3.13 on; all seven or none.
struct SessionSymbols {
    std::vector<int> (*put_start)(RealClient *, const StrVec &, const SizeVec &,
                                  const ReplicateConfig &);
    std::vector<int> (*put_ranges)(RealClient *, const StrVec &, const PtrVecs &, const SizeVecs &,
                                   const SizeVecs &);
    std::vector<int> (*put_end)(RealClient *, const StrVec &);
    std::vector<int> (*put_revoke)(RealClient *, const StrVec &);
    std::vector<int> (*get_start)(RealClient *, const StrVec &);
    std::vector<int> (*get_ranges)(RealClient *, const StrVec &, const PtrVecs &, const SizeVecs &,
                                   const SizeVecs &);
    int (*get_end)(RealClient *, const StrVec &);
};
#define MCS_KEYS_ARG "ERKSt6vectorINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESaIS7_EE"
#define MCS_RANGES_ARGS MCS_KEYS_ARG "RKS1_IS1_IPvSaISC_EESaISE_EERKS1_IS1_ImSaImEESaISK_EESO_"
constexpr const char *kSessionSymbols[] = {
    "_ZN8mooncake10RealClient23batch_put_session_start" MCS_KEYS_ARG
    "RKS1_ImSaImEERKNS_15ReplicateConfigE",
    "_ZN8mooncake10RealClient34batch_put_from_multi_buffer_ranges" MCS_RANGES_ARGS,
    "_ZN8mooncake10RealClient21batch_put_session_end" MCS_KEYS_ARG,
    "_ZN8mooncake10RealClient24batch_put_session_revoke" MCS_KEYS_ARG,
    "_ZN8mooncake10RealClient23batch_get_session_start" MCS_KEYS_ARG,
    "_ZN8mooncake10RealClient34batch_get_into_multi_buffer_ranges" MCS_RANGES_ARGS,
    "_ZN8mooncake10RealClient21batch_get_session_end" MCS_KEYS_ARG,
};
#undef MCS_RANGES_ARGS
#undef MCS_KEYS_ARG
static_assert(sizeof(kSessionSymbols) / sizeof(kSessionSymbols[0]) ==
                  sizeof(SessionSymbols) / sizeof(void *),
              "one name per session symbol");
SessionSymbols g_session{};
bool g_has_session = false;

void resolve_session(void *h) {
    void *ptrs[sizeof(kSessionSymbols) / sizeof(kSessionSymbols[0])];
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
        ptrs[i] = dlsym(h, kSessionSymbols[i]);
        if (!ptrs[i]) return;
    }
    std::memcpy(&g_session, ptrs, sizeof ptrs);
    g_has_session = true;
}

// Optional: replica descriptors (batch_get_replica_desc, one BatchQuery of the
// master), of RealClient and of DummyClient.  The shim knows nothing of
// Replica::Descriptor's layout (it changed with the wheels): a
// std::vector<Replica::Descriptor> is only moved bitwise here, as its three
// pointers, printed by store.so's own mooncake::to_stream (struct_json, the
// text Mooncake's verbose logs show) and destroyed by store.so's own
// destructor of a std::vector<std::vector<Replica::Descriptor>>.  The map the
// call returns is walked and freed as a std::map of the same key and a value of
// the same size and alignment (libstdc++'s node layout does not depend on it).
struct DescVec {
    void *begin, *end, *cap;
};
using DescMap = std::map<std::string, DescVec>;
using BatchReplicaDesc = DescMap (*)(RealClient *, const StrVec &);
struct ReplicaDescSymbols {
    void (*print)(std::ostream &, const DescVec &);
    void (*destroy_all)(DescVec *outer);  // ~vector<vector<Descriptor>>
};
constexpr const char *kBatchReplicaDesc =
    "_ZN8mooncake10RealClient22batch_get_replica_descERKSt6vectorINSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEESaIS7_EE";
constexpr const char *kDummyBatchReplicaDesc =
    "_ZN8mooncake11DummyClient22batch_get_replica_descERKSt6vectorINSt7__cxx1112basic_"
    "stringIcSt11char_traitsIcESaIcEEESaIS7_EE";
constexpr const char *kPrintDescriptors =
    "_ZN8mooncake9to_streamINS_7Replica10DescriptorEEEvRSoRKSt6vectorIT_SaIS5_EE";
constexpr const char *kDestroyDescriptorLists =
    "_ZNSt6vectorIS_IN8mooncake7Replica10DescriptorESaIS2_EESaIS4_EED1Ev";
BatchReplicaDesc g_batch_replica_desc = nullptr;
BatchReplicaDesc g_dummy_batch_replica_desc = nullptr;
ReplicaDescSymbols g_replica_desc{};

void resolve_replica_desc(void *h) {
    auto print = reinterpret_cast<decltype(g_replica_desc.print)>(dlsym(h, kPrintDescriptors));
    auto destroy =
        reinterpret_cast<decltype(g_replica_desc.destroy_all)>(dlsym(h, kDestroyDescriptorLists));
    if (!print || !destroy) return;  // nothing to print or free them with: none
    g_replica_desc = {print, destroy};
    g_batch_replica_desc = reinterpret_cast<BatchReplicaDesc>(dlsym(h, kBatchReplicaDesc));
    g_dummy_batch_replica_desc =
        reinterpret_cast<BatchReplicaDesc>(dlsym(h, kDummyBatchReplicaDesc));
}

// Key i's descriptors as store.so prints them ("" where the map has no entry
// for it); the map is emptied and every descriptor freed, whatever happens.
std::vector<std::string> print_replica_desc(DescMap &found, const StrVec &keys) {
    // Every list goes into one vector<vector<Descriptor>> that store.so destroys.
    const size_t n = found.size();
    DescVec outer{nullptr, nullptr, nullptr};
    if (n) {
        auto *lists = static_cast<DescVec *>(::operator new(n * sizeof(DescVec)));
        size_t i = 0;
        for (auto &entry : found) {
            lists[i++] = entry.second;
            entry.second = DescVec{nullptr, nullptr, nullptr};
        }
        outer = DescVec{lists, lists + n, lists + n};
    }
    struct Free {
        DescVec *outer;
        ~Free() {
            if (outer->begin) g_replica_desc.destroy_all(outer);
        }
    } free_lists{&outer};
    std::map<std::string, const DescVec *> by_key;
    size_t i = 0;
    for (auto &entry : found)
        by_key.emplace(entry.first, static_cast<DescVec *>(outer.begin) + i++);
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto &key : keys) {
        auto it = by_key.find(key);
        if (it == by_key.end()) {
            out.emplace_back();
            continue;
        }
        std::ostringstream os;
        g_replica_desc.print(os, *it->second);
        out.push_back(os.str());
        if (out.back().empty()) out.back() = "[]";
    }
    return out;
}

// Flattened parts (key i: [first[i], first[i+1])) as Mooncake's nested vectors.
void nest(const PtrVec &bufs, const SizeVec &sizes, const SizeVec &first, PtrVecs &all_bufs,
          SizeVecs &all_sizes) {
    const size_t n = first.size() - 1;
    all_bufs.resize(n);
    all_sizes.resize(n);
    for (size_t i = 0; i < n; i++) {
        all_bufs[i].assign(bufs.begin() + long(first[i]), bufs.begin() + long(first[i + 1]));
        all_sizes[i].assign(sizes.begin() + long(first[i]), sizes.begin() + long(first[i + 1]));
    }
}
static_assert(sizeof(kSymbols) / sizeof(kSymbols[0]) == sizeof(Symbols) / sizeof(void *),
              "one name per symbol");

// A write that fails in its transfer is revoked at the master; when the master has
// already dropped the object (its segment unmounted while the bytes were in flight)
// the revoke answers OBJECT_NOT_FOUND and Mooncake reports that instead of the
// transfer's failure.  "Key not found" is not an answer a writer can act on: the
// write failed on its way and another try may land, so it is a TRANSFER_FAIL.
constexpr int kTransferFail = -800;
std::vector<int> write_results(std::vector<int> results) {
    for (int &r : results)
        if (r == kObjectNotFound) r = kTransferFail;
    return results;
}

// ---------------------------------------------------------------------------

std::mutex g_load_mu;
std::atomic<bool> g_loaded{false};
Symbols g_sym{};
int g_log_level = 3;
// Set once by load_mooncake, before g_loaded.
Layout g_layout = Layout::kUnknown;
std::string g_version;

// Whether the bytes of the file at `path` carry `layout`'s field names.
bool image_matches(const char *path, Layout layout, std::string &why) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        why = std::string("cannot read it: ") + strerror(errno);
        return false;
    }
    struct stat st {};
    bool ok = false;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
        void *map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            ok = layout_matches_image(layout, static_cast<const char *>(map), size_t(st.st_size),
                                      why);
            ::munmap(map, size_t(st.st_size));
        } else {
            why = std::string("cannot map it: ") + strerror(errno);
        }
    } else {
        why = "cannot stat it or it is empty";
    }
    ::close(fd);
    return ok;
}

// The wheel's calls of one client class: RealClient's, or DummyClient's (a
// client of a standalone client service).
struct ClientCalls {
    const Symbols *sym;
    UpsertMulti upsert_multi;
    IntoRanges5 into_ranges5;
    IntoRanges6 into_ranges6;
    bool session;  // RealClient's session API
    bool dummy;    // DummyClient: its reads are the service's (no replica failover here)
    const char *name;
    BatchReplicaDesc replica_desc;  // null: the wheel lacks it (or a way to print it)
};

class MooncakeBackend final : public Backend {
public:
    // pool_key: where the client goes when closed (ha_pool.hpp), "" to tear it down.
    MooncakeBackend(std::shared_ptr<RealClient> client, bool ha, bool segment,
                    const ClientCalls &calls, std::string pool_key = {})
        : client_(std::move(client)),
          ha_(ha),
          segment_(segment),
          pool_key_(std::move(pool_key)),
          sym_(calls.sym),
          calls_(calls) {
        if (calls.dummy) replica_failover_ = false;
    }
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
        if (keys.size() == 1) return {sym_->is_exist(client_.get(), keys[0])};
        return sym_->batch_exists(client_.get(), keys);
    }
    std::vector<int64_t> get_into(const StrVec &keys, const PtrVec &bufs,
                                  const SizeVec &sizes) override {
        std::vector<int64_t> r;
        ChoiceRecorder rec;
        if (keys.size() == 1 && single_get_ && !any_suspects())
            r = {sym_->get_into(client_.get(), keys[0], bufs[0], sizes[0])};
        else
            r = sym_->batch_get(client_.get(), keys, bufs, sizes);
        // One key: the endpoint chosen is that key's (of a batch, not known per key).
        if (keys.size() == 1 && r.size() == 1 && r[0] == kTransferFail) mark_suspect(rec.endpoint);
        if (!rec.alternatives) return r;  // no key read here had a replica to go on to
        for (size_t i = 0; i < r.size() && i < keys.size(); i++)
            if (r[i] == kTransferFail) r[i] = reread(keys[i], bufs[i], sizes[i]);
        return r;
    }
    // A read whose transfer failed, tried again through Mooncake's batch read
    // (whose replica choice comes to replica_choice.cpp): the endpoint that
    // failed it is marked suspect and the next try takes another replica, up
    // to 3 tries, and only while the key has a replica on another endpoint (a
    // key's only replica is not read again: each try would wait out Mooncake's
    // transfer timeout once more).  Without the interposition, the read's code
    // as it was.
    int64_t reread(const std::string &key, void *buf, size_t size) {
        if (!replica_failover_) return kTransferFail;
        int64_t r = kTransferFail;
        bool moved = false;
        for (int attempt = 0; attempt < 3 && r == kTransferFail; attempt++) {
            ChoiceRecorder rec;
            r = sym_->batch_get(client_.get(), StrVec{key}, PtrVec{buf}, SizeVec{size}).at(0);
            moved = moved || rec.moved;
            if (r == kTransferFail) {
                if (rec.endpoint.empty()) break;  // not chosen here: nothing to avoid
                mark_suspect(rec.endpoint);
                if (!rec.alternatives) break;  // its only replica: another try fails alike
            }
        }
        count_retry(r >= 0 && moved);
        return r;
    }
    // Mooncake sizes and reads each value into its client's local buffer in
    // one round trip (a batch query, then the transfers).  A null handle
    // means it did not: missing, not ready, the local buffer full, or a
    // failed transfer -- Mooncake does not say which, so it is "unread".
    HeldValues get_buffers(const StrVec &keys) override {
        auto handles = std::make_shared<std::vector<HandlePtr>>();
        if (keys.size() == 1) {
            // A replica chosen and no value: its transfer failed (or the local
            // buffer had no room): later reads prefer another replica.
            ChoiceRecorder rec;
            handles->push_back(sym_->get_buffer(client_.get(), keys[0]));
            if (!handles->back()) mark_suspect(rec.endpoint);
        } else {
            *handles = sym_->batch_get_buffer(client_.get(), keys);
        }
        HeldValues out;
        const size_t n = handles->size();
        out.values.resize(n, nullptr);
        out.sizes.resize(n, MCS_GET_UNREAD);
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            const BufferHandle *h = (*handles)[i].get();
            if (!h) continue;
            out.values[i] = sym_->handle_ptr(h);
            out.sizes[i] = int64_t(sym_->handle_size(h));
            any = true;
        }
        if (any) out.hold = std::move(handles);
        return out;
    }
    void check_replica(const ReplicaOptions &opts) override {
        check_replica_supported(g_layout, g_version, opts);
    }
    std::vector<int> put_from(const StrVec &keys, const PtrVec &bufs, const SizeVec &sizes,
                              const ReplicaOptions &opts, const StrVec *group_ids,
                              bool upsert) override {
        std::vector<int> out;
        with_replicate_config(g_layout, opts, group_ids, [&](const void *config) {
            auto &cfg = *static_cast<const ReplicateConfig *>(config);
            if (keys.size() == 1)  // Mooncake's single-key call: one RPC, no batch machinery
                out = {upsert ? sym_->upsert_one(client_.get(), keys[0], bufs[0], sizes[0], cfg)
                              : sym_->put_one(client_.get(), keys[0], bufs[0], sizes[0], cfg)};
            else
                out = upsert ? sym_->batch_upsert(client_.get(), keys, bufs, sizes, cfg)
                             : sym_->batch_put(client_.get(), keys, bufs, sizes, cfg);
        });
        return write_results(std::move(out));
    }
    std::vector<int64_t> get_into_parts(const StrVec &keys, const PtrVec &bufs,
                                        const SizeVec &sizes, const SizeVec &first) override {
        PtrVecs all_bufs;
        SizeVecs all_sizes;
        nest(bufs, sizes, first, all_bufs, all_sizes);
        std::vector<int> r = sym_->batch_get_multi(client_.get(), keys, all_bufs, all_sizes, false);
        return std::vector<int64_t>(r.begin(), r.end());
    }
    std::vector<int> put_from_parts(const StrVec &keys, const PtrVec &bufs, const SizeVec &sizes,
                                    const SizeVec &first, const ReplicaOptions &opts,
                                    const StrVec *group_ids, bool upsert) override {
        PtrVecs all_bufs;
        SizeVecs all_sizes;
        nest(bufs, sizes, first, all_bufs, all_sizes);
        std::vector<int> out;
        with_replicate_config(g_layout, opts, group_ids, [&](const void *config) {
            auto &cfg = *static_cast<const ReplicateConfig *>(config);
            out = upsert ? calls_.upsert_multi(client_.get(), keys, all_bufs, all_sizes, cfg)
                         : sym_->batch_put_multi(client_.get(), keys, all_bufs, all_sizes, cfg);
        });
        return write_results(std::move(out));
    }
    void check_parts(int op) override {
        if (op == MCS_OP_UPSERT && !calls_.upsert_multi)
            throw Error(MCS_E_UNSUPPORTED,
                        "upsert of multi-part values needs Mooncake 0.3.13 or later (the loaded "
                        "wheel, " +
                            g_version + ", has no batch_upsert_from_multi_buffers)");
    }
    int64_t exists_one(const std::string &key) override {
        return sym_->is_exist(client_.get(), key);
    }
    int64_t get_one(const std::string &key, void *buf, size_t size) override {
        if (!single_get_ || any_suspects()) return get_into(StrVec{key}, {buf}, {size}).at(0);
        ChoiceRecorder rec;
        int64_t r = sym_->get_into(client_.get(), key, buf, size);
        if (r != kTransferFail) return r;
        mark_suspect(rec.endpoint);
        return rec.alternatives ? reread(key, buf, size) : r;
    }
    int64_t remove_one(const std::string &key, bool force) override {
        return sym_->remove_one(client_.get(), key, force);
    }
    int64_t put_one(const std::string &key, void *buf, size_t size, const ReplicaOptions &opts,
                    bool upsert) override {
        int r = MCS_E_INTERNAL;
        with_replicate_config(g_layout, opts, nullptr, [&](const void *config) {
            auto &cfg = *static_cast<const ReplicateConfig *>(config);
            r = upsert ? sym_->upsert_one(client_.get(), key, buf, size, cfg)
                       : sym_->put_one(client_.get(), key, buf, size, cfg);
        });
        return r == kObjectNotFound ? kTransferFail : r;
    }
    std::vector<int> remove(const StrVec &keys, bool force) override {
        if (keys.size() == 1) return {sym_->remove_one(client_.get(), keys[0], force)};
        return sym_->batch_remove(client_.get(), keys, force);
    }
    int64_t remove_all(bool force) override { return sym_->remove_all(client_.get(), force); }
    int64_t remove_by_regex(const std::string &pattern, bool force) override {
        return sym_->remove_by_regex(client_.get(), pattern, force);
    }
    int health_check() override { return sym_->health_check(client_.get()); }
    int64_t size(const std::string &key) override { return sym_->get_size(client_.get(), key); }
    int register_buffer(void *ptr, size_t size) override {
        int rc = sym_->register_buffer(client_.get(), ptr, size);
        if (rc == 0 && !pool_key_.empty()) {
            std::lock_guard<std::mutex> lk(regs_mu_);
            regs_.push_back(ptr);
        }
        return rc;
    }
    int unregister_buffer(void *ptr) override {
        int rc = sym_->unregister_buffer(client_.get(), ptr);
        if (rc == 0 && !pool_key_.empty()) {
            std::lock_guard<std::mutex> lk(regs_mu_);
            auto it = std::find(regs_.begin(), regs_.end(), ptr);
            if (it != regs_.end()) regs_.erase(it);
        }
        return rc;
    }
    Ranges get_into_ranges(const PtrVec &bufs, const std::vector<StrVec> &keys, const SizeNest &dst,
                           const SizeNest &src, const SizeNest &sizes) override {
        if (calls_.into_ranges6)
            return calls_.into_ranges6(client_.get(), bufs, keys, dst, src, sizes, nullptr);
        if (calls_.into_ranges5)
            return calls_.into_ranges5(client_.get(), bufs, keys, dst, src, sizes);
        throw Error(MCS_E_UNSUPPORTED, "the loaded Mooncake wheel (" + g_version + ") has no " +
                                           calls_.name + "::get_into_ranges");
    }
    std::vector<std::string> replica_desc(const StrVec &keys) override {
        if (!calls_.replica_desc)
            throw Error(MCS_E_UNSUPPORTED, "the loaded Mooncake wheel (" + g_version + ") has no " +
                                               calls_.name + "::batch_get_replica_desc");
        DescMap found = calls_.replica_desc(client_.get(), keys);
        return print_replica_desc(found, keys);
    }
    std::vector<int> session(const SessionCall &s) override {
        if (!calls_.session)
            throw Error(MCS_E_UNSUPPORTED, "the loaded Mooncake wheel (" + g_version +
                                               ") has no session API (batch_put_session_start "
                                               "and the rest come with Mooncake 0.3.13)");
        RealClient *rc = client_.get();
        switch (s.op) {
            case MCS_SESSION_PUT_START: {
                std::vector<int> out;
                const StrVec *groups = s.replica.has_group_ids ? &s.replica.group_ids : nullptr;
                with_replicate_config(g_layout, s.replica, groups, [&](const void *config) {
                    out = g_session.put_start(rc, s.keys, s.sizes,
                                              *static_cast<const ReplicateConfig *>(config));
                });
                return out;
            }
            case MCS_SESSION_PUT_RANGES:
                return g_session.put_ranges(rc, s.keys, s.bufs, s.range_sizes, s.offsets);
            case MCS_SESSION_PUT_END: return g_session.put_end(rc, s.keys);
            case MCS_SESSION_PUT_REVOKE: return g_session.put_revoke(rc, s.keys);
            case MCS_SESSION_GET_START: return g_session.get_start(rc, s.keys);
            case MCS_SESSION_GET_RANGES:
                return g_session.get_ranges(rc, s.keys, s.bufs, s.range_sizes, s.offsets);
            default: return {g_session.get_end(rc, s.keys)};
        }
    }
    void skip_teardown() override {
        torn_down_ = true;
        leak_ = true;
    }
    std::string hostname() override { return sym_->get_hostname(client_.get()); }
    void teardown() override {
        if (client_ && !torn_down_) {
            torn_down_ = true;
            if (!pool_key_.empty()) {
                // Kept for the next client of this configuration, with nothing of
                // this one's registered (the memory may be freed after close).
                std::lock_guard<std::mutex> lk(regs_mu_);
                for (void *ptr : regs_) sym_->unregister_buffer(client_.get(), ptr);
                regs_.clear();
                if (keep(pool_key_, client_)) {
                    client_.reset();
                    return;
                }
            }
            sym_->teardown(client_.get());
        }
    }
    // An HA client's tearDownAll joins its leader monitor, which waits up to
    // 30 s for a view change that is not coming (EtcdLeaderCoordinator::
    // WaitForViewChange): close() leaves that to the background after 1 s.
    // Any other client's teardown (0.3-1 s) is waited for, and so is an HA
    // client's that is kept for reuse (no teardown: ha_pool.hpp).
    std::chrono::milliseconds teardown_wait() const override {
        return std::chrono::milliseconds(ha_ && pool_key_.empty() ? kHaTeardownWaitMs : -1);
    }
    // Mooncake unmounts the client's segment only at the end of its teardown:
    // a process leaving earlier would leave the master a segment without memory.
    bool teardown_before_exit() const override { return segment_; }

private:
    static constexpr int kHaTeardownWaitMs = 1000;
    std::shared_ptr<RealClient> client_;
    bool ha_;
    bool segment_;  // contributes memory (global_segment_size is not 0)
    bool torn_down_ = false;
    bool leak_ = false;
    std::string pool_key_;  // kept in the pool at close when not empty (an HA client, no segment)
    std::mutex regs_mu_;
    std::vector<void *> regs_;  // registered through this backend (unregistered before keeping)
    bool single_get_ = std::getenv("MCS_BATCH_GET_ONLY") == nullptr;
    bool replica_failover_ = g_replica_choice;
    const Symbols *sym_;
    ClientCalls calls_;
};

// ---------------------------------------------------------------------------
// A client of a standalone client service (Mooncake's mooncake_client /
// real_client_main): Mooncake's DummyClient, which forwards every call over
// RPC to that process and shares memory with it through memfd segments of
// the process-wide ShmHelper (sent over the service's IPC socket
// @mooncake_client_<port>.sock).  Optional: all of these symbols, or none.

// DummyClient has no factory in store.so (the binding inlines make_shared),
// so the shim constructs one in memory of its own with the exported complete-
// object constructor and destroys it with the complete-object destructor.
// sizeof(DummyClient) is 608 bytes in 0.3.13.post1 (the binding allocates
// 0x270 bytes for it and make_shared's 16-byte control block); the room given
// is 100 times that, so a later layout that grows stays inside it.
constexpr size_t kDummyRoom = 64 << 10;
constexpr size_t kDummyAlign = 64;

struct DummySymbols {
    void (*construct)(void *);
    void (*destroy)(void *);
    int (*setup_dummy)(void *, size_t, size_t, const std::string &, const std::string &);
    void *(*shm_instance)();
    void *(*shm_allocate)(void *, size_t);
    int (*shm_free)(void *, void *);
};
#define MCS_STR_ARG "RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
constexpr const char *kDummySymbols[] = {
    "_ZN8mooncake11DummyClientC1Ev",
    "_ZN8mooncake11DummyClientD1Ev",
    "_ZN8mooncake11DummyClient11setup_dummyEmm" MCS_STR_ARG "S8_",
    "_ZN8mooncake9ShmHelper11getInstanceEv",
    "_ZN8mooncake9ShmHelper8allocateEm",
    "_ZN8mooncake9ShmHelper4freeEPv",
};
#undef MCS_STR_ARG
static_assert(sizeof(kDummySymbols) / sizeof(kDummySymbols[0]) ==
                  sizeof(DummySymbols) / sizeof(void *),
              "one name per dummy symbol");
DummySymbols g_dsym{};
Symbols g_dummy{};  // DummyClient's members of the same signatures as RealClient's
UpsertMulti g_dummy_upsert_multi = nullptr;
IntoRanges6 g_dummy_into_ranges6 = nullptr;
bool g_has_dummy = false;

// RealClient's member name -> DummyClient's (same arguments: the class name is
// one component either way, so the mangled substitutions do not move).
std::string as_dummy(const char *mangled) {
    std::string m = mangled;
    const std::string from = "10RealClient", to = "11DummyClient";
    auto at = m.find(from);
    return at == std::string::npos ? std::string() : m.replace(at, from.size(), to);
}

void resolve_dummy(void *h, const void *const *real) {
    void *ptrs[sizeof(kSymbols) / sizeof(kSymbols[0])];
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
        const std::string name = as_dummy(kSymbols[i].mangled);
        if (name.empty()) {  // not a member: BufferHandle's, glog's flag
            ptrs[i] = const_cast<void *>(real[i]);
            continue;
        }
        // RealClient::create and setup_internal have no DummyClient twin: unused.
        ptrs[i] = dlsym(h, name.c_str());
        if (!ptrs[i] && name.find("6create") == std::string::npos &&
            name.find("setup_internal") == std::string::npos)
            return;
    }
    void *extra[sizeof(kDummySymbols) / sizeof(kDummySymbols[0])];
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
        extra[i] = dlsym(h, kDummySymbols[i]);
        if (!extra[i]) return;
    }
    std::memcpy(&g_dummy, ptrs, sizeof ptrs);
    std::memcpy(&g_dsym, extra, sizeof extra);
    g_dummy_upsert_multi = reinterpret_cast<UpsertMulti>(dlsym(h, as_dummy(kUpsertMulti).c_str()));
    g_dummy_into_ranges6 = reinterpret_cast<IntoRanges6>(dlsym(h, as_dummy(kIntoRanges6).c_str()));
    g_has_dummy = true;
}

}  // namespace

int load_mooncake(const char *path, const char *version, std::string &msg) {
    std::lock_guard<std::mutex> lk(g_load_mu);
    if (g_loaded.load()) return MCS_OK;
    if (!path || !*path) {
        msg = "path to Mooncake's store.so is NULL or empty";
        return MCS_E_INVALID_ARG;
    }
    const std::string ver = version ? version : "";
    const Layout layout = layout_for_version(ver);
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
    std::string why;
    if (layout != Layout::kUnknown && !image_matches(path, layout, why)) {
        msg = std::string(path) + " does not look like Mooncake " + ver +
              ": the field names of its ReplicateConfig do not match the " + layout_name(layout) +
              " layout (" + why + "); pass the version of the wheel it came from";
        return MCS_E_LOAD;
    }
    static_assert(sizeof(Symbols) == sizeof(ptrs), "layout");
    std::memcpy(&g_sym, ptrs, sizeof ptrs);
    g_layout = layout;
    g_version = ver;
    resolve_legacy_setup(h);                                                 // optional
    g_upsert_multi = reinterpret_cast<UpsertMulti>(dlsym(h, kUpsertMulti));  // optional
    g_into_ranges5 = reinterpret_cast<IntoRanges5>(dlsym(h, kIntoRanges5));  // optional
    g_into_ranges6 = reinterpret_cast<IntoRanges6>(dlsym(h, kIntoRanges6));  // optional
    resolve_session(h);                                                      // optional
    resolve_replica_desc(h);                                                 // optional
    resolve_dummy(h, ptrs);                                                  // optional
    g_replica_choice = replica_choice_init(h);                               // optional
    *g_sym.minloglevel = g_log_level;
    g_loaded.store(true);
    return MCS_OK;
}

Layout loaded_layout() {
    return g_loaded.load() ? g_layout : Layout::kUnknown;
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
    commit_process_wide(cfg);
    // An HA client without a segment: a Mooncake client kept from a closed one
    // of the same configuration serves it (ha_pool.hpp), else a new one will
    // be kept when it closes.
    const bool ha = config_or(cfg, "master_server_addr", "").find("://") != std::string::npos;
    const ClientCalls calls{&g_sym,        g_upsert_multi, g_into_ranges5, g_into_ranges6,
                            g_has_session, false,          "RealClient",   g_batch_replica_desc};
    std::string key = ha && wants_no_segment(cfg) ? pool_key(cfg) : std::string();
    if (!key.empty())
        if (std::shared_ptr<RealClient> kept = take_kept(key))
            return std::make_unique<MooncakeBackend>(std::move(kept), true, false, calls,
                                                     std::move(key));
    const long free_before = free_fds();
    std::shared_ptr<RealClient> client = g_sym.create();
    if (!client) throw Error(MCS_E_INTERNAL, "RealClient::create() returned null");
    guard_forked_exits();  // after Mooncake registered its atexit teardown, so before it
    ExpectedVoid r = has_legacy_setup() && wants_no_segment(cfg)
                         ? legacy_setup_without_segment(client.get(), cfg)
                         : g_sym.setup(client.get(), cfg);
    *g_sym.minloglevel = g_log_level;
    if (!r.has_value) {
        int code = r.error ? r.error : -1;
        std::string fds = setup_fd_note(free_before);  // Mooncake says INTERNAL_ERROR
        g_sym.teardown(client.get());
        throw Error(code,
                    "Mooncake setup failed: " + describe(code) + (fds.empty() ? "" : "; ") + fds);
    }
    return std::make_unique<MooncakeBackend>(std::move(client), ha, !wants_no_segment(cfg), calls,
                                             std::move(key));
}

std::unique_ptr<Backend> make_dummy_backend(size_t mem_pool_size, size_t local_buffer_size,
                                            const std::string &server_address,
                                            int probe_timeout_ms) {
    if (!g_loaded.load())
        throw Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
    if (!g_has_dummy)
        throw Error(MCS_E_UNSUPPORTED, "the loaded Mooncake wheel (" + g_version +
                                           ") has no DummyClient (a client of a standalone "
                                           "client service)");
    const int port = prepare_client_service(server_address, probe_timeout_ms);
    *g_sym.minloglevel = g_log_level;
    void *room = std::aligned_alloc(kDummyAlign, kDummyRoom);
    if (!room) throw Error(MCS_E_NOMEM, "no memory for a DummyClient");
    std::memset(room, 0, kDummyRoom);
    try {
        g_dsym.construct(room);
    } catch (...) {
        std::free(room);
        throw;
    }
    // The opaque RealClient type stands for the DummyClient here: the shim
    // never looks inside either, it only passes the address to the wheel's
    // DummyClient members (g_dummy).
    std::shared_ptr<RealClient> client(static_cast<RealClient *>(room), [](RealClient *p) {
        g_dsym.destroy(p);
        std::free(p);
    });
    // Mooncake's binding names the service's IPC socket after its RPC port.
    const std::string ipc = "@mooncake_client_" + std::to_string(port) + ".sock";
    const int rc =
        g_dsym.setup_dummy(client.get(), mem_pool_size, local_buffer_size, server_address, ipc);
    *g_sym.minloglevel = g_log_level;
    if (rc != 0)
        throw Error(MCS_E_UNREACHABLE, "Mooncake's DummyClient::setup_dummy failed (" +
                                           std::to_string(rc) + ") against the client service " +
                                           server_address + " (IPC socket " + ipc +
                                           "): is it Mooncake's mooncake_client, and running?");
    const ClientCalls calls{
        &g_dummy,      g_dummy_upsert_multi,      nullptr, g_dummy_into_ranges6, false, true,
        "DummyClient", g_dummy_batch_replica_desc};
    return std::make_unique<MooncakeBackend>(std::move(client), false, false, calls);
}

void *shm_alloc(size_t size) {
    if (!g_loaded.load())
        throw Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
    if (!g_has_dummy)
        throw Error(MCS_E_UNSUPPORTED,
                    "the loaded Mooncake wheel (" + g_version + ") has no ShmHelper");
    if (size == 0) throw Error(MCS_E_INVALID_ARG, "size is 0");
    void *p = nullptr;
    try {
        p = g_dsym.shm_allocate(g_dsym.shm_instance(), size);
    } catch (const std::exception &e) {
        throw Error(MCS_E_NOMEM, std::string("ShmHelper::allocate(") + std::to_string(size) +
                                     ") failed: " + e.what());
    }
    if (!p) throw Error(MCS_E_NOMEM, "ShmHelper::allocate(" + std::to_string(size) + ") failed");
    return p;
}

bool shm_free(void *ptr) {
    if (!g_loaded.load())
        throw Error(MCS_E_NOT_LOADED, "Mooncake is not loaded: call mcs_load() first");
    if (!g_has_dummy)
        throw Error(MCS_E_UNSUPPORTED,
                    "the loaded Mooncake wheel (" + g_version + ") has no ShmHelper");
    return g_dsym.shm_free(g_dsym.shm_instance(), ptr) == 0;
}

}  // namespace mcs
