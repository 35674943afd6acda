// Tests of what a batch carries through the lane engine (L1 blocks, held
// values, timed-out runs, op stats, packed keys) and of a mixed load, against
// an in-memory store; replica options and multi-part values are in
// test_replica_parts.cpp.  Built with -Dshim_tests=true and run under
// AddressSanitizer+UBSan and ThreadSanitizer in CI.
#include "harness.hpp"

namespace {

void test_l1_blocks_checks_and_rollback() {
    std::vector<char> region(10000);
    {
        Fixture f;
        f.store->l1_base = region.data();
        CHECK(f.engine->register_l1(region.data(), region.size(), 4096) == 0);
        CHECK(f.engine->l1_blocks() == 3);  // 4096 + 4096 + 1808
        Keys k({"l1"});
        int64_t r[1];
        void *inside[] = {region.data() + 100};
        uint64_t small[] = {1000};
        CHECK(f.run(MCS_OP_PUT, k, inside, small, r) == 0);
        void *across[] = {region.data() + 4000};
        CHECK(f.run(MCS_OP_GET, k, across, small, r) == MCS_E_OUTSIDE_L1);
        char outside_buf[8];
        void *outside[] = {outside_buf};
        uint64_t eight[] = {8};
        CHECK(f.run(MCS_OP_GET, k, outside, eight, r) == MCS_E_OUTSIDE_L1);
        void *tail[] = {region.data() + 8192};
        uint64_t tail_size[] = {1808};
        CHECK(f.run(MCS_OP_GET, k, tail, tail_size, r) == 0);
        uint64_t too_long[] = {1809};
        CHECK(f.run(MCS_OP_GET, k, tail, too_long, r) == MCS_E_OUTSIDE_L1);
        try {
            f.engine->register_l1(region.data(), 10, 0);
            CHECK(false);
        } catch (const mcs::Error &e) {
            CHECK(e.code == MCS_E_STATE);
        }
        f.engine->close();
        std::vector<std::string> want = {"register:0",      "register:4096",   "register:8192",
                                         "unregister:8192", "unregister:4096", "unregister:0"};
        CHECK(f.store->calls == want);  // in order, unregistered newest first
    }
    {
        Fixture f;
        f.store->l1_base = region.data();
        f.store->fail_register_at = 2;
        try {
            f.engine->register_l1(region.data(), region.size(), 4096);
            CHECK(false);
        } catch (const mcs::Error &e) {
            CHECK(e.code == -600);
            CHECK(std::string(e.what()).find("block #2") != std::string::npos);
        }
        std::vector<std::string> want = {"register:0", "register:4096", "unregister:4096",
                                         "unregister:0"};
        CHECK(f.store->calls == want);
        CHECK(f.engine->l1_blocks() == 0);
    }
}

void test_concurrent_mixed_load() {
    mcs_lanes lanes{};
    lanes.num_workers = 3;
    lanes.lookup = 1;
    lanes.store = 2;
    lanes.tile_keys = 4;
    Fixture f(lanes);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; t++) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            for (int i = 0; i < 300; i++) {
                int n = 1 + int(rng() % 9);
                std::vector<std::string> names;
                for (int j = 0; j < n; j++)
                    names.push_back("m" + std::to_string(t) + "-" + std::to_string(i) + "-" +
                                    std::to_string(j));
                Keys k(names);
                std::vector<std::string> vals(n, std::string(1 + rng() % 64, char('a' + t)));
                std::vector<void *> bufs;
                std::vector<uint64_t> sizes;
                for (auto &v : vals) {
                    bufs.push_back(v.data());
                    sizes.push_back(v.size());
                }
                std::vector<int64_t> res(n);
                if (f.run(MCS_OP_PUT, k, bufs.data(), sizes.data(), res.data()) != 0) errors++;
                if (f.run(MCS_OP_EXISTS, k, nullptr, nullptr, res.data()) != 0) errors++;
                for (auto r : res)
                    if (r != 1) errors++;
                std::vector<std::vector<char>> out(n, std::vector<char>(128));
                std::vector<void *> obufs;
                std::vector<uint64_t> osz;
                for (auto &o : out) {
                    obufs.push_back(o.data());
                    osz.push_back(o.size());
                }
                if (f.run(MCS_OP_GET, k, obufs.data(), osz.data(), res.data()) != 0) errors++;
                for (int j = 0; j < n; j++)
                    if (res[j] != int64_t(vals[j].size()) ||
                        std::memcmp(out[j].data(), vals[j].data(), vals[j].size()) != 0)
                        errors++;
                uint64_t id;
                std::vector<int64_t> rres(n);
                if (f.submit(MCS_OP_REMOVE, k, nullptr, nullptr, rres.data(), &id) != 0) errors++;
                auto got = f.drain_all(0);
                (void)got;
                // wait for our remove to finish before rres goes out of scope
                while (true) {
                    mcs_lane_stats st{};
                    f.engine->lane_stats(MCS_LANE_SHARED, &st);
                    if (st.pending == 0) break;
                    std::this_thread::sleep_for(100us);
                }
            }
        });
    }
    for (auto &t : threads) t.join();
    CHECK(errors.load() == 0);
    f.engine->close();
    mcs_completion c[64];
    size_t drained = 0;
    int n;
    while ((n = f.engine->drain(c, 64, sizeof(mcs_completion))) > 0) drained += size_t(n);
    CHECK(drained == 6 * 300);
    CHECK(f.store->data.empty());
}

