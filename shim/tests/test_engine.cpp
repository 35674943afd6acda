// Tests of the lane engine's scheduling (lanes, shared pool, tiles, merged
// reads, completions, queue bounds, close) against an in-memory store; what a
// batch carries is tested in test_batch_data.cpp.  These exercise the
// machinery, not Mooncake; they are built with -Dshim_tests=true and run
// under AddressSanitizer+UBSan and ThreadSanitizer in CI.
#include "harness.hpp"

namespace {

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
    // Every tile has finished (none queued or running): any extra completion
    // would have been posted by now.
    mcs_lane_stats st{};
    CHECK(wait_until([&] {
        f.engine->lane_stats(MCS_LANE_STORE, &st);
        return st.queued == 0 && st.running == 0 && st.pending == 0;
    }));
    mcs_completion extra[4];
    CHECK(f.engine->drain(extra, 4, sizeof(mcs_completion)) == 0);
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
            if (i == 0) CHECK(wait_until([&] { return f.store->get_calls.load() > 0; }));
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

void test_small_sync_reads_of_many_threads_share_calls() {
    // Four free worker slots, eight threads each running one small get: one
    // runs in Mooncake, the others wait for it and then go in one merged call,
    // instead of four Mooncake calls at once (which busy-wait on few cores).
    mcs_lanes lanes{};
    lanes.retrieve = 4;
    Fixture f(lanes);
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        for (int i = 0; i < 8; i++) f.store->data["s" + std::to_string(i)] = std::string(4, 'y');
    }
    f.store->block_gets = true;
    std::vector<int64_t> res(8, -1);
    std::vector<std::vector<char>> out(8, std::vector<char>(8));
    std::vector<std::thread> threads;
    auto get = [&](int i) {
        Keys k(std::vector<std::string>{"s" + std::to_string(i)});
        void *buf[] = {out[size_t(i)].data()};
        uint64_t size8[] = {8};
        CHECK(f.run(MCS_OP_GET, k, buf, size8, &res[size_t(i)]) == 0);
    };
    threads.emplace_back(get, 0);
    CHECK(wait_until([&] { return f.store->get_calls.load() > 0; }));
    for (int i = 1; i < 8; i++) threads.emplace_back(get, i);
    mcs_lane_stats queued{};
    CHECK(wait_until([&] {  // all seven are waiting, queued behind the first
        f.engine->lane_stats(MCS_LANE_RETRIEVE, &queued);
        return queued.queued == 7;
    }));
    CHECK(f.store->get_calls.load() == 1);
    f.store->block_gets = false;
    for (auto &t : threads) t.join();
    for (int i = 0; i < 8; i++) CHECK(res[size_t(i)] == 4);
    CHECK(f.store->get_calls.load() == 2);  // the first, then the seven merged
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
    CHECK(st.merged == 1 && st.completed == 8);
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
    // store lane: 2 workers, both stuck in Mooncake; the other two batches queued
    CHECK(wait_until([&] { return f.store->puts_running.load() == 2; }));
    Keys look({"s0"});
    int64_t lr[1];
    auto t0 = std::chrono::steady_clock::now();
    CHECK(f.run(MCS_OP_EXISTS, look, nullptr, nullptr, lr) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_STORE, &st);
    CHECK(st.running == 2 && st.queued == 2 && st.pending == 4);
    CHECK(f.store->puts_running.load() == 2);  // still stuck: the lookup did not wait for them
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
            // The queue is full (one put running, one queued); the puts are
            // unblocked once the submit below is on its way, and it must not
            // return before a put finished and made room.
            std::atomic<bool> submitting{false};
            std::thread unblock([&] {
                CHECK(wait_until([&] { return submitting.load(); }));
                f.store->block_puts = false;
            });
            CHECK(wait_until([&] { return f.store->puts_running.load() == 1; }));
            submitting = true;
            CHECK(f.submit(MCS_OP_PUT, k2, bufs, sizes, r2, &id) == 0);  // waited for room
            CHECK(!f.store->block_puts.load());
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
    // The puts go on only once close() has begun (it then refuses new calls),
    // so close must wait for the accepted work rather than find it done.
    std::thread unblock([&] {
        CHECK(wait_until([&] {
            if (f.engine->enter() != 0) return true;
            f.engine->leave();
            return false;
        }));
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
    CHECK(wait_until([&] { return ok.load() >= 100; }));
    CHECK(f.engine->close() == 0);
    for (auto &t : threads) t.join();
    CHECK(ok.load() > 0 && other.load() == 0 && refused.load() == 4);
    CHECK(f.store->teardowns.load() == 1);
}

}  // namespace

// One retrieve worker, "a" and "b" stored, gets held inside the store until
// block_gets is cleared; `first` and `second` are one-key GETs of "a" and "b"
// into 16-byte buffers of their own.
struct TwoHeldGets {
    static mcs_lanes lanes(uint32_t coalesce_keys) {
        mcs_lanes l{};
        l.retrieve = 1;
        l.coalesce_keys = coalesce_keys;
        return l;
    }
    Fixture f;
    char out_a[16] = {}, out_b[16] = {};
    void *buf_a[1] = {out_a}, *buf_b[1] = {out_b};
    uint64_t size16[1] = {16};
    int64_t res_a = 0, res_b = 0;
    Keys ka{std::vector<std::string>{"a"}}, kb{std::vector<std::string>{"b"}};
    mcs_batch first = make_batch(MCS_OP_GET, ka, buf_a, size16, &res_a);
    mcs_batch second = make_batch(MCS_OP_GET, kb, buf_b, size16, &res_b);
    explicit TwoHeldGets(uint32_t coalesce_keys = 0) : f(lanes(coalesce_keys)) {
        {
            std::lock_guard<std::mutex> lk(f.store->mu);
            f.store->data["a"] = "aaaa";
            f.store->data["b"] = "bbbb";
        }
        f.store->block_gets = true;
    }
};

// A timed call whose deadline passes while its batch is still queued is
// withdrawn: it fails saying nothing was sent, and its completion comes at
// once, while the call ahead of it (inside Mooncake) still holds the worker.
void test_timed_out_queued_batch_is_withdrawn() {
    TwoHeldGets t;
    Fixture &f = t.f;
    int64_t &res_a = t.res_a, &res_b = t.res_b;
    t.first.timeout_ms = 300;  // time enough for the worker to take it
    uint64_t id_a = 0, id_b = 0;
    CHECK(f.run_batch(t.first, &id_a) == MCS_E_TIMEOUT);  // inside Mooncake: it goes on
    CHECK(f.store->get_calls.load() == 1);
    mcs_batch &second = t.second;
    second.timeout_ms = 50;
    int rc = 0;
    std::string msg;
    try {
        f.engine->submit(second, true, &id_b);
    } catch (const mcs::Error &e) {
        rc = e.code;
        msg = e.what();
    }
    CHECK(rc == MCS_E_TIMEOUT);
    CHECK(msg.find("did not start") != std::string::npos);
    CHECK(msg.find("1 of them held by calls whose callers had timed out") != std::string::npos);
    auto got = f.drain_all(1, 2s);  // the withdrawn one, while the first is still blocked
    CHECK(got.size() == 1 && got[0].id == id_b);
    if (got.size() == 1) {
        CHECK(got[0].timed_out == 1 && got[0].first_error == MCS_E_TIMEOUT);
        CHECK(got[0].n_failed == 1 && got[0].status == 0);
    }
    CHECK(res_b == MCS_E_TIMEOUT);
    CHECK(f.store->get_calls.load() == 1);  // "b" never reached Mooncake
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
    CHECK(st.running == 1 && st.abandoned == 1 && st.withdrawn == 1 && st.queued == 0);
    f.store->block_gets = false;
    got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].id == id_a && res_a == 4);
    // The worker counts the call ended just after its completion is posted.
    CHECK(wait_until([&] {
        f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
        return st.running == 0 && st.abandoned == 0 && st.pending == 0;
    }));
}

