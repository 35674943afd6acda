// Tests of the CPUs a process may use (cpus.hpp): its affinity mask, and the
// cgroup v2 quota read from a hierarchy laid out in a temporary directory.
#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "../src/engine/cpus.hpp"
#include "harness.hpp"

namespace {

struct Hierarchy {
    std::string root;
    Hierarchy() {
        char dir[] = "/tmp/mcs-cgroup-XXXXXX";
        root = mkdtemp(dir);
    }
    ~Hierarchy() { std::filesystem::remove_all(root); }
    // Writes `cpu_max` as the cpu.max of cgroup `path` (such as "/k/pod").
    void set(const std::string &path, const std::string &cpu_max) const {
        std::filesystem::create_directories(root + path);
        std::ofstream(root + path + "/cpu.max") << cpu_max << "\n";
    }
};

void test_affinity_bounds_the_usable_cpus() {
    const int all = mcs::usable_cpus();
    CHECK(all >= 1);
    CHECK(all <= int(std::thread::hardware_concurrency()));
    cpu_set_t was, one;
    CHECK(sched_getaffinity(0, sizeof was, &was) == 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &was)) {
            CPU_SET(c, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK(mcs::usable_cpus() == 1);
    CHECK(sched_setaffinity(0, sizeof was, &was) == 0);
    CHECK(mcs::usable_cpus() == all);
}

void test_a_quota_is_rounded_up_to_whole_cpus() {
    Hierarchy h;
    h.set("/a", "150000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/a\n") == 2);
    h.set("/a", "100000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/a\n") == 1);
    h.set("/a", "50000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/a\n") == 1);
}

void test_the_tightest_quota_above_the_cgroup_counts() {
    Hierarchy h;
    h.set("/k", "400000 100000");
    h.set("/k/pod", "max 100000");
    h.set("/k/pod/c", "300000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/k/pod/c\n") == 3);
    h.set("/k", "200000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/k/pod/c\n") == 2);
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/k/pod/c/\n") == 2);
}

void test_no_quota_or_no_cgroup_v2_is_no_limit() {
    Hierarchy h;
    h.set("/a", "max 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/a\n") == 0);
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/\n") == 0);  // the root has no cpu.max
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/missing\n") == 0);
    CHECK(mcs::cgroup_cpu_limit(h.root, "4:cpu,cpuacct:/a\n") == 0);  // cgroup v1 only
    CHECK(mcs::cgroup_cpu_limit(h.root, "") == 0);
    h.set("/bad", "lots 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/bad\n") == 0);
    h.set("/zero", "100000 0");
    CHECK(mcs::cgroup_cpu_limit(h.root, "0::/zero\n") == 0);
    h.set("/v", "200000 100000");
    CHECK(mcs::cgroup_cpu_limit(h.root, "12:memory:/x\n0::/v\n") == 2);
}

}  // namespace

int main() {
    return run_tests({
        {"affinity_bounds_the_usable_cpus", test_affinity_bounds_the_usable_cpus},
        {"a_quota_is_rounded_up_to_whole_cpus", test_a_quota_is_rounded_up_to_whole_cpus},
        {"the_tightest_quota_above_the_cgroup_counts",
         test_the_tightest_quota_above_the_cgroup_counts},
        {"no_quota_or_no_cgroup_v2_is_no_limit", test_no_quota_or_no_cgroup_v2_is_no_limit},
    });
}