void test_get_buffer_holds_values_until_released() {
    Fixture f;
    Keys k({"a", "b"});
    std::string va = "alpha", vb(5000, 'b');
    void *bufs[] = {va.data(), vb.data()};
    uint64_t sizes[] = {va.size(), vb.size()};
    int64_t res[3] = {};
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    Keys k3({"a", "missing", "b"});
    const void *values[3] = {};
    mcs_batch b = make_batch(MCS_OP_GET_BUFFER, k3, nullptr, nullptr, res);
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);  // no values array
    b.values = values;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);  // no id to release with
    uint64_t id = 0;
    CHECK(f.run_batch(b, &id) == 0 && id != 0);
    CHECK(res[0] == 5 && res[1] == MCS_GET_UNREAD && res[2] == 5000);
    CHECK(values[0] && std::memcmp(values[0], "alpha", 5) == 0 && values[1] == nullptr);
    CHECK(values[2] && static_cast<const char *>(values[2])[4999] == 'b');
    CHECK(f.store->held.size() == 1 && !f.store->held[0].expired());
    CHECK(f.engine->release(id) == 0);
    CHECK(f.store->held[0].expired());
    CHECK(f.engine->release(id) == 0);  // unknown ids are ignored
    mcs::OpCounters o;
    f.engine->op_stats(MCS_OP_GET_BUFFER, &o);
    CHECK(o.calls == 1 && o.keys == 3 && o.failed_calls == 0 && o.bytes == 5005);
}

void test_held_values_are_released_at_close() {
    Fixture f;
    Keys k({"a"});
    char v[] = "v";
    void *bufs[] = {v};
    uint64_t sizes[] = {1};
    int64_t res[1];
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    const void *values[1] = {};
    mcs_batch b = make_batch(MCS_OP_GET_BUFFER, k, nullptr, nullptr, res);
    b.values = values;
    uint64_t id = 0;
    CHECK(f.run_batch(b, &id) == 0);
    CHECK(!f.store->held[0].expired());
    f.engine->close();
    CHECK(f.store->held[0].expired() && f.store->torn_down.load());
}

