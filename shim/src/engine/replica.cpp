// Replica options and the ReplicateConfig layouts of Mooncake's wheels (see
// replica.hpp).
#include "replica.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>

namespace mcs {
namespace {

// ---- Mooncake's ReplicateConfig, one struct per layout ---------------------
// Member for member as in mooncake-store/include/replica.h of the wheels named;
// default member initialisers as there.  Never reorder, never add.

// 0.3.10.post2
struct RC0310 {
    size_t replica_num{1};
    bool with_soft_pin{false};
    bool with_hard_pin{false};
    std::vector<std::string> preferred_segments{};
    std::string preferred_segment{};
    bool prefer_alloc_in_same_node{false};
};

// 0.3.11, 0.3.11.post1: NoF replicas and an ObjectDataType (uint8_t enum).
struct RC0311 {
    size_t replica_num{1};
    size_t nof_replica_num{0};
    bool with_soft_pin{false};
    bool with_hard_pin{false};
    std::vector<std::string> preferred_segments{};
    std::string preferred_segment{};
    std::vector<std::string> preferred_nof_segments{};
    bool prefer_alloc_in_same_node{false};
    uint8_t data_type{0};
};

// 0.3.12, 0.3.12.post1: host_id and per-key group ids.
struct RC0312 {
    size_t replica_num{1};
    size_t nof_replica_num{0};
    bool with_soft_pin{false};
    bool with_hard_pin{false};
    std::vector<std::string> preferred_segments{};
    std::string preferred_segment{};
    std::vector<std::string> preferred_nof_segments{};
    bool prefer_alloc_in_same_node{false};
    uint8_t data_type{0};
    std::string host_id{};
    std::optional<std::vector<std::string>> group_ids{};
};

// 0.3.13, 0.3.13.post1: DFS replicas; a SoftPinAction (uint8_t enum) and an
// optional TTL replace with_soft_pin.
struct RC0313 {
    size_t replica_num{1};
    size_t nof_replica_num{0};
    size_t dfs_replica_num{0};
    uint8_t soft_pin_action{0};
    std::optional<uint64_t> soft_pin_ttl_ms{};
    bool with_hard_pin{false};
    std::vector<std::string> preferred_segments{};
    std::string preferred_segment{};
    std::vector<std::string> preferred_nof_segments{};
    bool prefer_alloc_in_same_node{false};
    uint8_t data_type{0};
    std::string host_id{};
    std::optional<std::vector<std::string>> group_ids{};
};

// 0.3.14 (mooncake-transfer-engine-cuda13): RC0313 and four optional lists at
// its end.  No source of 0.3.14 was at hand: measured on the wheel's own
// ReplicateConfig (pybind11's raw pointer; each bound field set in turn and the
// bytes that changed, the engaged flags of the optionals, the element size of
// per_key_preferred_hca_names; 336 bytes).  Which of the three lists of
// strings is which is by the offsets Python's setters wrote; the shim leaves
// all four empty.
struct RC0314 {
    size_t replica_num{1};
    size_t nof_replica_num{0};
    size_t dfs_replica_num{0};
    uint8_t soft_pin_action{0};
    std::optional<uint64_t> soft_pin_ttl_ms{};
    bool with_hard_pin{false};
    std::vector<std::string> preferred_segments{};
    std::string preferred_segment{};
    std::vector<std::string> preferred_nof_segments{};
    bool prefer_alloc_in_same_node{false};
    uint8_t data_type{0};
    std::string host_id{};
    std::optional<std::vector<std::string>> group_ids{};
    std::optional<std::vector<std::string>> session_ids{};
    std::optional<std::vector<std::string>> preferred_hca_names{};
    std::optional<std::vector<std::vector<std::string>>> per_key_preferred_hca_names{};
    std::optional<std::vector<std::string>> residency_affinity_ids{};
};
static_assert(sizeof(RC0314) == 336, "the size measured on the 0.3.14 wheel");
static_assert(offsetof(RC0314, host_id) == 144 && offsetof(RC0314, group_ids) == 176 &&
                  offsetof(RC0314, per_key_preferred_hca_names) == 272,
              "the offsets measured on the 0.3.14 wheel");

// The members common to layouts from 0.3.11 on.
template <class L>
void fill_0311(L &rc, const ReplicaOptions &o) {
    rc.replica_num = o.replica_num;
    rc.nof_replica_num = o.nof_replica_num;
    rc.with_hard_pin = o.with_hard_pin;
    rc.preferred_segments = o.preferred_segments;
    rc.preferred_segment = o.preferred_segment;
    rc.preferred_nof_segments = o.preferred_nof_segments;
    rc.prefer_alloc_in_same_node = o.prefer_alloc_in_same_node;
    rc.data_type = o.data_type;
}

RC0310 build0310(const ReplicaOptions &o) {
    RC0310 rc;
    rc.replica_num = o.replica_num;
    rc.with_soft_pin = o.soft_pin_action == MCS_SOFT_PIN_ENABLE;
    rc.with_hard_pin = o.with_hard_pin;
    rc.preferred_segments = o.preferred_segments;
    rc.preferred_segment = o.preferred_segment;
    rc.prefer_alloc_in_same_node = o.prefer_alloc_in_same_node;
    return rc;
}

RC0311 build0311(const ReplicaOptions &o) {
    RC0311 rc;
    fill_0311(rc, o);
    rc.with_soft_pin = o.soft_pin_action == MCS_SOFT_PIN_ENABLE;
    return rc;
}

RC0312 build0312(const ReplicaOptions &o, const StrVec *group_ids) {
    RC0312 rc;
    fill_0311(rc, o);
    rc.with_soft_pin = o.soft_pin_action == MCS_SOFT_PIN_ENABLE;
    if (group_ids) rc.group_ids = *group_ids;
    return rc;
}

RC0313 build0313(const ReplicaOptions &o, const StrVec *group_ids) {
    RC0313 rc;
    fill_0311(rc, o);
    rc.dfs_replica_num = o.dfs_replica_num;
    rc.soft_pin_action = uint8_t(o.soft_pin_action);
    if (o.has_soft_pin_ttl) rc.soft_pin_ttl_ms = o.soft_pin_ttl_ms;
    if (group_ids) rc.group_ids = *group_ids;
    return rc;
}

RC0314 build0314(const ReplicaOptions &o, const StrVec *group_ids) {
    RC0314 rc;
    fill_0311(rc, o);
    rc.dfs_replica_num = o.dfs_replica_num;
    rc.soft_pin_action = uint8_t(o.soft_pin_action);
    if (o.has_soft_pin_ttl) rc.soft_pin_ttl_ms = o.soft_pin_ttl_ms;
    if (group_ids) rc.group_ids = *group_ids;
    return rc;
}

// ---- field-by-field comparison (tests) -------------------------------------

template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
std::string show(T v) {
    return std::to_string(+v);
}
std::string show(const std::string &s) {
    return "'" + s + "'";
}
std::string show(const std::vector<std::string> &v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); i++) out += (i ? ", " : "") + show(v[i]);
    return out + "]";
}
template <class T>
std::string show(const std::optional<T> &v) {
    return v ? show(*v) : std::string("none");
}

