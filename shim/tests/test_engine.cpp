// Tests of the lane engine (lanes, shared pool, tiles, completions, queue
// bounds, close, L1 checks) against an in-memory store.  These exercise the
// machinery, not Mooncake; they are built with -Dshim_tests=true and run
// under AddressSanitizer+UBSan and ThreadSanitizer in CI.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../src/internal.hpp"

using namespace std::chrono_literals;

namespace {

int g_failed_checks = 0;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::fprintf(stderr, "  CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            g_failed_checks++;                                                                \
        }                                                                                     \
    } while (0)

// An in-memory store with switches to block or fail operations.
class MemStore final : public mcs::Backend {
public:
    std::mutex mu;
    std::map<std::string, std::string> data;
    std::vector<std::string> calls;  // "register:<offset>", "unregister:<offset>"
    char *l1_base = nullptr;
    int fail_register_at = -1;  // index of the register call that fails
    int register_calls = 0;
    std::atomic<bool> block_puts{false};
    std::atomic<bool> block_gets{false};
    std::atomic<int> get_calls{0};
    std::atomic<int> puts_running{0};
    std::atomic<bool> torn_down{false};
    std::atomic<int> teardowns{0};

    std::vector<int> exists(const mcs::StrVec &keys) override {
        std::lock_guard<std::mutex> lk(mu);
        std::vector<int> r;
        for (auto &k : keys) r.push_back(data.count(k) ? 1 : 0);
        return r;
    }
    std::vector<int64_t> get_into(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                                  const std::vector<size_t> &sizes) override {
        get_calls++;
        while (block_gets.load()) std::this_thread::sleep_for(1ms);
        std::lock_guard<std::mutex> lk(mu);
        std::vector<int64_t> r;
        for (size_t i = 0; i < keys.size(); i++) {
            auto it = data.find(keys[i]);
            if (it == data.end()) {
                r.push_back(-704);
            } else if (it->second.size() > sizes[i]) {
                r.push_back(-600);
            } else {
                std::memcpy(bufs[i], it->second.data(), it->second.size());
                r.push_back(int64_t(it->second.size()));
            }
        }
        return r;
    }
    // Copies of the values, kept alive by the hold; "unread" for missing keys.
    mcs::HeldValues get_buffers(const mcs::StrVec &keys) override {
        get_calls++;
        while (block_gets.load()) std::this_thread::sleep_for(1ms);
        std::lock_guard<std::mutex> lk(mu);
        auto copies = std::make_shared<std::vector<std::string>>();
        copies->reserve(keys.size());
        mcs::HeldValues hv;
        for (auto &k : keys) {
            auto it = data.find(k);
            copies->push_back(it == data.end() ? std::string() : it->second);
            hv.values.push_back(it == data.end() ? nullptr : copies->back().data());
            hv.sizes.push_back(it == data.end() ? int64_t(MCS_GET_UNREAD)
                                                : int64_t(it->second.size()));
        }
        held.push_back(copies);
        hv.hold = copies;
        return hv;
    }
    std::vector<std::weak_ptr<std::vector<std::string>>> held;
    std::vector<int> put_from(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                              const std::vector<size_t> &sizes, const void *,
                              bool upsert) override {
        puts_running++;
        while (block_puts.load()) std::this_thread::sleep_for(1ms);
        std::vector<int> r;
        {
            std::lock_guard<std::mutex> lk(mu);
            for (size_t i = 0; i < keys.size(); i++) {
                if (keys[i] == "poison") {
                    r.push_back(-800);
                    continue;
                }
                if (upsert || !data.count(keys[i]))
                    data[keys[i]] = std::string(static_cast<char *>(bufs[i]), sizes[i]);
                r.push_back(0);
            }
        }
        puts_running--;
        return r;
    }
    std::vector<int> remove(const mcs::StrVec &keys, bool) override {
        std::lock_guard<std::mutex> lk(mu);
        std::vector<int> r;
        for (auto &k : keys) r.push_back(data.erase(k) ? 0 : -704);
        return r;
    }
    int64_t size(const std::string &key) override {
        std::lock_guard<std::mutex> lk(mu);
        auto it = data.find(key);
        return it == data.end() ? -704 : int64_t(it->second.size());
    }
    int register_buffer(void *p, size_t) override {
        std::lock_guard<std::mutex> lk(mu);
        if (register_calls++ == fail_register_at) return -600;
        calls.push_back("register:" + std::to_string(static_cast<char *>(p) - l1_base));
        return 0;
    }
    int unregister_buffer(void *p) override {
        std::lock_guard<std::mutex> lk(mu);
        calls.push_back("unregister:" + std::to_string(static_cast<char *>(p) - l1_base));
        return 0;
    }
    void teardown() override {
        teardowns++;
        torn_down = true;
    }
};

// Keys packed the way the C ABI takes them: bytes back to back, n + 1 offsets.
struct Keys {
    std::string data;
    std::vector<uint64_t> offsets{0};
    explicit Keys(const std::vector<std::string> &names) {
        for (auto &s : names) {
            data += s;
            offsets.push_back(data.size());
        }
    }
    size_t size() const { return offsets.size() - 1; }
};

mcs_batch make_batch(int op, const Keys &k, void *const *bufs, const uint64_t *sizes, int64_t *res,
                     int flags = 0) {
    mcs_batch b{};
    b.struct_size = sizeof b;
    b.op = op;
    b.flags = flags;
    b.n = k.size();
    b.key_data = k.data.data();
    b.key_bytes = k.data.size();
    b.key_offsets = k.offsets.data();
    b.bufs = bufs;
    b.sizes = sizes;
    b.results = res;
    return b;
}

const int kRcfg = 0;  // any non-null pointer stands in for a ReplicateConfig

struct Fixture {
    MemStore *store;
    std::unique_ptr<mcs::Engine> engine;
    explicit Fixture(mcs_lanes lanes = {}) {
        auto s = std::make_unique<MemStore>();
        store = s.get();
        engine = std::make_unique<mcs::Engine>(std::move(s), &lanes);
        engine->set_default_rcfg(&kRcfg);
    }
    int run_batch(const mcs_batch &b, uint64_t *id = nullptr) {
        try {
            return engine->submit(b, true, id);
        } catch (const mcs::Error &e) {
            return e.code;
        }
    }
    int run(int op, const Keys &k, void *const *bufs, const uint64_t *sizes, int64_t *res,
            int flags = 0) {
        return run_batch(make_batch(op, k, bufs, sizes, res, flags));
    }
    int submit(int op, const Keys &k, void *const *bufs, const uint64_t *sizes, int64_t *res,
               uint64_t *id, int flags = 0) {
        try {
            return engine->submit(make_batch(op, k, bufs, sizes, res, flags), false, id);
        } catch (const mcs::Error &e) {
            return e.code;
        }
    }
    std::vector<mcs_completion> drain_all(size_t want, std::chrono::milliseconds limit = 10s) {
        std::vector<mcs_completion> got;
        auto deadline = std::chrono::steady_clock::now() + limit;
        while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
            mcs_completion c[16];
            int n = engine->drain(c, 16, sizeof(mcs_completion));
            for (int i = 0; i < n; i++) got.push_back(c[i]);
            if (got.size() < want) {
                try {
                    engine->wait(50);
                } catch (const mcs::Error &) {
                }
            }
        }
        return got;
    }
};

// ---------------------------------------------------------------- tests

void test_round_trip_through_every_op() {
    Fixture f;
    Keys k({"a", "b", "c"});
    std::string va = "alpha", vb = "bravo!", vc(100000, 'x');
    void *bufs[] = {va.data(), vb.data(), vc.data()};
    uint64_t sizes[] = {va.size(), vb.size(), vc.size()};
    int64_t res[3] = {};
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    CHECK(res[0] == 0 && res[1] == 0 && res[2] == 0);
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res, MCS_FLAG_SKIP_EXISTING) == 0);
    CHECK(res[0] == MCS_PUT_EXISTED && res[2] == MCS_PUT_EXISTED);
    Keys k4({"a", "zz", "c"});
    CHECK(f.run(MCS_OP_EXISTS, k4, nullptr, nullptr, res) == 0);
    CHECK(res[0] == 1 && res[1] == 0 && res[2] == 1);
    CHECK(f.run(MCS_OP_SIZE, k4, nullptr, nullptr, res) == 0);
    CHECK(res[0] == 5 && res[1] == -704 && res[2] == 100000);
    std::vector<char> o1(16), o2(16), o3(200000);
    void *obufs[] = {o1.data(), o2.data(), o3.data()};
    uint64_t osz[] = {16, 16, 200000};
    CHECK(f.run(MCS_OP_GET, k4, obufs, osz, res) == 0);  // -704 is per key only
    CHECK(res[0] == 5 && res[1] == -704 && res[2] == 100000);
    CHECK(std::memcmp(o1.data(), "alpha", 5) == 0 && o3[99999] == 'x');
    CHECK(f.run(MCS_OP_REMOVE, k4, nullptr, nullptr, res) == 0);
    CHECK(res[0] == 0 && res[1] == -704 && res[2] == 0);
}