// Calls that time out in the queue leave nothing behind: once the call
// ahead of them ends, the next call runs at once, and none of theirs reaches
// Mooncake (coalescing off, so each would be a call of its own).
void test_timed_out_calls_leave_no_queue() {
    mcs_lanes lanes{};
    lanes.retrieve = 1;
    lanes.coalesce_keys = 1;
    Fixture f(lanes);
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        for (int i = 0; i < 5; i++) f.store->data["k" + std::to_string(i)] = "vvvv";
    }
    f.store->block_gets = true;
    std::vector<std::vector<char>> out(5, std::vector<char>(16));
    std::vector<void *> bufs;
    for (auto &o : out) bufs.push_back(o.data());
    uint64_t size16[] = {16};
    std::vector<int64_t> res(5, 0);
    std::vector<Keys> keys;
    for (int i = 0; i < 5; i++)
        keys.emplace_back(std::vector<std::string>{"k" + std::to_string(i)});
    auto timed = [&](int i, int ms) {
        mcs_batch b =
            make_batch(MCS_OP_GET, keys[size_t(i)], &bufs[size_t(i)], size16, &res[size_t(i)]);
        b.timeout_ms = ms;
        return f.run_batch(b);
    };
    CHECK(timed(0, 300) == MCS_E_TIMEOUT);  // inside Mooncake, blocked
    CHECK(f.store->get_calls.load() == 1);
    std::vector<std::thread> callers;  // three more, from threads, queued behind it
    std::atomic<int> timeouts{0};
    for (int i = 1; i <= 3; i++)
        callers.emplace_back([&, i] { timeouts += timed(i, 50) == MCS_E_TIMEOUT ? 1 : 0; });
    for (auto &t : callers) t.join();
    CHECK(timeouts.load() == 3);
    CHECK(f.drain_all(3, 2s).size() == 3);  // withdrawn: completed while "k0" still blocks
    f.store->block_gets = false;
    CHECK(f.drain_all(1).size() == 1 && res[0] == 4);
    CHECK(timed(4, 5000) == 0 && res[4] == 4);
    CHECK(f.store->get_calls.load() == 2);  // k0 and k4 only
    for (int i = 1; i <= 3; i++) CHECK(res[size_t(i)] == MCS_E_TIMEOUT);
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
    CHECK(st.withdrawn == 3 && st.abandoned == 0 && st.queued == 0);
}

