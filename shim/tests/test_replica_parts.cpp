// Tests of replica options (read, checked, laid out for each Mooncake wheel),
// group ids across tiles, multi-part values and the cluster-wide calls,
// through the lane engine against an in-memory store.  Built with
// -Dshim_tests=true and run under AddressSanitizer+UBSan and ThreadSanitizer
// in CI.
#include "harness.hpp"

namespace {

// Strings packed as struct mcs_strings wants them: n NUL-terminated, back to back.
struct Packed {
    std::string data;
    uint64_t n = 0;
    explicit Packed(const std::vector<std::string> &items) {
        for (auto &s : items) data += s + '\0';
        n = items.size();
    }
    mcs_strings view() const { return {data.data(), data.size(), n}; }
};

int read_code(const mcs_replica_options *o) {
    try {
        mcs::read_replica_options(o);
        return 0;
    } catch (const mcs::Error &e) {
        return e.code;
    }
}

void test_replica_options_are_read_and_checked() {
    mcs::ReplicaOptions d = mcs::read_replica_options(nullptr);
    CHECK(d.replica_num == 1 && d.soft_pin_action == MCS_SOFT_PIN_PRESERVE && !d.has_group_ids);
    mcs_replica_options o;
    mcs::init_replica_options(&o);
    CHECK(o.struct_size == sizeof o && o.replica_num == 1);
    Packed segs({"a:1", "", "b:2"});
    o.preferred_segments = segs.view();
    o.replica_num = 3;
    o.has_soft_pin_ttl = 1;
    o.soft_pin_ttl_ms = 700;
    o.preferred_segment = "c:3";
    mcs::ReplicaOptions r = mcs::read_replica_options(&o);
    CHECK(r.replica_num == 3 && r.has_soft_pin_ttl && r.soft_pin_ttl_ms == 700);
    CHECK((r.preferred_segments == mcs::StrVec{"a:1", "", "b:2"}) && r.preferred_segment == "c:3");
    // An older, shorter struct: what it does not reach takes the defaults.
    mcs_replica_options shorter = o;
    shorter.struct_size = offsetof(mcs_replica_options, replica_num);
    CHECK(mcs::read_replica_options(&shorter).replica_num == 1);
    CHECK(mcs::read_replica_options(&shorter).preferred_segments.empty());

    auto bad = [&](auto change) {
        mcs_replica_options b = o;
        change(b);
        return read_code(&b);
    };
    CHECK(bad([](mcs_replica_options &b) { b.struct_size = 0; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.soft_pin_action = 3; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.soft_pin_action = -1; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.data_type = 256; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.with_hard_pin = 2; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.reserved = 1; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.preferred_segments.data = nullptr; }) ==
          MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.preferred_segments.n = 4; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.preferred_segments.n = 2; }) == MCS_E_INVALID_ARG);
    CHECK(bad([](mcs_replica_options &b) { b.preferred_segments.bytes = 2; }) == MCS_E_INVALID_ARG);
    Packed groups({"g"});
    CHECK(bad([&](mcs_replica_options &b) { b.group_ids = groups.view(); }) == MCS_E_INVALID_ARG);
    CHECK(bad([&](mcs_replica_options &b) {
              b.group_ids = groups.view();
              b.has_group_ids = 1;
          }) == 0);
    // n == 0 reads nothing, whatever data and bytes say.
    CHECK(bad([](mcs_replica_options &b) { b.preferred_segments = {nullptr, 99, 0}; }) == 0);
}