void test_invalid_batches_are_refused() {
    Fixture f;
    int64_t res[2];
    Keys dup({"x", "x"}), empty({""}), one({"k"});
    CHECK(f.run(MCS_OP_EXISTS, dup, nullptr, nullptr, res) == MCS_E_DUPLICATE_KEY);
    CHECK(f.run(MCS_OP_EXISTS, empty, nullptr, nullptr, res) == MCS_E_INVALID_ARG);
    char b[4];
    void *bufs[] = {b};
    uint64_t zero[] = {0};
    CHECK(f.run(MCS_OP_PUT, one, bufs, zero, res) == MCS_E_INVALID_ARG);
    CHECK(f.run(7, one, nullptr, nullptr, res) == MCS_E_INVALID_ARG);
}

void test_first_error_is_kept_and_counted() {
    Fixture f;
    Keys k({"ok1", "poison", "ok2"});
    char v[] = "v";
    void *bufs[] = {v, v, v};
    uint64_t sizes[] = {1, 1, 1};
    int64_t res[3];
    uint64_t id = 0;
    CHECK(f.submit(MCS_OP_PUT, k, bufs, sizes, res, &id) == 0);
    auto got = f.drain_all(1);
    CHECK(got.size() == 1);
    if (got.size() == 1) {
        CHECK(got[0].id == id && got[0].status == 0 && got[0].first_error == -800 &&
              got[0].n_failed == 1);
        CHECK(std::strstr(got[0].message, "poison") != nullptr);
    }
    CHECK(res[0] == 0 && res[1] == -800 && res[2] == 0);
    res[1] = 0;
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);  // the batch ran: per key only
    CHECK(res[1] == -800);
}

