// The replica a read takes (replica_choice.hpp).
#include "replica_choice.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace mcs {
namespace {

// mooncake::SelectBestReplica(const std::vector<Replica::Descriptor>&,
//                             const std::unordered_set<std::string>&)
#define MCS_SELECT_BEST                                                                            \
    "_ZN8mooncake17SelectBestReplicaERKSt6vectorINS_7Replica10DescriptorESaIS2_EERKSt13unordered_" \
    "setINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4hashISD_ESt8equal_toISD_ESaISD_EE"
constexpr const char *kFindFirst =
    "_ZN8mooncake6Client24FindFirstCompleteReplicaERKSt6vectorINS_7Replica10DescriptorESaIS3_"
    "EERS3_";

// Replica::Descriptor in 0.3.13.post1 (checked in replica_choice_init against the
// machine code of FindFirstCompleteReplica: its stride and status offset):
// {uint64 id; variant<MemoryDescriptor, ...> (MemoryDescriptor = {uint64 size_;
// uintptr buffer_address_; string protocol_; string transport_endpoint_}, index
// byte at 0x58); ReplicaStatus status (COMPLETE = 3) at 0x60}, 0x68 bytes.
constexpr size_t kDescSize = 0x68;
constexpr size_t kStatus = 0x60;
constexpr size_t kIndex = 0x58;
constexpr size_t kProtocol = 0x18;
constexpr size_t kEndpoint = 0x38;
constexpr int32_t kComplete = 3;

struct RawVec {
    const char *begin, *end, *cap;
};
using SelectFn = const char *(*)(const RawVec *, const void *);

std::atomic<SelectFn> g_orig{nullptr};
std::atomic<bool> g_enabled{false};
std::atomic<bool> g_seen{false};
std::atomic<uint64_t> g_choices{0}, g_fallbacks{0}, g_suspects_marked{0}, g_retries{0},
    g_recovered{0};

using Clock = std::chrono::steady_clock;
constexpr auto kSuspectFor = std::chrono::seconds(30);
std::mutex g_mu;
std::unordered_map<std::string, Clock::time_point> *g_suspects =
    new std::unordered_map<std::string, Clock::time_point>();  // leaked: used at exit
std::atomic<int> g_n_suspects{0};

thread_local ChoiceRecorder *t_recorder = nullptr;

// A libstdc++ std::string at p, plausibly: its data pointer is set, and a short
// one keeps its bytes inside the object.
const std::string *as_string(const char *p) {
    const char *data = *reinterpret_cast<const char *const *>(p);
    const size_t size = *reinterpret_cast<const size_t *>(p + 8);
    if (!data || size > 4096 || (size < 16 && data != p + 16)) return nullptr;
    return reinterpret_cast<const std::string *>(p);
}

// The endpoint of a complete memory replica, or null.
const std::string *endpoint_of(const char *d) {
    if (*reinterpret_cast<const int32_t *>(d + kStatus) != kComplete) return nullptr;
    if (static_cast<unsigned char>(d[kIndex]) != 0) return nullptr;  // not MemoryDescriptor
    if (!as_string(d + kProtocol)) return nullptr;
    return as_string(d + kEndpoint);
}

bool suspect(const std::string &ep, Clock::time_point now) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_suspects->find(ep);
    if (it == g_suspects->end()) return false;
    if (it->second > now) return true;
    g_suspects->erase(it);
    g_n_suspects.fetch_sub(1);
    return false;
}

// Mooncake's own SelectBestReplica, wherever it was loaded from: the first
// loaded object other than the shim that defines it.
SelectFn find_original();

}  // namespace

}  // namespace mcs

// The interposer: store.so's calls to mooncake::SelectBestReplica land here.
extern "C" __attribute__((visibility("default"))) const char *mcs_interposed_select_best(
    const mcs::RawVec *list, const void *local) __asm__(MCS_SELECT_BEST);

