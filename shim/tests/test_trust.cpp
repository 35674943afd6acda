// Tests of what makes the shim's answers trustworthy and its stops bounded:
// teardowns left to the background (reaper.hpp), run against the in-memory
// store of harness.hpp.  Built with -Dshim_tests=true, run under ASan+UBSan
// and TSan by scripts/sanitize.sh.
#include "../src/engine/reaper.hpp"
#include "harness.hpp"

namespace {

// A store whose teardown takes `teardown_ms` and which close() waits for at
// most `wait_ms` (negative: until it ends).
class SlowTeardown final : public MemStore {
public:
    int teardown_ms = 300;
    int wait_ms = 50;
    std::atomic<bool> ended{false};
    void teardown() override {
        std::this_thread::sleep_for(std::chrono::milliseconds(teardown_ms));
        MemStore::teardown();
        ended = true;
    }
    std::chrono::milliseconds teardown_wait() const override {
        return std::chrono::milliseconds(wait_ms);
    }
};

void test_a_slow_teardown_goes_on_in_the_background() {
    auto owned = std::make_unique<SlowTeardown>();
    SlowTeardown *store = owned.get();
    mcs_lanes lanes{};
    auto engine = std::make_unique<mcs::Engine>(std::move(owned), &lanes);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(engine->close() == MCS_OK);
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took < 250ms);
    CHECK(engine->closed());
    CHECK(engine->enter() == MCS_E_CLOSED);
    CHECK(mcs::background_teardowns() == 1);
    engine.reset();  // the engine may go first: the teardown keeps the store alive
    CHECK(mcs::wait_background_teardowns(5s));
    CHECK(mcs::background_teardowns() == 0);
    (void)store;
}

void test_a_teardown_within_its_wait_is_not_left_behind() {
    auto owned = std::make_unique<SlowTeardown>();
    SlowTeardown *store = owned.get();
    store->teardown_ms = 10;
    store->wait_ms = 2000;
    mcs_lanes lanes{};
    mcs::Engine engine(std::move(owned), &lanes);
    CHECK(engine.close() == MCS_OK);
    CHECK(store->ended.load());
    CHECK(store->teardowns.load() == 1);
    CHECK(mcs::background_teardowns() == 0);
    CHECK(engine.close() == MCS_OK);  // idempotent: torn down once
    CHECK(store->teardowns.load() == 1);
}

void test_a_negative_wait_tears_down_on_the_closing_thread() {
    auto owned = std::make_unique<SlowTeardown>();
    SlowTeardown *store = owned.get();
    store->teardown_ms = 100;
    store->wait_ms = -1;
    mcs_lanes lanes{};
    mcs::Engine engine(std::move(owned), &lanes);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(engine.close() == MCS_OK);
    CHECK(std::chrono::steady_clock::now() - t0 >= 100ms);
    CHECK(store->ended.load());
    CHECK(mcs::background_teardowns() == 0);
}

void test_many_clients_closing_at_once() {
    std::vector<std::unique_ptr<mcs::Engine>> engines;
    for (int i = 0; i < 8; i++) {
        auto s = std::make_unique<SlowTeardown>();
        s->teardown_ms = 50 + 10 * i;
        s->wait_ms = 5;
        mcs_lanes lanes{};
        engines.push_back(std::make_unique<mcs::Engine>(std::move(s), &lanes));
    }
    std::vector<std::thread> closers;
    for (auto &e : engines) closers.emplace_back([&e] { e->close(); });
    for (auto &t : closers) t.join();
    engines.clear();
    CHECK(mcs::wait_background_teardowns(5s));
    CHECK(mcs::background_teardowns() == 0);
}

}  // namespace

int main() {
    return run_tests({
        {"a_slow_teardown_goes_on_in_the_background",
         test_a_slow_teardown_goes_on_in_the_background},
        {"a_teardown_within_its_wait_is_not_left_behind",
         test_a_teardown_within_its_wait_is_not_left_behind},
        {"a_negative_wait_tears_down_on_the_closing_thread",
         test_a_negative_wait_tears_down_on_the_closing_thread},
        {"many_clients_closing_at_once", test_many_clients_closing_at_once},
    });
}