void test_tiles_make_exactly_one_completion() {
    mcs_lanes lanes{};
    lanes.store = 3;
    lanes.tile_keys = 3;
    Fixture f(lanes);
    std::vector<std::string> names;
    for (int i = 0; i < 10; i++) names.push_back("t" + std::to_string(i));
    Keys k(names);
    std::vector<std::string> vals(10, "value");
    std::vector<void *> bufs;
    std::vector<uint64_t> sizes;
    for (auto &v : vals) {
        bufs.push_back(v.data());
        sizes.push_back(v.size());
    }
    std::vector<int64_t> res(10, -1);
    uint64_t id = 0;
    CHECK(f.submit(MCS_OP_PUT, k, bufs.data(), sizes.data(), res.data(), &id) == 0);
    auto got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].n_keys == 10 && got[0].status == 0);
    for (auto r : res) CHECK(r == 0);
    std::this_thread::sleep_for(50ms);
    mcs_completion extra[4];
    CHECK(f.engine->drain(extra, 4, sizeof(mcs_completion)) == 0);
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_STORE, &st);
    CHECK(st.completed == 1 && st.keys == 10 && st.workers == 3);
}

void test_byte_tiles_split_stores_only() {
    mcs_lanes lanes{};
    lanes.store = 2;
    lanes.retrieve = 2;
    lanes.tile_bytes = 10;
    Fixture f(lanes);
    Keys k({"b0", "b1", "b2", "b3"});
    std::string v(8, 'v');
    void *bufs[] = {v.data(), v.data(), v.data(), v.data()};
    uint64_t sizes[] = {8, 8, 8, 8};
    int64_t res[4];
    CHECK(f.run(MCS_OP_PUT, k, bufs, sizes, res) == 0);
    std::vector<char> out(32);
    void *obufs[] = {out.data(), out.data() + 8, out.data() + 16, out.data() + 24};
    CHECK(f.run(MCS_OP_GET, k, obufs, sizes, res) == 0);
    CHECK(res[0] == 8 && res[3] == 8);
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_STORE, &st);
    CHECK(st.completed == 1 && st.keys == 4);
}