struct Diff {
    std::string text;
    int count = 0;
    template <class T>
    void field(const char *name, const T &mooncake, const T &shim) {
        if (mooncake == shim) return;
        count++;
        text += std::string(text.empty() ? "" : "; ") + name + ": Mooncake's " + show(mooncake) +
                ", the shim's " + show(shim);
    }
};

#define MCS_FIELD(d, a, b, f) d.field(#f, a.f, b.f)

template <class L>
void diff_0311(Diff &d, const L &a, const L &b) {
    MCS_FIELD(d, a, b, replica_num);
    MCS_FIELD(d, a, b, nof_replica_num);
    MCS_FIELD(d, a, b, with_hard_pin);
    MCS_FIELD(d, a, b, preferred_segments);
    MCS_FIELD(d, a, b, preferred_segment);
    MCS_FIELD(d, a, b, preferred_nof_segments);
    MCS_FIELD(d, a, b, prefer_alloc_in_same_node);
    MCS_FIELD(d, a, b, data_type);
}

void diff(Diff &d, const RC0310 &a, const RC0310 &b) {
    MCS_FIELD(d, a, b, replica_num);
    MCS_FIELD(d, a, b, with_soft_pin);
    MCS_FIELD(d, a, b, with_hard_pin);
    MCS_FIELD(d, a, b, preferred_segments);
    MCS_FIELD(d, a, b, preferred_segment);
    MCS_FIELD(d, a, b, prefer_alloc_in_same_node);
}
void diff(Diff &d, const RC0311 &a, const RC0311 &b) {
    diff_0311(d, a, b);
    MCS_FIELD(d, a, b, with_soft_pin);
}
void diff(Diff &d, const RC0312 &a, const RC0312 &b) {
    diff_0311(d, a, b);
    MCS_FIELD(d, a, b, with_soft_pin);
    MCS_FIELD(d, a, b, host_id);
    MCS_FIELD(d, a, b, group_ids);
}
void diff(Diff &d, const RC0313 &a, const RC0313 &b) {
    diff_0311(d, a, b);
    MCS_FIELD(d, a, b, dfs_replica_num);
    MCS_FIELD(d, a, b, soft_pin_action);
    MCS_FIELD(d, a, b, soft_pin_ttl_ms);
    MCS_FIELD(d, a, b, host_id);
    MCS_FIELD(d, a, b, group_ids);
}
void diff(Diff &d, const RC0314 &a, const RC0314 &b) {
    diff_0311(d, a, b);
    MCS_FIELD(d, a, b, dfs_replica_num);
    MCS_FIELD(d, a, b, soft_pin_action);
    MCS_FIELD(d, a, b, soft_pin_ttl_ms);
    MCS_FIELD(d, a, b, host_id);
    MCS_FIELD(d, a, b, group_ids);
    MCS_FIELD(d, a, b, session_ids);
    MCS_FIELD(d, a, b, preferred_hca_names);
    MCS_FIELD(d, a, b, residency_affinity_ids);
    d.field("per_key_preferred_hca_names", bool(a.per_key_preferred_hca_names),
            bool(b.per_key_preferred_hca_names));
}