void test_group_ids_follow_their_keys_into_tiles() {
    mcs_lanes lanes{};
    lanes.struct_size = sizeof lanes;
    lanes.tile_keys = 2;
    Fixture f(lanes);
    Keys k({"k0", "k1", "k2", "k3", "k4"});
    std::string v = "value";
    void *bufs[5];
    uint64_t sizes[5];
    for (int i = 0; i < 5; i++) {
        bufs[i] = v.data();
        sizes[i] = v.size();
    }
    int64_t res[5];
    mcs_replica_options o;
    mcs::init_replica_options(&o);
    o.replica_num = 2;
    Packed groups({"g0", "g1", "", "g3", "g4"});
    o.group_ids = groups.view();
    o.has_group_ids = 1;
    mcs_batch b = make_batch(MCS_OP_PUT, k, bufs, sizes, res);
    b.replica = &o;
    CHECK(f.run_batch(b) == 0);
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        std::map<std::string, int> seen;
        for (auto &call : f.store->put_replicas) {
            CHECK(call.first == 2);
            for (auto &g : call.second) seen[g]++;
            CHECK(call.second.size() <= 2);
        }
        CHECK(seen.size() == 5 && seen["g0"] == 1 && seen["g4"] == 1 && seen[""] == 1);
        f.store->put_replicas.clear();
    }
    // Skip-existing: only the keys still absent are sent, with their own groups.
    Keys k2({"k1", "new-a", "k3", "new-b"});
    Packed groups2({"x1", "xa", "x3", "xb"});
    o.group_ids = groups2.view();
    b = make_batch(MCS_OP_PUT, k2, bufs, sizes, res, MCS_FLAG_SKIP_EXISTING);
    b.replica = &o;
    CHECK(f.run_batch(b) == 0);
    CHECK(res[0] == MCS_PUT_EXISTED && res[1] == 0 && res[2] == MCS_PUT_EXISTED && res[3] == 0);
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        mcs::StrVec sent;
        for (auto &call : f.store->put_replicas)
            for (auto &g : call.second) sent.push_back(g);
        std::sort(sent.begin(), sent.end());
        CHECK((sent == mcs::StrVec{"xa", "xb"}));
    }
    // One group id per key, or the batch is refused; none on other ops or defaults.
    Packed two({"a", "b"});
    o.group_ids = two.view();
    b = make_batch(MCS_OP_PUT, k, bufs, sizes, res);
    b.replica = &o;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    mcs_batch e = make_batch(MCS_OP_EXISTS, k, nullptr, nullptr, res);
    e.replica = &o;
    CHECK(f.run_batch(e) == MCS_E_INVALID_ARG);
    bool refused = false;
    try {
        f.engine->set_default_replica(mcs::read_replica_options(&o));
    } catch (const mcs::Error &err) {
        refused = err.code == MCS_E_INVALID_ARG;
    }
    CHECK(refused);
    // A default without groups is used by batches that bring none.
    mcs_replica_options d;
    mcs::init_replica_options(&d);
    d.replica_num = 3;
    f.engine->set_default_replica(mcs::read_replica_options(&d));
    Keys one({"dflt"});
    CHECK(f.run(MCS_OP_UPSERT, one, bufs, sizes, res) == 0);
    std::lock_guard<std::mutex> lk(f.store->mu);
    CHECK(f.store->put_replicas.back().first == 3 && f.store->put_replicas.back().second.empty());
}

int supported_code(mcs::Layout layout, void (*change)(mcs::ReplicaOptions &)) {
    mcs::ReplicaOptions o;
    change(o);
    try {
        mcs::check_replica_supported(layout, "test", o);
        return 0;
    } catch (const mcs::Error &e) {
        return e.code;
    }
}

