// The shim's own cost per call, without Mooncake: the engine over the in-memory
// store of the engine tests, timed call by call in a tight loop.  What it prints is
// the fixed cost a call adds on top of Mooncake's (the Python side's cost is
// bench/small_ops.py's), e.g.
//   build/release/shim/bench_engine
// with meson setup build/release -Dshim_tests=true -Dbuildtype=release.
#include <cinttypes>

#include "../tests/harness.hpp"

namespace {

constexpr int kCalls = 200000;

template <class F>
double us_per_call(F &&call) {
    for (int i = 0; i < kCalls / 10; i++) call();  // warm up
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; i++) call();
        auto dt = std::chrono::steady_clock::now() - t0;
        best = std::min(best, std::chrono::duration<double, std::micro>(dt).count() / kCalls);
    }
    return best;
}

}  // namespace

int main() {
    Fixture f;
    std::printf("%-34s %9s %9s %9s\n", "call (in-memory store)", "us/call", "store", "shim");
    for (int n : {1, 16, 256}) {
        std::vector<std::string> names;
        for (int i = 0; i < n; i++)
            names.push_back("bench/key-" + std::to_string(i) + "-0123456789");
        Keys k(names);
        std::vector<int64_t> res(size_t(n), 0);
        const double store = us_per_call([&] { (void)f.store->exists(names); });
        const double batch =
            us_per_call([&] { f.run(MCS_OP_EXISTS, k, nullptr, nullptr, res.data()); });
        std::printf("exists, a batch of %-15d %9.2f %9.2f %9.2f\n", n, batch, store, batch - store);
        if (n == 1) {
            const std::string &key = names[0];
            const double one = us_per_call([&] {
                f.engine->run_one(MCS_OP_EXISTS, 0, key.data(), key.size(), nullptr, 0, res.data());
            });
            std::printf("exists, run_one %19s %9.2f %9.2f %9.2f\n", "", one, store, one - store);
        }
    }
    return 0;
}
