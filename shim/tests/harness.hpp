// What the shim's engine tests share: CHECK, an in-memory store with switches
// to block or fail operations, packed keys, batches and an engine fixture.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../src/engine/engine.hpp"

using namespace std::chrono_literals;

inline int g_failed_checks = 0;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::fprintf(stderr, "  CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            g_failed_checks++;                                                                \
        }                                                                                     \
    } while (0)

// Waits until pred() holds, polling every millisecond, for at most `limit`:
// true if it held.  Tests wait for the state they assert instead of sleeping
// for a window and hoping the state was reached (under a loaded sanitizer run
// 20 ms was not enough for two workers to start).
inline bool wait_until(const std::function<bool()> &pred,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= deadline) return pred();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// A test binary's tests, by name.  run_tests runs them in order, prints PASS or FAIL for
// each (with the failed CHECKs above it) and a count, and returns main's exit status.
struct NamedTest {
    const char *name;
    std::function<void()> fn;
};

inline int run_tests(const std::vector<NamedTest> &tests) {
    int passed = 0, failed = 0;
    for (const auto &t : tests) {
        int before = g_failed_checks;
        t.fn();
        bool ok = g_failed_checks == before;
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
        (ok ? passed : failed)++;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

// An in-memory store with switches to block or fail operations.
class MemStore : public mcs::Backend {
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
    // The replica options and group ids each put call saw (opts.replica_num, groups).
    std::vector<std::pair<uint64_t, mcs::StrVec>> put_replicas;
    std::vector<int> put_from(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                              const std::vector<size_t> &sizes, const mcs::ReplicaOptions &opts,
                              const mcs::StrVec *group_ids, bool upsert) override {
        {
            std::lock_guard<std::mutex> lk(mu);
            put_replicas.emplace_back(opts.replica_num, group_ids ? *group_ids : mcs::StrVec{});
        }
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
    // Multi-part values as Mooncake does them: a get reads only into parts that
    // add up to the value's size (larger: -800, smaller: -600).
    std::atomic<int> parts_gets{0};
    std::vector<int64_t> get_into_parts(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                                        const std::vector<size_t> &sizes,
                                        const std::vector<size_t> &first) override {
        parts_gets++;
        std::lock_guard<std::mutex> lk(mu);
        std::vector<int64_t> r;
        for (size_t i = 0; i < keys.size(); i++) {
            auto it = data.find(keys[i]);
            if (it == data.end()) {
                r.push_back(-704);
                continue;
            }
            size_t cap = 0;
            for (size_t j = first[i]; j < first[i + 1]; j++) cap += sizes[j];
            if (cap != it->second.size()) {
                r.push_back(cap > it->second.size() ? -800 : -600);
                continue;
            }
            size_t off = 0;
            for (size_t j = first[i]; j < first[i + 1]; j++) {
                std::memcpy(bufs[j], it->second.data() + off, sizes[j]);
                off += sizes[j];
            }
            r.push_back(int64_t(cap));
        }
        return r;
    }
    std::vector<int> put_from_parts(const mcs::StrVec &keys, const std::vector<void *> &bufs,
                                    const std::vector<size_t> &sizes,
                                    const std::vector<size_t> &first, const mcs::ReplicaOptions &,
                                    const mcs::StrVec *, bool upsert) override {
        std::lock_guard<std::mutex> lk(mu);
        std::vector<int> r;
        for (size_t i = 0; i < keys.size(); i++) {
            std::string v;
            for (size_t j = first[i]; j < first[i + 1]; j++)
                v.append(static_cast<char *>(bufs[j]), sizes[j]);
            if (upsert || !data.count(keys[i])) data[keys[i]] = v;
            r.push_back(0);
        }
        return r;
    }
    int64_t remove_all(bool) override {
        std::lock_guard<std::mutex> lk(mu);
        int64_t n = int64_t(data.size());
        data.clear();
        return n;
    }
    int64_t remove_by_regex(const std::string &pattern, bool) override {
        std::lock_guard<std::mutex> lk(mu);
        int64_t n = 0;
        for (auto it = data.begin(); it != data.end();) {
            if (it->first.find(pattern) != std::string::npos) {
                it = data.erase(it);
                n++;
            } else {
                ++it;
            }
        }
        return n;
    }
    int health_check() override { return 0; }
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

inline mcs_batch make_batch(int op, const Keys &k, void *const *bufs, const uint64_t *sizes,
                            int64_t *res, int flags = 0) {
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

struct Fixture {
    MemStore *store;
    std::unique_ptr<mcs::Engine> engine;
    explicit Fixture(mcs_lanes lanes = {}) {
        auto s = std::make_unique<MemStore>();
        store = s.get();
        engine = std::make_unique<mcs::Engine>(std::move(s), &lanes);
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