void test_replicate_config_layouts() {
    using mcs::Layout;
    CHECK(mcs::layout_for_version("0.3.10.post2") == Layout::k0310);
    CHECK(mcs::layout_for_version("0.3.11.post1") == Layout::k0311);
    CHECK(mcs::layout_for_version("0.3.12") == Layout::k0312);
    CHECK(mcs::layout_for_version("0.3.13.post1") == Layout::k0313);
    CHECK(mcs::layout_for_version("0.3.14") == Layout::k0314);
    CHECK(mcs::layout_for_version("0.3.15") == Layout::kUnknown);
    CHECK(mcs::layout_for_version("") == Layout::kUnknown);
    constexpr int U = MCS_E_UNSUPPORTED;
    auto nof = [](mcs::ReplicaOptions &o) { o.nof_replica_num = 1; };
    auto dtype = [](mcs::ReplicaOptions &o) { o.data_type = 2; };
    auto nofseg = [](mcs::ReplicaOptions &o) { o.preferred_nof_segments = {"n"}; };
    auto groups = [](mcs::ReplicaOptions &o) { o.has_group_ids = true; };
    auto dfs = [](mcs::ReplicaOptions &o) { o.dfs_replica_num = 1; };
    auto ttl = [](mcs::ReplicaOptions &o) { o.has_soft_pin_ttl = true; };
    auto pin = [](mcs::ReplicaOptions &o) {
        o.soft_pin_action = MCS_SOFT_PIN_ENABLE;
        o.with_hard_pin = true;
        o.preferred_segments = {"a:1"};
        o.preferred_segment = "b:2";
        o.replica_num = 2;
    };
    CHECK(supported_code(Layout::k0310, pin) == 0);
    CHECK(supported_code(Layout::k0310, nof) == U && supported_code(Layout::k0311, nof) == 0);
    CHECK(supported_code(Layout::k0310, dtype) == U && supported_code(Layout::k0311, dtype) == 0);
    CHECK(supported_code(Layout::k0310, nofseg) == U);
    CHECK(supported_code(Layout::k0311, groups) == U && supported_code(Layout::k0312, groups) == 0);
    CHECK(supported_code(Layout::k0312, dfs) == U && supported_code(Layout::k0313, dfs) == 0);
    CHECK(supported_code(Layout::k0312, ttl) == U && supported_code(Layout::k0313, ttl) == 0);
    CHECK(supported_code(Layout::k0314, dfs) == 0 && supported_code(Layout::k0314, ttl) == 0);
    CHECK(supported_code(Layout::kUnknown, pin) == U);

    // Each layout is built, compared with itself and assigned without leaks or faults.
    mcs::ReplicaOptions o;
    o.replica_num = 2;
    o.soft_pin_action = MCS_SOFT_PIN_ENABLE;
    o.preferred_segments = {"a:1", std::string(100, 'x')};
    o.preferred_segment = "b:2";
    mcs::StrVec gids = {"g", ""};
    for (Layout l : {Layout::k0310, Layout::k0311, Layout::k0312, Layout::k0313, Layout::k0314}) {
        int diffs = -1;
        std::vector<char> copy;
        mcs::with_replicate_config(l, o, l >= Layout::k0312 ? &gids : nullptr, [&](const void *rc) {
            mcs::ReplicaOptions same = o;
            same.has_group_ids = l >= Layout::k0312;
            same.group_ids = gids;
            std::string text;
            diffs = mcs::compare_replicate_config(l, rc, same, text);
        });
        CHECK(diffs == 0);
        mcs::ReplicaOptions other;
        mcs::with_replicate_config(l, other, nullptr, [&](const void *rc) {
            std::string text;
            diffs = mcs::compare_replicate_config(l, rc, o, text);
            CHECK(text.find("replica_num") != std::string::npos);
        });
        CHECK(diffs >= 3);
    }

    // The printer's field names in a store.so image tell its layout.
    std::string v10 = "..ReplicateConfig: { replica_num: ..., with_soft_pin: ..";
    std::string v11 = v10 + ", nof_replica_num: ";
    std::string v12 = v11 + ", host_id: ";
    std::string v13 =
        "ReplicateConfig: { replica_num: , nof_replica_num: , dfs_replica_num: "
        ", soft_pin_ttl_ms: , host_id: ";
    std::string why;
    CHECK(mcs::layout_matches_image(Layout::k0310, v10.data(), v10.size(), why));
    CHECK(!mcs::layout_matches_image(Layout::k0310, v11.data(), v11.size(), why));
    CHECK(mcs::layout_matches_image(Layout::k0311, v11.data(), v11.size(), why));
    CHECK(mcs::layout_matches_image(Layout::k0312, v12.data(), v12.size(), why));
    CHECK(!mcs::layout_matches_image(Layout::k0313, v12.data(), v12.size(), why));
    why.clear();
    CHECK(mcs::layout_matches_image(Layout::k0313, v13.data(), v13.size(), why) && why.empty());
    CHECK(!mcs::layout_matches_image(Layout::k0312, v13.data(), v13.size(), why));
    CHECK(why.find("with_soft_pin") != std::string::npos);
}

