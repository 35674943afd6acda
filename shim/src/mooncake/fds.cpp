// fds.hpp: one open of /dev/null tells whether a descriptor is free.
#include "fds.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

namespace mcs {

std::string fd_shortage() {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ::close(fd);
        return {};
    }
    if (errno == ENFILE) return "the system has no free file descriptors (ENFILE)";
    if (errno != EMFILE) return {};
    rlimit lim{};
    std::string limit = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                            ? " (limit " + std::to_string(lim.rlim_cur) + ")"
                            : std::string();
    return "the process has no free file descriptors" + limit +
           ": close clients or raise the limit (ulimit -n)";
}

long free_fds() {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return -1;
    DIR *d = ::opendir("/proc/self/fd");
    if (!d) return errno == EMFILE ? 0 : -1;
    long open = -1;  // the directory's own descriptor is listed too
    while (dirent *e = ::readdir(d))
        if (e->d_name[0] != '.') open++;
    ::closedir(d);
    return long(lim.rlim_cur) - open;
}

std::string setup_fd_note(long free_before) {
    constexpr long kSetupFds = 16;
    if (free_before < 0 || free_before >= kSetupFds) return fd_shortage();
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    return "the process had " + std::to_string(free_before) +
           " free file descriptors when the setup began (limit " + std::to_string(lim.rlim_cur) +
           ") and a Mooncake client takes about 12: the likely cause; close clients or raise "
           "the limit (ulimit -n)";
}

}  // namespace mcs