// A background batch its caller gave up on is taken back from the queue on
// request: never sent, its keys MCS_E_TIMEOUT, its completion (not marked as
// a blocking call's) posted at once; the running one is left alone.
void test_withdrawn_background_batch_is_not_sent() {
    TwoHeldGets t(1);
    Fixture &f = t.f;
    int64_t &res_a = t.res_a, &res_b = t.res_b;
    uint64_t id_a = 0, id_b = 0;
    CHECK(f.engine->submit(t.first, false, &id_a) == MCS_OK);
    CHECK(wait_until([&] { return f.store->get_calls.load() == 1; }));  // "a" blocks inside
    CHECK(f.engine->submit(t.second, false, &id_b) == MCS_OK);
    CHECK(f.engine->withdraw(id_a) == 0);  // running: Mooncake cannot be stopped
    CHECK(f.engine->withdraw(id_b) == 1);
    CHECK(f.engine->withdraw(id_b) == 0);  // nothing of it left to take back
    auto got = f.drain_all(1, 2s);         // while "a" still blocks
    CHECK(got.size() == 1 && got[0].id == id_b);
    if (got.size() == 1) CHECK(got[0].timed_out == 0 && got[0].first_error == MCS_E_TIMEOUT);
    CHECK(res_b == MCS_E_TIMEOUT);
    f.store->block_gets = false;
    got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].id == id_a && res_a == 4);
    CHECK(f.store->get_calls.load() == 1);  // "b" never reached Mooncake
    mcs_lane_stats st{};
    f.engine->lane_stats(MCS_LANE_RETRIEVE, &st);
    CHECK(st.withdrawn == 1 && st.queued == 0);
}

// MCS_FLAG_LAND: a landed get fills the caller's buffers (one buffer a key, or
// parts) as a plain get does; one that outlives its timed-out call never
// writes them; the flag is refused where nobody waits to copy, or with
// MCS_FLAG_TAIL_PART.
void test_landed_gets_write_the_callers_memory_only_while_it_waits() {
    TwoHeldGets t;
    Fixture &f = t.f;
    f.store->block_gets = false;
    t.first.flags = MCS_FLAG_LAND;
    std::memset(t.out_a, 'x', sizeof t.out_a);
    CHECK(f.run_batch(t.first) == MCS_OK);
    CHECK(t.res_a == 4 && std::memcmp(t.out_a, "aaaa", 4) == 0);
    CHECK(t.out_a[4] == 'x');  // past the value: untouched

    // Multi-part: the value fills the parts in order, later parts untouched.
    {
        std::lock_guard<std::mutex> lk(f.store->mu);
        f.store->data["p"] = "0123456789";
    }
    char p1[4], p2[6], p3[4];
    std::memset(p1, '-', 4), std::memset(p2, '-', 6), std::memset(p3, '-', 4);
    void *parts[3] = {p1, p2, p3};
    uint64_t part_sizes[3] = {4, 6, 4};
    uint32_t counts[1] = {3};
    int64_t res_p = 0;
    Keys kp{std::vector<std::string>{"p"}};
    mcs_batch parted = make_batch(MCS_OP_GET, kp, parts, part_sizes, &res_p, MCS_FLAG_LAND);
    parted.part_counts = counts;
    CHECK(f.run_batch(parted) == MCS_OK);
    CHECK(res_p == 10 && std::memcmp(p1, "0123", 4) == 0 && std::memcmp(p2, "456789", 6) == 0);
    CHECK(std::memcmp(p3, "----", 4) == 0);

    // Timed out inside Mooncake: the late read lands in the shim's memory.
    f.store->block_gets = true;
    t.first.timeout_ms = 50;
    uint64_t id = 0;
    CHECK(f.run_batch(t.first, &id) == MCS_E_TIMEOUT);
    std::memset(t.out_a, 'y', sizeof t.out_a);  // the caller reuses its buffer at once
    f.store->block_gets = false;
    auto got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].id == id && got[0].timed_out == 1);
    CHECK(t.res_a == 4);  // it did read, into the landing memory
    CHECK(std::memcmp(t.out_a, "yyyyyyyyyyyyyyyy", 16) == 0);

    // Refused: not a get, with the tail part.
    int64_t res = 0;
    uint64_t size16[1] = {16};
    void *bufs[1] = {t.out_a};
    CHECK(f.run(MCS_OP_PUT, t.ka, bufs, size16, &res, MCS_FLAG_LAND) == MCS_E_INVALID_ARG);
    parted.flags = MCS_FLAG_LAND | MCS_FLAG_TAIL_PART;
    CHECK(f.run_batch(parted) == MCS_E_INVALID_ARG);
}