void test_multi_part_values() {
    mcs_lanes lanes{};
    lanes.struct_size = sizeof lanes;
    lanes.tile_keys = 2;
    Fixture f(lanes);
    // Three keys of 2, 1 and 3 parts: values "abc"+"de", "fgh", "i"+"jk"+"l".
    std::string p[] = {"abc", "de", "fgh", "i", "jk", "l"};
    void *bufs[6];
    uint64_t sizes[6];
    for (int i = 0; i < 6; i++) {
        bufs[i] = p[i].data();
        sizes[i] = p[i].size();
    }
    uint32_t counts[] = {2, 1, 3};
    Keys k({"m1", "m2", "m3"});
    int64_t res[3];
    mcs_batch b = make_batch(MCS_OP_PUT, k, bufs, sizes, res);
    b.part_counts = counts;
    CHECK(f.run_batch(b) == 0 && res[0] == 0 && res[1] == 0 && res[2] == 0);
    CHECK(f.store->data["m1"] == "abcde" && f.store->data["m2"] == "fgh" &&
          f.store->data["m3"] == "ijkl");

    // Exact parts: one call.  Larger parts: sized, cut, read again.
    char a[8], t[2], c[16], d[1], e[3], g[2];
    std::memset(a, '.', sizeof a);
    std::memset(c, '.', sizeof c);
    void *gbufs[] = {a, t, c, d, e, g};
    uint64_t gsizes[] = {3, 2, 16, 1, 3, 2};  // m1 exact, m2 larger, m3 larger
    mcs_batch gb = make_batch(MCS_OP_GET, k, gbufs, gsizes, res);
    gb.part_counts = counts;
    CHECK(f.run_batch(gb) == 0);
    CHECK(res[0] == 5 && res[1] == 3 && res[2] == 4);
    CHECK(std::memcmp(a, "abc", 3) == 0 && std::memcmp(t, "de", 2) == 0);
    CHECK(std::memcmp(c, "fgh", 3) == 0 && c[3] == '.');
    CHECK(d[0] == 'i' && std::memcmp(e, "jkl", 3) == 0);

    // The tail part takes the value's last bytes wherever the value ends.
    Keys one({"m1"});
    char big[10], trailer[2];
    std::memset(big, '.', sizeof big);
    void *tb[] = {big, trailer};
    uint64_t ts[] = {10, 2};
    uint32_t two[] = {2};
    mcs_batch tg = make_batch(MCS_OP_GET, one, tb, ts, res, MCS_FLAG_TAIL_PART);
    tg.part_counts = two;
    CHECK(f.run_batch(tg) == 0 && res[0] == 5);
    CHECK(std::memcmp(big, "abc", 3) == 0 && big[3] == '.' && std::memcmp(trailer, "de", 2) == 0);
    // A value shorter than its tail, or longer than all parts: -600.
    uint64_t long_tail[] = {10, 6};
    tg.sizes = long_tail;
    char trailer6[6];
    void *tb6[] = {big, trailer6};
    tg.bufs = tb6;
    CHECK(f.run_batch(tg) == 0 && res[0] == -600);
    uint64_t small[] = {2, 2};
    mcs_batch sg = make_batch(MCS_OP_GET, one, tb, small, res);
    sg.part_counts = two;
    CHECK(f.run_batch(sg) == 0 && res[0] == -600);
    // A missing key: -704, as for one buffer.
    Keys missing({"nope"});
    mcs_batch mg = make_batch(MCS_OP_GET, missing, tb, ts, res);
    mg.part_counts = two;
    CHECK(f.run_batch(mg) == 0 && res[0] == -704);

    // Skip-existing sends only the absent keys' parts.
    Keys k2({"m1", "m4"});
    uint32_t c2[] = {1, 2};
    mcs_batch sk = make_batch(MCS_OP_PUT, k2, bufs, sizes, res, MCS_FLAG_SKIP_EXISTING);
    sk.part_counts = c2;
    CHECK(f.run_batch(sk) == 0 && res[0] == MCS_PUT_EXISTED && res[1] == 0);
    CHECK(f.store->data["m4"] == "defgh" && f.store->data["m1"] == "abcde");

    // Misuse is refused, nothing runs.
    uint32_t zero[] = {2, 0, 3};
    b.part_counts = zero;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    void *nulls[] = {bufs[0], nullptr, bufs[2], bufs[3], bufs[4], bufs[5]};
    b.part_counts = counts;
    b.bufs = nulls;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    uint64_t zsizes[] = {3, 2, 0, 1, 2, 1};
    b.bufs = bufs;
    b.sizes = zsizes;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    mcs_batch ex = make_batch(MCS_OP_EXISTS, k, nullptr, nullptr, res);
    ex.part_counts = counts;
    CHECK(f.run_batch(ex) == MCS_E_INVALID_ARG);
    mcs_batch tail_put = make_batch(MCS_OP_PUT, k, bufs, sizes, res, MCS_FLAG_TAIL_PART);
    tail_put.part_counts = counts;
    CHECK(f.run_batch(tail_put) == MCS_E_INVALID_ARG);
    mcs_batch tail_plain = make_batch(MCS_OP_GET, one, tb, ts, res, MCS_FLAG_TAIL_PART);
    CHECK(f.run_batch(tail_plain) == MCS_E_INVALID_ARG);
}

void test_cluster_wide_calls() {
    Fixture f;
    Keys k({"ra", "rb", "zz"});
    std::string v = "v";
    void *bufs[] = {v.data(), v.data(), v.data()};
    uint64_t sizes[] = {1, 1, 1};
    int64_t res[3];
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    CHECK(f.engine->remove_by_regex("r", false) == 2);
    CHECK(f.engine->remove_all(true) == 1);
    CHECK(f.engine->health_check() == 0);
    f.engine->close();
    CHECK(f.engine->health_check() == 1);
}

}  // namespace

int main() {
    return run_tests({
        {"replica_options_are_read_and_checked", test_replica_options_are_read_and_checked},
        {"group_ids_follow_their_keys_into_tiles", test_group_ids_follow_their_keys_into_tiles},
        {"replicate_config_layouts", test_replicate_config_layouts},
        {"multi_part_values", test_multi_part_values},
        {"cluster_wide_calls", test_cluster_wide_calls},
    });
}
