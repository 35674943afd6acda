// The CPUs this process may use: what a spinning waiter (spin.hpp) sizes
// itself by.  The host's CPU count overstates them in a container or under
// taskset: a process given two CPUs of a 64-CPU host must behave as on two.
#pragma once

#include <string>

namespace mcs {

// The fewest of: the CPUs of this process's affinity mask, and its cgroup's
// CPU quota (cgroup v2 cpu.max, rounded up, over the process's cgroup and
// every cgroup above it).  At least 1.
int usable_cpus();

// The cgroup v2 CPU limit, in whole CPUs rounded up, of the cgroup named in
// `proc_cgroup` (the text of /proc/self/cgroup) under the hierarchy mounted at
// `root`: the tightest cpu.max of that cgroup and its ancestors.  0 when none
// sets a quota or nothing can be read (cgroup v1, no cgroupfs).
int cgroup_cpu_limit(const std::string &root, const std::string &proc_cgroup);

}  // namespace mcs