// MCS_FLAG_LAND on a submitted get: its bytes reach the caller's buffers when
// its read ends; withdrawn while it runs inside Mooncake, it writes them no
// more, and its key answers MCS_E_TIMEOUT in the batch's one completion.
void test_submitted_landed_gets_write_the_callers_memory_until_withdrawn() {
    TwoHeldGets t(1);
    Fixture &f = t.f;
    t.first.flags = t.second.flags = MCS_FLAG_LAND;
    f.store->block_gets = false;
    std::memset(t.out_a, 'x', sizeof t.out_a);
    uint64_t id = 0;
    CHECK(f.engine->submit(t.first, false, &id) == MCS_OK);
    auto got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].id == id && got[0].status == 0 && got[0].n_failed == 0);
    CHECK(t.res_a == 4 && std::memcmp(t.out_a, "aaaa", 4) == 0 && t.out_a[4] == 'x');

    // Withdrawn while its read blocks inside Mooncake: the read ends later, in
    // the shim's memory; the caller reused its buffer as soon as withdraw
    // returned.
    f.store->block_gets = true;
    const int calls = f.store->get_calls.load();
    CHECK(f.engine->submit(t.second, false, &id) == MCS_OK);
    CHECK(wait_until([&] { return f.store->get_calls.load() == calls + 1; }));
    CHECK(f.engine->withdraw(id) == 0);  // nothing queued: it runs
    std::memset(t.out_b, 'y', sizeof t.out_b);
    f.store->block_gets = false;
    got = f.drain_all(1);
    CHECK(got.size() == 1 && got[0].id == id && got[0].timed_out == 0);
    if (got.size() == 1) CHECK(got[0].n_failed == 1 && got[0].first_error == MCS_E_TIMEOUT);
    CHECK(t.res_b == MCS_E_TIMEOUT);
    CHECK(std::memcmp(t.out_b, "yyyyyyyyyyyyyyyy", 16) == 0);
    CHECK(f.engine->withdraw(id) == 0);  // ended: unknown now
}

int main() {
    return run_tests({
        {"round_trip_through_every_op", test_round_trip_through_every_op},
        {"invalid_batches_are_refused", test_invalid_batches_are_refused},
        {"first_error_is_kept_and_counted", test_first_error_is_kept_and_counted},
        {"tiles_make_exactly_one_completion", test_tiles_make_exactly_one_completion},
        {"byte_tiles_split_stores_only", test_byte_tiles_split_stores_only},
        {"waiting_small_gets_are_merged", test_waiting_small_gets_are_merged},
        {"small_sync_reads_of_many_threads_share_calls",
         test_small_sync_reads_of_many_threads_share_calls},
        {"lanes_isolate_lookups_from_blocked_stores",
         test_lanes_isolate_lookups_from_blocked_stores},
        {"shared_pool_serves_unconfigured_lanes", test_shared_pool_serves_unconfigured_lanes},
        {"full_queue_fails_or_waits_as_configured", test_full_queue_fails_or_waits_as_configured},
        {"eventfd_is_readable_until_drained", test_eventfd_is_readable_until_drained},
        {"close_drains_accepted_work_and_refuses_more",
         test_close_drains_accepted_work_and_refuses_more},
        {"close_waits_for_threads_inside_calls", test_close_waits_for_threads_inside_calls},
        {"timed_out_queued_batch_is_withdrawn", test_timed_out_queued_batch_is_withdrawn},
        {"timed_out_calls_leave_no_queue", test_timed_out_calls_leave_no_queue},
        {"withdrawn_background_batch_is_not_sent", test_withdrawn_background_batch_is_not_sent},
        {"landed_gets_write_the_callers_memory_only_while_it_waits",
         test_landed_gets_write_the_callers_memory_only_while_it_waits},
        {"submitted_landed_gets_write_the_callers_memory_until_withdrawn",
         test_submitted_landed_gets_write_the_callers_memory_until_withdrawn},
    });
}
