// Whether the process has run out of file descriptors, and the words to say
// so: Mooncake reports it as whatever failed for want of one (a setup
// INTERNAL_ERROR, a TRANSFER_FAIL), and a probe's socket() as an address
// that cannot be reached.
#pragma once

#include <string>

namespace mcs {

// "" while a file descriptor can be opened; else why not, with the limit and
// what to do ("the process has no free file descriptors (limit 160): ...").
std::string fd_shortage();

// File descriptors the process may still open (its limit less those open), or
// -1 if unknown (no limit, or /proc unreadable).
long free_fds();
// What a failed setup says when it started with fewer free descriptors than
// Mooncake's client takes (~10-12; it closes them again as it fails): ""
// when it had enough.
std::string setup_fd_note(long free_before);

}  // namespace mcs
