#include "cpus.hpp"

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace mcs {

namespace {

// Whole CPUs (rounded up) of one cpu.max file ("<quota> <period>", quota
// "max" for none); 0 for no quota or an unreadable file.
int quota_cpus(const std::string &path) {
    std::ifstream in(path);
    std::string quota;
    long period = 0;
    if (!(in >> quota >> period) || period <= 0) return 0;
    char *end = nullptr;
    const long q = std::strtol(quota.c_str(), &end, 10);
    if (end == quota.c_str() || *end || q <= 0) return 0;  // "max": no quota
    const long cpus = (q + period - 1) / period;
    return cpus > 1 << 20 ? 1 << 20 : int(cpus);
}

std::string read_file(const char *path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

int cgroup_cpu_limit(const std::string &root, const std::string &proc_cgroup) {
    // cgroup v2's line is "0::<path>"; v1 controllers have other numbers.
    std::istringstream lines(proc_cgroup);
    std::string line, path;
    bool found = false;
    while (std::getline(lines, line))
        if (line.rfind("0::", 0) == 0) {
            path = line.substr(3);
            found = true;
            break;
        }
    if (!found) return 0;
    while (!path.empty() && path.back() == '/') path.pop_back();
    int limit = 0;
    for (;;) {  // the cgroup, then each one above it, up to the root
        const int cpus = quota_cpus(root + path + "/cpu.max");
        if (cpus > 0 && (limit == 0 || cpus < limit)) limit = cpus;
        if (path.empty()) break;
        path.erase(path.rfind('/'));
    }
    return limit;
}

int usable_cpus() {
    int n = int(std::thread::hardware_concurrency());
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    const int quota = cgroup_cpu_limit("/sys/fs/cgroup", read_file("/proc/self/cgroup"));
    if (quota > 0 && quota < n) n = quota;
    return n > 0 ? n : 1;
}

}  // namespace mcs
