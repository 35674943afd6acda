// libmcs_loopback.so: an LD_PRELOAD library that keeps Mooncake's listening
// sockets on one address.
//
// Mooncake 0.3.13.post1 binds its transfer-engine listeners (the TCP
// transport's acceptor, the handshake listener, the client's RPC port probe)
// and the master's built-in metadata HTTP server to the wildcard address,
// whatever MC_TCP_BIND_ADDRESS or a host flag says.  With this library
// preloaded and MCS_BIND_ADDRESS set to an IPv4 address, a bind() to 0.0.0.0
// becomes a bind() to that address, and a bind() to :: (dual stack) becomes
// one to the IPv4-mapped form of it (::ffff:a.b.c.d), which serves the same
// IPv4 clients.  Binds to a specific address, and every other call, pass
// through untouched.  Without MCS_BIND_ADDRESS it changes nothing.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

using BindFn = int (*)(int, const sockaddr *, socklen_t);

BindFn real_bind() {
    static std::atomic<BindFn> fn{nullptr};
    BindFn f = fn.load(std::memory_order_acquire);
    if (!f) {
        f = reinterpret_cast<BindFn>(dlsym(RTLD_NEXT, "bind"));
        fn.store(f, std::memory_order_release);
    }
    return f;
}

// The address from MCS_BIND_ADDRESS, read once; false if unset or invalid.
bool wanted(in_addr &out) {
    static const struct Wanted {
        bool ok = false;
        in_addr addr{};
        Wanted() {
            const char *text = std::getenv("MCS_BIND_ADDRESS");
            ok = text && inet_pton(AF_INET, text, &addr) == 1;
        }
    } w;
    out = w.addr;
    return w.ok;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int bind(int fd, const sockaddr *addr,
                                                           socklen_t len) {
    BindFn next = real_bind();
    in_addr want{};
    if (!next || !addr || !wanted(want)) return next ? next(fd, addr, len) : -1;
    if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        sockaddr_in a;
        std::memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr = want;
            return next(fd, reinterpret_cast<const sockaddr *>(&a), sizeof a);
        }
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        sockaddr_in6 a;
        std::memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            std::memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
            a.sin6_addr.s6_addr[10] = 0xff;
            a.sin6_addr.s6_addr[11] = 0xff;
            std::memcpy(&a.sin6_addr.s6_addr[12], &want, 4);
            return next(fd, reinterpret_cast<const sockaddr *>(&a), sizeof a);
        }
    }
    return next(fd, addr, len);
}
