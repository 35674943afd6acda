// The fail-fast probe of the master and metadata addresses, and cluster_id
// (see probe.hpp).
#include "probe.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "internal.hpp"

namespace mcs {
namespace {

using Deadline = std::chrono::steady_clock::time_point;

int remaining_ms(Deadline deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return left.count() > 0 ? int(left.count()) : 0;
}

// A connected TCP socket to host:port within timeout_ms, or -1 with `why`.
int tcp_connect(const std::string &host, const std::string &port, int timeout_ms,
                std::string &why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *res = nullptr;
    int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (gai != 0) {
        why = std::string("cannot resolve: ") + gai_strerror(gai);
        return -1;
    }
    int connected = -1;
    why = "no address";
    for (addrinfo *ai = res; ai && connected < 0; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc == 0) {
            connected = fd;
            continue;
        }
        if (errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            int pr = poll(&p, 1, timeout_ms);
            if (pr == 1) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err == 0) {
                    connected = fd;
                    continue;
                }
                why = strerror(err);
            } else {
                why = "no answer within " + std::to_string(timeout_ms) + " ms";
            }
        } else {
            why = strerror(errno);
        }
        ::close(fd);
    }
    freeaddrinfo(res);
    return connected;
}

// Waits up to timeout_ms for a TCP connection to host:port.
bool tcp_probe(const std::string &host, const std::string &port, int timeout_ms, std::string &why) {
    int fd = tcp_connect(host, port, timeout_ms, why);
    if (fd < 0) return false;
    ::close(fd);
    return true;
}

// Splits "host:port" (or "[v6]:port"); false if there is no port.
bool split_host_port(const std::string &addr, std::string &host, std::string &port) {
    if (!addr.empty() && addr[0] == '[') {
        auto close = addr.find(']');
        if (close == std::string::npos || close + 1 >= addr.size() || addr[close + 1] != ':')
            return false;
        host = addr.substr(1, close - 1);
        port = addr.substr(close + 2);
        return !port.empty();
    }
    auto colon = addr.rfind(':');
    if (colon == std::string::npos) return false;
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
    return !host.empty() && !port.empty();
}

void probe(const std::string &what, const std::string &addr, int timeout_ms) {
    std::string host, port, why;
    if (!split_host_port(addr, host, port)) return;  // let Mooncake judge it
    if (!tcp_probe(host, port, timeout_ms, why))
        throw Error(MCS_E_UNREACHABLE, what + " " + addr + " is unreachable (" + why + ")");
}

// True if host:port answers an HTTP GET of /health the way etcd does.
bool etcd_probe(const std::string &host, const std::string &port, Deadline deadline,
                std::string &why) {
    int fd = tcp_connect(host, port, remaining_ms(deadline), why);
    if (fd < 0) return false;
    std::string request = "GET /health HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    bool sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size());
    std::string reply;
    while (sent && reply.size() < 4096) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, remaining_ms(deadline)) != 1) {
            why = "connected, but no HTTP answer in time (is it etcd?)";
            break;
        }
        char buf[1024];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        reply.append(buf, size_t(n));
    }
    ::close(fd);
    if (!sent) {
        why = "connected, but the request could not be sent";
        return false;
    }
    if (reply.rfind("HTTP/1.", 0) == 0 && reply.find("\"health\"") != std::string::npos)
        return true;
    if (why.empty() || why == "no address")
        why = reply.empty() ? "connection closed without an answer (is it etcd?)"
                            : "answered, but not like etcd's /health";
    return false;
}

// Probes etcd://host:port[;host:port...]: passes if one endpoint answers as etcd.
void probe_etcd(const std::string &what, const std::string &value, int timeout_ms) {
    std::string list = value.substr(7);  // after "etcd://"
    std::vector<std::string> endpoints;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(';', start);
        if (end == std::string::npos) end = list.size();
        std::string ep = list.substr(start, end - start);
        if (ep.rfind("etcd://", 0) == 0) ep = ep.substr(7);
        if (ep.rfind("http://", 0) == 0) ep = ep.substr(7);
        if (!ep.empty()) endpoints.push_back(ep);
        start = end + 1;
    }
    if (endpoints.empty())
        throw Error(MCS_E_INVALID_ARG,
                    what + " " + value + " names no etcd endpoint (etcd://host:port[;host:port])");
    Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::string reasons;
    for (const auto &ep : endpoints) {
        std::string host, port, why;
        if (!split_host_port(ep, host, port))
            throw Error(MCS_E_INVALID_ARG,
                        what + " " + value + ": etcd endpoint '" + ep + "' has no port");
        if (etcd_probe(host, port, deadline, why)) return;
        reasons += (reasons.empty() ? "" : "; ") + ep + ": " + why;
    }
    throw Error(MCS_E_UNREACHABLE, what + " " + value + " is unreachable (" + reasons + ")");
}

void probe_address(const std::string &what, const std::string &value, int timeout_ms) {
    if (value.rfind("etcd://", 0) == 0) {
        probe_etcd(what, value, timeout_ms);
    } else if (value.rfind("http://", 0) == 0) {
        std::string rest = value.substr(7);
        std::string hostport = rest.substr(0, rest.find('/'));
        if (hostport.find(':') == std::string::npos) hostport += ":80";
        probe(what, hostport, timeout_ms);
    } else if (value.find("://") == std::string::npos) {
        probe(what, value, timeout_ms);  // host:port; anything else is Mooncake's to judge
    }
}

}  // namespace

void prepare_connection(const std::unordered_map<std::string, std::string> &cfg,
                        int probe_timeout_ms) {
    auto id = cfg.find("cluster_id");
    if (id != cfg.end() && !id->second.empty())
        ::setenv("MC_STORE_CLUSTER_ID", id->second.c_str(), 1);
    if (probe_timeout_ms < 0) return;
    int t = probe_timeout_ms ? probe_timeout_ms : 2000;
    auto it = cfg.find("master_server_addr");
    probe_address("master_server_addr", it != cfg.end() ? it->second : "127.0.0.1:50051", t);
    it = cfg.find("metadata_server");
    // Only the URL forms: a bare value is Mooncake's (P2PHANDSHAKE, or etcd by default).
    if (it != cfg.end() && it->second.find("://") != std::string::npos)
        probe_address("metadata_server", it->second, t);
}

}  // namespace mcs