void test_waiting_small_gets_are_merged() {
    for (uint32_t coalesce : {0u, 1u}) {
        mcs_lanes lanes{};
        lanes.retrieve = 1;
        lanes.coalesce_keys = coalesce;
        Fixture f(lanes);
        {
            std::lock_guard<std::mutex> lk(f.store->mu);
            for (int i = 0; i < 10; i++)
                f.store->data["g" + std::to_string(i)] = std::string(i + 1, 'x');
        }
        f.store->block_gets = true;
        // one batch occupies the single worker; 12 more wait (one repeats a key)
        std::vector<Keys> keys;
        keys.emplace_back(std::vector<std::string>{"g0"});
        for (int i = 0; i < 10; i++)
            keys.emplace_back(std::vector<std::string>{"g" + std::to_string(i)});
        keys.emplace_back(std::vector<std::string>{"g3"});  // repeats a key of the group
        keys.emplace_back(std::vector<std::string>{"missing"});
        std::vector<std::vector<char>> out(keys.size(), std::vector<char>(16));
        std::vector<void *> bufs;
        for (auto &o : out) bufs.push_back(o.data());
        uint64_t size16[] = {16};
        std::vector<int64_t> res(keys.size(), -1);
        uint64_t id;
        for (size_t i = 0; i < keys.size(); i++) {
            CHECK(f.submit(MCS_OP_GET, keys[i], &bufs[i], size16, &res[i], &id) == 0);
            if (i == 0) {
                while (f.store->get_calls.load() == 0) std::this_thread::sleep_for(1ms);
            }
        }
        f.store->block_gets = false;
        auto got = f.drain_all(keys.size());
        CHECK(got.size() == keys.size());  // one completion per batch, merged or not
        CHECK(res[0] == 1 && res[11] == 4 && res[12] == -704);
        for (int i = 0; i < 10; i++) {
            CHECK(res[1 + i] == i + 1);
            CHECK(out[1 + i][size_t(i)] == 'x');
        }
        mcs_lane_stats st{};
        f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
        CHECK(st.completed == keys.size());
        if (coalesce == 1) {
            CHECK(f.store->get_calls.load() == int(keys.size()));
            CHECK(st.merged == 0);
        } else {
            // the first call, one merged call, and the repeated "g3" on its own
            CHECK(f.store->get_calls.load() == 3);
            CHECK(st.merged == 1);
        }
    }
}

void test_lanes_isolate_lookups_from_blocked_stores() {
    mcs_lanes lanes{};
    lanes.lookup = 1;
    lanes.store = 2;
    Fixture f(lanes);
    f.store->block_puts = true;
    char v[] = "v";
    std::vector<Keys> keys;
    for (int i = 0; i < 4; i++)
        keys.emplace_back(std::vector<std::string>{"s" + std::to_string(i)});
    void *bufs[] = {v};
    uint64_t sizes[] = {1};
    int64_t res[4][1];
    uint64_t ids[4];
    for (int i = 0; i < 4; i++)
        CHECK(f.submit(MCS_OP_PUT, keys[i], bufs, sizes, res[i], &ids[i]) == 0);
    std::this_thread::sleep_for(20ms);
    CHECK(f.store->puts_running.load() == 2);  // store lane: 2 workers, both stuck
    Keys look({"s0"});
    int64_t lr[1];
    auto t0 = std::chrono::steady_clock::now();
    CHECK(f.run(MCS_OP_EXISTS, look, nullptr, nullptr, lr) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_STORE, &st);
    CHECK(st.running == 2 && st.queued == 2 && st.pending == 4);
    f.store->block_puts = false;
    CHECK(f.drain_all(4).size() == 4);
}