#undef MCS_FIELD

// ---- the caller's struct ----------------------------------------------------

constexpr uint64_t kMaxStrings = 1u << 24;

StrVec read_strings(const mcs_strings &s, const char *what) {
    StrVec out;
    if (s.n == 0) return out;
    const std::string name = std::string("replica options: ") + what;
    if (!s.data)
        throw Error(MCS_E_INVALID_ARG, name + ".data is NULL but n is " + std::to_string(s.n));
    if (s.n > kMaxStrings) throw Error(MCS_E_INVALID_ARG, name + ".n is over 16777216");
    if (s.bytes < s.n)
        throw Error(MCS_E_INVALID_ARG, name + ".bytes (" + std::to_string(s.bytes) +
                                           ") cannot hold n = " + std::to_string(s.n) +
                                           " NUL-terminated strings");
    out.reserve(size_t(s.n));
    const char *p = s.data, *end = s.data + s.bytes;
    for (uint64_t i = 0; i < s.n; i++) {
        auto *nul = static_cast<const char *>(std::memchr(p, '\0', size_t(end - p)));
        if (!nul)
            throw Error(MCS_E_INVALID_ARG, name + ": its " + std::to_string(s.bytes) +
                                               " bytes hold fewer than n = " + std::to_string(s.n) +
                                               " NUL-terminated strings");
        out.emplace_back(p, size_t(nul - p));
        p = nul + 1;
    }
    if (p != end)
        throw Error(MCS_E_INVALID_ARG, name + ": its bytes hold more than n = " +
                                           std::to_string(s.n) + " NUL-terminated strings");
    return out;
}

bool read_flag(int32_t v, const char *what) {
    if (v != 0 && v != 1)
        throw Error(MCS_E_INVALID_ARG, std::string("replica options: ") + what + " is " +
                                           std::to_string(v) + ": it must be 0 or 1");
    return v == 1;
}

[[noreturn]] void unsupported(const char *field, const char *since, const std::string &wheel) {
    throw Error(MCS_E_UNSUPPORTED, std::string("replica option ") + field + " needs Mooncake " +
                                       since + " or later: the ReplicateConfig of the loaded " +
                                       "wheel (" + wheel + ") has no such field; leave it at " +
                                       "its default or install a newer wheel");
}

}  // namespace

Layout layout_for_version(const std::string &v) {
    if (v == "0.3.10.post2") return Layout::k0310;
    if (v == "0.3.11" || v == "0.3.11.post1") return Layout::k0311;
    if (v == "0.3.12" || v == "0.3.12.post1") return Layout::k0312;
    if (v == "0.3.13" || v == "0.3.13.post1") return Layout::k0313;
    if (v == "0.3.14") return Layout::k0314;
    return Layout::kUnknown;
}