extern "C" const char *mcs_interposed_select_best(const mcs::RawVec *list, const void *local) {
    using namespace mcs;
    SelectFn orig = g_orig.load();
    if (!orig) {
        orig = find_original();
        if (!orig) return nullptr;  // cannot happen: store.so called us
        g_orig.store(orig);
    }
    g_seen.store(true, std::memory_order_relaxed);
    const char *pick = orig(list, local);
    ChoiceRecorder *rec = t_recorder;
    if (!g_enabled.load(std::memory_order_relaxed) || !pick || (!rec && g_n_suspects.load() == 0))
        return pick;
    g_choices.fetch_add(1, std::memory_order_relaxed);
    const std::string *ep = endpoint_of(pick);
    if (ep && g_n_suspects.load() > 0) {
        const auto now = Clock::now();
        if (suspect(*ep, now)) {
            const size_t n = size_t(list->end - list->begin) / kDescSize;
            for (size_t i = 0; i < n; i++) {
                const char *d = list->begin + i * kDescSize;
                const std::string *e = d == pick ? nullptr : endpoint_of(d);
                if (e && !suspect(*e, now)) {
                    pick = d;
                    ep = e;
                    g_fallbacks.fetch_add(1, std::memory_order_relaxed);
                    if (rec) rec->moved = true;
                    break;
                }
            }
        }
    }
    if (rec) rec->endpoint = ep ? *ep : std::string();
    return pick;
}

namespace mcs {
namespace {

SelectFn find_original() {
    struct Found {
        SelectFn fn = nullptr;
    } found;
    dl_iterate_phdr(
        [](dl_phdr_info *info, size_t, void *data) -> int {
            auto *f = static_cast<Found *>(data);
            if (!info->dlpi_name || !*info->dlpi_name) return 0;
            void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
            if (!h) return 0;
            void *s = dlsym(h, MCS_SELECT_BEST);
            dlclose(h);
            if (s && s != reinterpret_cast<void *>(&mcs_interposed_select_best)) {
                f->fn = reinterpret_cast<SelectFn>(s);
                return 1;
            }
            return 0;
        },
        &found);
    return found.fn;
}

// Whether `code` (FindFirstCompleteReplica's first bytes) walks descriptors of
// kDescSize bytes and tests their status at kStatus: `add $0x68,%rbx` and
// `cmpl $0x3,0x60(%rbx)`.
bool layout_checks(const unsigned char *code) {
    static const unsigned char stride[] = {0x48, 0x83, 0xc3, 0x68};
    static const unsigned char status[] = {0x83, 0x7b, 0x60, 0x03};
    bool a = false, b = false;
    for (size_t i = 0; i + 4 <= 0x80; i++) {
        a = a || std::memcmp(code + i, stride, 4) == 0;
        b = b || std::memcmp(code + i, status, 4) == 0;
    }
    return a && b;
}

}  // namespace

bool replica_choice_init(void *store_handle) {
    auto *orig = reinterpret_cast<SelectFn>(dlsym(store_handle, MCS_SELECT_BEST));
    auto *find_first = static_cast<const unsigned char *>(dlsym(store_handle, kFindFirst));
    if (!orig || !find_first || !layout_checks(find_first)) return false;
    g_orig.store(orig);
    g_enabled.store(true);
    return true;
}

bool any_suspects() {
    return g_n_suspects.load(std::memory_order_relaxed) > 0;
}

bool replica_choice_seen() {
    return g_seen.load();
}

void mark_suspect(const std::string &endpoint) {
    if (endpoint.empty()) return;
    std::lock_guard<std::mutex> lk(g_mu);
    auto [it, added] = g_suspects->emplace(endpoint, Clock::now() + kSuspectFor);
    if (added)
        g_n_suspects.fetch_add(1);
    else
        it->second = Clock::now() + kSuspectFor;
    g_suspects_marked.fetch_add(1);
}

ChoiceRecorder::ChoiceRecorder() : outer(t_recorder) {
    t_recorder = this;
}

ChoiceRecorder::~ChoiceRecorder() {
    t_recorder = outer;
}

ReplicaChoiceCounters replica_choice_counters() {
    return {g_enabled.load(), g_seen.load(),      uint32_t(std::max(0, g_n_suspects.load())),
            g_choices.load(), g_fallbacks.load(), g_suspects_marked.load(),
            g_retries.load(), g_recovered.load()};
}

void count_retry(bool recovered) {
    g_retries.fetch_add(1);
    if (recovered) g_recovered.fetch_add(1);
}

}  // namespace mcs