void test_shared_pool_serves_unconfigured_lanes() {
    mcs_lanes lanes{};
    lanes.num_workers = 2;
    lanes.lookup = 1;
    Fixture f(lanes);
    Keys k({"q"});
    int64_t r[1];
    CHECK(f.run(MCS_OP_REMOVE, k, nullptr, nullptr, r) == 0);
    CHECK(f.run(MCS_OP_EXISTS, k, nullptr, nullptr, r) == 0);
    mcs_lane_stats shared{}, lookup{}, del{};
    f.engine->lane_stats(MCS_LANE_SHARED, &shared);
    f.engine->lane_stats(MCS_LANE_LOOKUP, &lookup);
    f.engine->lane_stats(MCS_LANE_DELETE, &del);
    CHECK(shared.workers == 2 && shared.completed == 1);
    CHECK(lookup.workers == 1 && lookup.completed == 1);
    CHECK(del.workers == 0 && del.completed == 0);

    mcs_lanes all{};
    all.lookup = all.retrieve = all.store = all.del = 1;
    Fixture g(all);
    mcs_lane_stats none{};
    g.engine->lane_stats(MCS_LANE_SHARED, &none);
    CHECK(none.workers == 0);  // no shared pool when every lane is configured
}

void test_full_queue_fails_or_waits_as_configured() {
    for (int32_t wait_ms : {0, 50, -1}) {
        mcs_lanes lanes{};
        lanes.store = 1;
        lanes.queue_capacity = 2;
        lanes.queue_wait_ms = wait_ms;
        Fixture f(lanes);
        f.store->block_puts = true;
        char v[] = "v";
        Keys k0({"a"}), k1({"b"}), k2({"c"});
        void *bufs[] = {v};
        uint64_t sizes[] = {1};
        int64_t r0[1], r1[1], r2[1];
        uint64_t id;
        CHECK(f.submit(MCS_OP_PUT, k0, bufs, sizes, r0, &id) == 0);
        CHECK(f.submit(MCS_OP_PUT, k1, bufs, sizes, r1, &id) == 0);
        if (wait_ms >= 0) {
            auto t0 = std::chrono::steady_clock::now();
            CHECK(f.submit(MCS_OP_PUT, k2, bufs, sizes, r2, &id) == MCS_E_QUEUE_FULL);
            CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(wait_ms));
            mcs_lane_stats st{};
            f.engine->lane_stats(MCS_LANE_STORE, &st);
            CHECK(st.rejected == 1 && st.pending == 2);
            f.store->block_puts = false;
        } else {
            std::thread unblock([&] {
                std::this_thread::sleep_for(50ms);
                f.store->block_puts = false;
            });
            CHECK(f.submit(MCS_OP_PUT, k2, bufs, sizes, r2, &id) == 0);  // waited for room
            unblock.join();
        }
        CHECK(f.drain_all(wait_ms >= 0 ? 2 : 3).size() == size_t(wait_ms >= 0 ? 2 : 3));
    }
}

void test_eventfd_is_readable_until_drained() {
    Fixture f;
    int fd = f.engine->fd();
    pollfd p{fd, POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0);
    Keys k({"e"});
    int64_t r[1];
    uint64_t id;
    CHECK(f.submit(MCS_OP_EXISTS, k, nullptr, nullptr, r, &id) == 0);
    CHECK(poll(&p, 1, 5000) == 1);
    mcs_completion c[2];
    CHECK(f.engine->drain(c, 2, sizeof(mcs_completion)) == 1);
    p.revents = 0;
    CHECK(poll(&p, 1, 0) == 0);
}