const char *layout_name(Layout layout) {
    switch (layout) {
        case Layout::k0310: return "0.3.10";
        case Layout::k0311: return "0.3.11";
        case Layout::k0312: return "0.3.12";
        case Layout::k0313: return "0.3.13";
        case Layout::k0314: return "0.3.14";
        case Layout::kUnknown: break;
    }
    return "unknown";
}

bool layout_matches_image(Layout layout, const char *image, size_t size, std::string &why) {
    // Literals of ReplicateConfig's operator<<, which prints every member.
    struct Marker {
        const char *text;
        Layout from;   // first layout that prints it
        Layout until;  // last layout that prints it
    };
    static const Marker kMarkers[] = {
        {"ReplicateConfig: { replica_num: ", Layout::k0310, Layout::k0314},
        {", with_soft_pin: ", Layout::k0310, Layout::k0312},
        {", nof_replica_num: ", Layout::k0311, Layout::k0314},
        {", host_id: ", Layout::k0312, Layout::k0314},
        {", soft_pin_ttl_ms: ", Layout::k0313, Layout::k0314},
        {", dfs_replica_num: ", Layout::k0313, Layout::k0314},
        {", residency_affinity_ids: [", Layout::k0314, Layout::k0314},
    };
    if (layout == Layout::kUnknown) return true;
    std::string_view all(image, size);
    bool ok = true;
    for (const Marker &m : kMarkers) {
        bool want = layout >= m.from && layout <= m.until;
        bool found = all.find(m.text) != std::string_view::npos;
        if (want != found) {
            ok = false;
            why += std::string(why.empty() ? "" : ", ") + "'" + m.text + "' " +
                   (found ? "present" : "missing");
        }
    }
    return ok;
}

