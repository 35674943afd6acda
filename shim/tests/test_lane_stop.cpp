// Tests that a lane's stop always returns: thousands of small batches of
// every op queued behind each other, merged small reads waiting their turn,
// and close() called at random points while they drain, in many rounds.
// Built with -Dshim_tests=true, run under ASan+UBSan and TSan by
// scripts/sanitize.sh.  A close that does not return within its watchdog
// aborts the binary (a hang here is the bug this file guards against).
#include <array>
#include <condition_variable>
#include <cstdlib>

#include "harness.hpp"

namespace {

// Each call takes a little while, so that queued small reads pile up behind
// the one running and the workers go back to sleep on an unrunnable queue.
class SlowStore final : public MemStore {
public:
    std::vector<int> exists(const mcs::StrVec &keys) override {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        return MemStore::exists(keys);
    }
    int64_t size(const std::string &key) override {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        return MemStore::size(key);
    }
};

// Aborts the process if `fn` has not returned within `limit`.
template <class Fn>
void within(std::chrono::milliseconds limit, const char *what, Fn &&fn) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread watchdog([&] {
        std::unique_lock<std::mutex> lk(mu);
        if (!cv.wait_for(lk, limit, [&] { return done; })) {
            std::fprintf(stderr, "  HANG: %s did not return within %lld ms\n", what,
                         static_cast<long long>(limit.count()));
            std::abort();
        }
    });
    fn();
    {
        std::lock_guard<std::mutex> lk(mu);
        done = true;
    }
    cv.notify_all();
    watchdog.join();
}

struct Round {
    std::vector<Keys> keys;
    std::vector<std::array<int64_t, 1>> results;
    char value[8] = "value!!";
    void *bufs[1] = {value};
    uint64_t sizes[1] = {7};
};

// Queues `n` one-key batches cycling through every op (small reads most of
// all, since they wait for each other), then closes after `close_after`
// submits from another thread, racing the drain.
void one_round(std::mt19937 &rng, const mcs_lanes &lanes, int n) {
    auto owned = std::make_unique<SlowStore>();
    mcs::Engine engine(std::move(owned), &lanes);
    Round r;
    r.keys.reserve(size_t(n));
    r.results.resize(size_t(n));
    for (int i = 0; i < n; i++)
        r.keys.emplace_back(std::vector<std::string>{"k" + std::to_string(i % 37)});
    static const int ops[] = {MCS_OP_EXISTS, MCS_OP_EXISTS, MCS_OP_EXISTS, MCS_OP_SIZE,
                              MCS_OP_GET,    MCS_OP_PUT,    MCS_OP_UPSERT, MCS_OP_REMOVE};
    const int close_after = int(rng() % uint32_t(n + 1));
    std::atomic<int> submitted{0};
    std::thread closer([&] {
        while (submitted.load() < close_after) std::this_thread::yield();
        within(10s, "close() during the drain", [&] { engine.close(); });
    });
    char buf[16];
    for (int i = 0; i < n; i++) {
        int op = ops[rng() % (sizeof ops / sizeof *ops)];
        void *bufs[1] = {op == MCS_OP_GET ? static_cast<void *>(buf) : r.value};
        uint64_t sizes[1] = {op == MCS_OP_GET ? sizeof buf : 7};
        bool keys_only = op == MCS_OP_EXISTS || op == MCS_OP_SIZE || op == MCS_OP_REMOVE;
        mcs_batch b = make_batch(op, r.keys[size_t(i)], keys_only ? nullptr : bufs,
                                 keys_only ? nullptr : sizes, r.results[size_t(i)].data());
        uint64_t id = 0;
        try {
            engine.submit(b, false, &id);
        } catch (const mcs::Error &e) {
            CHECK(e.code == MCS_E_CLOSED || e.code == MCS_E_QUEUE_FULL);
        }
        submitted++;
    }
    closer.join();
    within(10s, "a second close()", [&] { engine.close(); });
}

void rounds(const char *what, mcs_lanes lanes, int count, int n) {
    std::mt19937 rng(12345);
    for (int i = 0; i < count; i++) one_round(rng, lanes, n);
    (void)what;
}

void test_close_returns_with_small_batches_queued_on_the_shared_pool() {
    mcs_lanes lanes{};
    lanes.num_workers = 4;
    rounds("shared", lanes, 60, 300);
}

void test_close_returns_with_small_batches_queued_on_per_op_lanes() {
    mcs_lanes lanes{};
    lanes.num_workers = 2;
    lanes.lookup = 3;
    lanes.retrieve = 2;
    lanes.store = 2;
    lanes.del = 1;
    rounds("per-op", lanes, 60, 300);
}

void test_close_returns_with_thousands_queued_and_large_merges() {
    mcs_lanes lanes{};
    lanes.num_workers = 8;
    lanes.queue_capacity = 4096;
    lanes.coalesce_keys = 512;
    rounds("large", lanes, 8, 3000);
}

// The reported case: many one-key exists batches, then close() at once on the
// submitting thread (the queue is full of small reads that wait their turn).
void test_close_right_after_300_exists_submits() {
    for (int round = 0; round < 100; round++) {
        mcs_lanes lanes{};
        auto owned = std::make_unique<SlowStore>();
        mcs::Engine engine(std::move(owned), &lanes);
        Keys k({"e"});
        std::vector<std::array<int64_t, 1>> res(300);
        for (auto &slot : res) {
            uint64_t id = 0;
            CHECK(engine.submit(make_batch(MCS_OP_EXISTS, k, nullptr, nullptr, slot.data()), false,
                                &id) == MCS_OK);
        }
        within(10s, "close() after 300 exists submits", [&] { engine.close(); });
        mcs_completion c[512];
        CHECK(engine.drain(c, 512, sizeof(mcs_completion)) == 300);  // none lost
    }
}

}  // namespace

int main() {
    return run_tests({
        {"close_right_after_300_exists_submits", test_close_right_after_300_exists_submits},
        {"close_returns_with_small_batches_queued_on_the_shared_pool",
         test_close_returns_with_small_batches_queued_on_the_shared_pool},
        {"close_returns_with_small_batches_queued_on_per_op_lanes",
         test_close_returns_with_small_batches_queued_on_per_op_lanes},
        {"close_returns_with_thousands_queued_and_large_merges",
         test_close_returns_with_thousands_queued_and_large_merges},
    });
}