void test_close_drains_accepted_work_and_refuses_more() {
    mcs_lanes lanes{};
    lanes.store = 1;
    Fixture f(lanes);
    f.store->block_puts = true;
    char v[] = "v";
    std::vector<Keys> keys;
    for (int i = 0; i < 5; i++)
        keys.emplace_back(std::vector<std::string>{"c" + std::to_string(i)});
    void *bufs[] = {v};
    uint64_t sizes[] = {1};
    int64_t res[5][1];
    uint64_t id;
    for (int i = 0; i < 5; i++) CHECK(f.submit(MCS_OP_PUT, keys[i], bufs, sizes, res[i], &id) == 0);
    std::thread unblock([&] {
        std::this_thread::sleep_for(50ms);
        f.store->block_puts = false;
    });
    CHECK(f.engine->close() == 0);
    unblock.join();
    CHECK(f.store->data.size() == 5);  // nothing accepted was lost
    CHECK(f.store->teardowns.load() == 1);
    CHECK(f.engine->close() == 0);
    CHECK(f.store->teardowns.load() == 1);  // torn down once
    CHECK(f.engine->enter() == MCS_E_CLOSED);
    mcs_completion c[8];
    CHECK(f.engine->drain(c, 8, sizeof(mcs_completion)) == 5);  // completions survive close
}

void test_close_waits_for_threads_inside_calls() {
    Fixture f;
    std::atomic<int> ok{0}, refused{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            Keys k({"w" + std::to_string(t)});
            int64_t r[1];
            for (;;) {  // until close() refuses us
                int rc = f.engine->enter();
                if (rc) {
                    refused++;
                    return;
                }
                rc = f.run(MCS_OP_EXISTS, k, nullptr, nullptr, r);
                f.engine->leave();
                (rc == 0 ? ok : other)++;
            }
        });
    }
    while (ok.load() < 100) std::this_thread::sleep_for(1ms);
    CHECK(f.engine->close() == 0);
    for (auto &t : threads) t.join();
    CHECK(ok.load() > 0 && other.load() == 0 && refused.load() == 4);
    CHECK(f.store->teardowns.load() == 1);
}

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

}  // namespace

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

int main() {
    struct Test {
        const char *name;
        std::function<void()> fn;
    };
    std::vector<Test> tests = {
        {"round_trip_through_every_op", test_round_trip_through_every_op},
        {"invalid_batches_are_refused", test_invalid_batches_are_refused},
        {"first_error_is_kept_and_counted", test_first_error_is_kept_and_counted},
        {"tiles_make_exactly_one_completion", test_tiles_make_exactly_one_completion},
        {"byte_tiles_split_stores_only", test_byte_tiles_split_stores_only},
        {"waiting_small_gets_are_merged", test_waiting_small_gets_are_merged},
        {"lanes_isolate_lookups_from_blocked_stores",
         test_lanes_isolate_lookups_from_blocked_stores},
        {"shared_pool_serves_unconfigured_lanes", test_shared_pool_serves_unconfigured_lanes},
        {"full_queue_fails_or_waits_as_configured", test_full_queue_fails_or_waits_as_configured},
        {"eventfd_is_readable_until_drained", test_eventfd_is_readable_until_drained},
        {"close_drains_accepted_work_and_refuses_more",
         test_close_drains_accepted_work_and_refuses_more},
        {"close_waits_for_threads_inside_calls", test_close_waits_for_threads_inside_calls},
        {"l1_blocks_checks_and_rollback", test_l1_blocks_checks_and_rollback},
        {"concurrent_mixed_load", test_concurrent_mixed_load},
        {"get_buffer_holds_values_until_released", test_get_buffer_holds_values_until_released},
        {"held_values_are_released_at_close", test_held_values_are_released_at_close},
        {"timed_out_run_posts_a_completion", test_timed_out_run_posts_a_completion},
        {"op_stats_count_fast_paths_and_real_failures",
         test_op_stats_count_fast_paths_and_real_failures},
        {"packed_keys_are_validated", test_packed_keys_are_validated},
    };
    int passed = 0, failed = 0;
    for (auto &t : tests) {
        int before = g_failed_checks;
        t.fn();
        bool ok = g_failed_checks == before;
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
        (ok ? passed : failed)++;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