void init_replica_options(mcs_replica_options *o) {
    std::memset(static_cast<void *>(o), 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->replica_num = 1;
    o->soft_pin_action = MCS_SOFT_PIN_PRESERVE;
}

ReplicaOptions read_replica_options(const mcs_replica_options *in) {
    mcs_replica_options c;
    init_replica_options(&c);
    if (in) {
        uint32_t size = in->struct_size;
        if (size < sizeof(uint32_t))
            throw Error(MCS_E_INVALID_ARG, "struct mcs_replica_options.struct_size is " +
                                               std::to_string(size) +
                                               ": set it with mcs_replica_options_init()");
        std::memcpy(static_cast<void *>(&c), in, std::min<size_t>(size, sizeof c));
    }
    ReplicaOptions o;
    if (c.soft_pin_action < MCS_SOFT_PIN_PRESERVE || c.soft_pin_action > MCS_SOFT_PIN_DISABLE)
        throw Error(MCS_E_INVALID_ARG, "replica options: soft_pin_action " +
                                           std::to_string(c.soft_pin_action) +
                                           " is not PRESERVE (0), ENABLE (1) or DISABLE (2)");
    if (c.data_type < 0 || c.data_type > 255)
        throw Error(MCS_E_INVALID_ARG,
                    "replica options: data_type " + std::to_string(c.data_type) + " is not 0..255");
    if (c.reserved != 0) throw Error(MCS_E_INVALID_ARG, "replica options: reserved must be 0");
    o.replica_num = c.replica_num;
    o.nof_replica_num = c.nof_replica_num;
    o.dfs_replica_num = c.dfs_replica_num;
    o.soft_pin_action = c.soft_pin_action;
    o.has_soft_pin_ttl = read_flag(c.has_soft_pin_ttl, "has_soft_pin_ttl");
    o.soft_pin_ttl_ms = o.has_soft_pin_ttl ? c.soft_pin_ttl_ms : 0;
    o.with_hard_pin = read_flag(c.with_hard_pin, "with_hard_pin");
    o.prefer_alloc_in_same_node =
        read_flag(c.prefer_alloc_in_same_node, "prefer_alloc_in_same_node");
    o.data_type = uint8_t(c.data_type);
    o.preferred_segments = read_strings(c.preferred_segments, "preferred_segments");
    if (c.preferred_segment) o.preferred_segment = c.preferred_segment;
    o.preferred_nof_segments = read_strings(c.preferred_nof_segments, "preferred_nof_segments");
    o.has_group_ids = read_flag(c.has_group_ids, "has_group_ids");
    if (o.has_group_ids)
        o.group_ids = read_strings(c.group_ids, "group_ids");
    else if (c.group_ids.n)
        throw Error(MCS_E_INVALID_ARG, "replica options: group_ids given but has_group_ids is 0");
    return o;
}

void check_replica_supported(Layout layout, const std::string &wheel, const ReplicaOptions &o) {
    if (layout == Layout::kUnknown)
        throw Error(MCS_E_UNSUPPORTED,
                    "writes are refused: the layout of the ReplicateConfig of Mooncake " +
                        (wheel.empty() ? std::string("(version not given)") : wheel) +
                        " is not known to this shim (known: 0.3.10.post2 to 0.3.14)");
    if (layout < Layout::k0311) {
        if (o.nof_replica_num) unsupported("nof_replica_num", "0.3.11", wheel);
        if (!o.preferred_nof_segments.empty())
            unsupported("preferred_nof_segments", "0.3.11", wheel);
        if (o.data_type) unsupported("data_type", "0.3.11", wheel);
    }
    if (layout < Layout::k0312 && o.has_group_ids) unsupported("group_ids", "0.3.12", wheel);
    if (layout < Layout::k0313) {
        if (o.dfs_replica_num) unsupported("dfs_replica_num", "0.3.13", wheel);
        if (o.has_soft_pin_ttl) unsupported("soft_pin_ttl_ms", "0.3.13", wheel);
    }
}

void with_replicate_config_fn(Layout layout, const ReplicaOptions &o, const StrVec *group_ids,
                              ConfigFn fn) {
    switch (layout) {
        case Layout::k0310: {
            const RC0310 rc = build0310(o);
            fn.call(fn.ctx, &rc);
            return;
        }
        case Layout::k0311: {
            const RC0311 rc = build0311(o);
            fn.call(fn.ctx, &rc);
            return;
        }
        case Layout::k0312: {
            const RC0312 rc = build0312(o, group_ids);
            fn.call(fn.ctx, &rc);
            return;
        }
        case Layout::k0313: {
            const RC0313 rc = build0313(o, group_ids);
            fn.call(fn.ctx, &rc);
            return;
        }
        case Layout::k0314: {
            const RC0314 rc = build0314(o, group_ids);
            fn.call(fn.ctx, &rc);
            return;
        }
        case Layout::kUnknown: break;
    }
    check_replica_supported(Layout::kUnknown, "", o);
}

int compare_replicate_config(Layout layout, const void *native, const ReplicaOptions &o,
                             std::string &text) {
    const StrVec *gids = o.has_group_ids ? &o.group_ids : nullptr;
    Diff d;
    switch (layout) {
        case Layout::k0310: diff(d, *static_cast<const RC0310 *>(native), build0310(o)); break;
        case Layout::k0311: diff(d, *static_cast<const RC0311 *>(native), build0311(o)); break;
        case Layout::k0312:
            diff(d, *static_cast<const RC0312 *>(native), build0312(o, gids));
            break;
        case Layout::k0313:
            diff(d, *static_cast<const RC0313 *>(native), build0313(o, gids));
            break;
        case Layout::k0314:
            diff(d, *static_cast<const RC0314 *>(native), build0314(o, gids));
            break;
        case Layout::kUnknown: check_replica_supported(layout, "", o);
    }
    text = d.text;
    return d.count;
}

void assign_replicate_config(Layout layout, void *native, const ReplicaOptions &o) {
    const StrVec *gids = o.has_group_ids ? &o.group_ids : nullptr;
    switch (layout) {
        case Layout::k0310: *static_cast<RC0310 *>(native) = build0310(o); return;
        case Layout::k0311: *static_cast<RC0311 *>(native) = build0311(o); return;
        case Layout::k0312: *static_cast<RC0312 *>(native) = build0312(o, gids); return;
        case Layout::k0313: *static_cast<RC0313 *>(native) = build0313(o, gids); return;
        case Layout::k0314: *static_cast<RC0314 *>(native) = build0314(o, gids); return;
        case Layout::kUnknown: break;
    }
    check_replica_supported(Layout::kUnknown, "", o);
}

}  // namespace mcs