void test_timed_out_run_posts_a_completion() {
    mcs_lanes lanes{};
    lanes.retrieve = 1;
    Fixture f(lanes);
    Keys k({"a"});
    char v[] = "v";
    void *bufs[] = {v};
    uint64_t sizes[] = {1};
    int64_t res[1];
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    f.store->block_gets = true;
    char out[8];
    void *obufs[] = {out};
    uint64_t osz[] = {8};
    mcs_batch b = make_batch(MCS_OP_GET, k, obufs, osz, res);
    b.timeout_ms = 50;
    uint64_t id = 0;
    auto t0 = std::chrono::steady_clock::now();
    CHECK(f.run_batch(b, &id) == MCS_E_TIMEOUT);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= 45ms && waited < 2s);
    CHECK(id != 0);
    f.store->block_gets = false;
    auto got = f.drain_all(1);
    CHECK(got.size() == 1);
    if (got.size() == 1) CHECK(got[0].id == id && got[0].timed_out == 1 && got[0].status == 0);
    CHECK(res[0] == 1 && out[0] == 'v');
    mcs::OpCounters o;
    f.engine->op_stats(MCS_OP_GET, &o);
    CHECK(o.timeouts == 1 && o.calls == 1);
}

void test_op_stats_count_fast_paths_and_real_failures() {
    Fixture f;
    Keys one({"x"});
    int64_t res[2];
    CHECK(f.run(MCS_OP_EXISTS, one, nullptr, nullptr, res) == 0 && res[0] == 0);
    Keys two({"ok", "poison"});
    char v[] = "v";
    void *bufs[] = {v, v};
    uint64_t sizes[] = {1, 1};
    CHECK(f.run(MCS_OP_PUT, two, bufs, sizes, res) == 0);
    mcs::OpCounters e, p;
    f.engine->op_stats(MCS_OP_EXISTS, &e);
    f.engine->op_stats(MCS_OP_PUT, &p);
    CHECK(e.calls == 1 && e.keys == 1 && e.failed_calls == 0);  // a miss is no failure
    CHECK(p.calls == 1 && p.failed_calls == 1 && p.failed_keys == 1 && p.bytes == 1);
    CHECK(p.error_codes[0] == -800 && p.error_keys[0] == 1 && p.error_keys[1] == 0);
    uint64_t total = 0;
    for (uint64_t c : p.buckets) total += c;
    CHECK(total == 1);
}

void test_packed_keys_are_validated() {
    Fixture f;
    int64_t res[2];
    const char data[] = "abc\0d";
    uint64_t bad_order[] = {0, 3, 2};
    mcs_batch b{};
    b.struct_size = sizeof b;
    b.op = MCS_OP_EXISTS;
    b.n = 2;
    b.key_data = data;
    b.key_bytes = sizeof data - 1;
    b.key_offsets = bad_order;
    b.results = res;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    uint64_t with_nul[] = {0, 2, 5};
    b.key_offsets = with_nul;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    uint64_t fine[] = {0, 2, 3};
    b.key_offsets = fine;
    CHECK(f.run_batch(b) == 0);
    uint64_t past_end[] = {0, 2, 9};
    b.key_offsets = past_end;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    // NUL-terminated form: "abc" and "d" fit, a third key does not.
    b.key_offsets = nullptr;
    b.key_bytes = sizeof data;  // includes the final NUL
    int64_t r2[3];
    b.results = r2;
    CHECK(f.run_batch(b) == 0);
    b.n = 3;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    b.n = 1;  // "abc" then "d": more keys than n (a key with a NUL, seen whole)
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
    b.key_data = nullptr;
    CHECK(f.run_batch(b) == MCS_E_INVALID_ARG);
}

}  // namespace

int main() {
    return run_tests({
        {"l1_blocks_checks_and_rollback", test_l1_blocks_checks_and_rollback},
        {"concurrent_mixed_load", test_concurrent_mixed_load},
        {"get_buffer_holds_values_until_released", test_get_buffer_holds_values_until_released},
        {"held_values_are_released_at_close", test_held_values_are_released_at_close},
        {"timed_out_run_posts_a_completion", test_timed_out_run_posts_a_completion},
        {"op_stats_count_fast_paths_and_real_failures",
         test_op_stats_count_fast_paths_and_real_failures},
        {"packed_keys_are_validated", test_packed_keys_are_validated},
    });
}
