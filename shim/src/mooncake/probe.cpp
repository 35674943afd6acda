// Validation and the fail-fast probe of the master and metadata addresses,
// the protocol, and cluster_id (see probe.hpp).
#include "probe.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "../engine/engine.hpp"
#include "fds.hpp"
#include "mooncake_backend.hpp"

namespace mcs {
namespace {

using Deadline = std::chrono::steady_clock::time_point;

// What a newly elected HA leader writes into master_view before its address
// (Mooncake PR #3743): "__mooncake_service_warming__:<lease id>".
constexpr const char *kWarmingPrefix = "__mooncake_service_warming__";
// Mooncake's cluster id when neither the config nor MC_STORE_CLUSTER_ID gives one.
constexpr const char *kDefaultClusterId = "mooncake_cluster";

// A value as messages quote it: control bytes escaped, long ones cut.
std::string shown(const std::string &v) {
    std::string out = "'";
    for (unsigned char ch : v.substr(0, 200)) {
        if (ch < 0x20 || ch == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", ch);
            out += buf;
        } else {
            out += char(ch);
        }
    }
    return out + (v.size() > 200 ? "...'" : "'");
}

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
        if (fd < 0) {
            why = strerror(errno);
            continue;
        }
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
    if (!split_host_port(addr, host, port)) return;  // validated before (http:// URLs get :80)
    if (!tcp_probe(host, port, timeout_ms, why)) {
        std::string fds = fd_shortage();  // not the address's fault
        if (!fds.empty())
            throw Error(MCS_E_INTERNAL, "cannot probe " + what + " " + addr + ": " + fds);
        throw Error(MCS_E_UNREACHABLE, what + " " + addr + " is unreachable (" + why + ")");
    }
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

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64_encode(const std::string &in) {
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        uint32_t v =
            uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
    }
    if (i < in.size()) {
        uint32_t v = uint32_t(uint8_t(in[i])) << 16;
        if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::string b64_decode(const std::string &in) {
    std::string out;
    uint32_t v = 0;
    int bits = 0;
    for (char ch : in) {
        const char *at = std::strchr(kB64, ch);
        if (ch == '\0' || at == nullptr) break;  // '=' or the end
        v = v << 6 | uint32_t(at - kB64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += char((v >> bits) & 0xff);
        }
    }
    return out;
}

// Reads `key` from the etcd at host:port through its v3 JSON gateway (POST
// /v3/kv/range).  True with `value` set, or with `absent` when etcd has no such
// key; false (with `why`) when etcd gave no usable answer in time.
bool etcd_read(const std::string &host, const std::string &port, const std::string &key,
               Deadline deadline, std::string &value, bool &absent, std::string &why) {
    int fd = tcp_connect(host, port, remaining_ms(deadline), why);
    if (fd < 0) return false;
    std::string body = "{\"key\":\"" + b64_encode(key) + "\"}";
    std::string request =
        "POST /v3/kv/range HTTP/1.0\r\nHost: " + host +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    bool sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size());
    std::string reply;
    while (sent && reply.size() < 65536) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, remaining_ms(deadline)) != 1) break;
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        reply.append(buf, size_t(n));
    }
    ::close(fd);
    auto head_end = reply.find("\r\n\r\n");
    if (reply.rfind("HTTP/1.", 0) != 0 || reply.find(" 200 ") > 12 ||
        head_end == std::string::npos) {
        why = "no answer to a read of " + key;
        return false;
    }
    std::string json = reply.substr(head_end + 4);
    absent = json.find("\"kvs\"") == std::string::npos;
    if (absent) return true;
    auto at = json.find("\"value\":\"");
    if (at == std::string::npos) {
        value.clear();
        return true;
    }
    at += 9;
    value = b64_decode(json.substr(at, json.find('"', at) - at));
    return true;
}

// The endpoints of etcd://host:port[;host:port...]; throws for none or one
// without a port.
std::vector<std::string> etcd_endpoints(const std::string &what, const std::string &value) {
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
        throw Error(
            MCS_E_INVALID_ARG,
            what + " " + shown(value) + " names no etcd endpoint (etcd://host:port[;host:port])");
    for (const auto &ep : endpoints) {
        std::string host, port;
        if (!split_host_port(ep, host, port))
            throw Error(MCS_E_INVALID_ARG, what + " " + shown(value) + ": etcd endpoint " +
                                               shown(ep) + " has no port");
    }
    return endpoints;
}

// Waits, until `deadline`, while the etcd at host:port holds Mooncake's warming
// placeholder in `view_key` (see probe.hpp); throws MCS_E_UNREACHABLE if it
// still does then.  Any other answer, or none, is left to Mooncake.
void wait_out_warming(const std::string &what, const std::string &value, const std::string &ep,
                      const std::string &view_key, Deadline deadline) {
    std::string host, port;
    split_host_port(ep, host, port);
    std::string seen;
    for (;;) {
        std::string view, why;
        bool absent = false;
        if (!etcd_read(host, port, view_key, deadline, view, absent, why)) {
            if (seen.empty()) return;
            break;  // out of time while it was warming up
        }
        if (absent || view.rfind(kWarmingPrefix, 0) != 0) return;
        seen = view;
        if (remaining_ms(deadline) <= 100) break;
        ::poll(nullptr, 0, 100);
    }
    throw Error(MCS_E_UNREACHABLE,
                what + " " + value + ": no leader yet: etcd " + ep + " holds " + shown(seen) +
                    " in " + view_key +
                    ", the placeholder a newly elected master writes before its address while it "
                    "warms up; retry once it has written its address (a few seconds)");
}

// Probes etcd://host:port[;host:port...]: passes if one endpoint answers as
// etcd (and, with a view key, does not name a warming leader).
void probe_etcd(const std::string &what, const std::string &value, int timeout_ms,
                const std::string &view_key) {
    std::vector<std::string> endpoints = etcd_endpoints(what, value);
    Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::string reasons;
    for (const auto &ep : endpoints) {
        std::string host, port, why;
        split_host_port(ep, host, port);
        if (etcd_probe(host, port, deadline, why)) {
            if (!view_key.empty()) wait_out_warming(what, value, ep, view_key, deadline);
            return;
        }
        reasons += (reasons.empty() ? "" : "; ") + ep + ": " + why;
    }
    std::string fds = fd_shortage();
    if (!fds.empty())
        throw Error(MCS_E_INTERNAL, "cannot probe " + what + " " + value + ": " + fds);
    throw Error(MCS_E_UNREACHABLE, what + " " + value + " is unreachable (" + reasons + ")");
}

void probe_address(const std::string &what, const std::string &value, int timeout_ms,
                   const std::string &view_key = "") {
    if (value.rfind("etcd://", 0) == 0) {
        probe_etcd(what, value, timeout_ms, view_key);
    } else if (value.rfind("http://", 0) == 0) {
        std::string rest = value.substr(7);
        std::string hostport = rest.substr(0, rest.find('/'));
        if (hostport.find(':') == std::string::npos) hostport += ":80";
        probe(what, hostport, timeout_ms);
    } else if (value.find("://") == std::string::npos) {
        probe(what, value, timeout_ms);  // host:port (validated before)
    }
}

// ---- validation ---------------------------------------------------------------

[[noreturn]] void invalid(const char *key, const std::string &value, const std::string &why) {
    throw Error(MCS_E_INVALID_ARG, std::string(key) + " " + shown(value) + " " + why);
}

bool has_space(const std::string &v) {
    return std::any_of(v.begin(), v.end(),
                       [](unsigned char ch) { return std::isspace(ch) || ch < 0x20; });
}

bool valid_port(const std::string &port) {
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
        return false;
    long n = std::strtol(port.c_str(), nullptr, 10);
    return n >= 1 && n <= 65535;
}

constexpr const char *kMasterForms =
    "give host:port (e.g. 127.0.0.1:50051) or an HA entry etcd://host:port[;host:port...]";

void validate_host_port(const char *key, const std::string &value, const std::string &hp) {
    std::string host, port;
    if (!split_host_port(hp, host, port)) {
        if (hp.find(':') == std::string::npos)
            invalid(key, value, std::string("has no port: ") + kMasterForms);
        invalid(key, value, std::string("is not host:port: ") + kMasterForms);
    }
    if (!valid_port(port)) invalid(key, value, "has port '" + port + "', which is not 1..65535");
}

void validate_master(const std::string &v) {
    const char *key = "master_server_addr";
    if (std::all_of(v.begin(), v.end(), [](unsigned char ch) { return std::isspace(ch); }))
        invalid(key, v, std::string("is empty: ") + kMasterForms);
    if (has_space(v)) invalid(key, v, std::string("contains white space: ") + kMasterForms);
    size_t scheme = v.find("://");
    if (scheme == std::string::npos) return validate_host_port(key, v, v);
    std::string backend = v.substr(0, scheme), rest = v.substr(scheme + 3);
    if (backend == "etcd") {
        for (const auto &ep : etcd_endpoints(key, v)) validate_host_port(key, v, ep);
    } else if (backend == "redis" || backend == "k8s") {
        if (rest.empty()) invalid(key, v, "names no " + backend + " endpoint");
    } else {
        invalid(key, v,
                "names the HA backend '" + backend +
                    "', which Mooncake does not know (etcd://, redis:// or k8s://; a plain "
                    "master is host:port, without a scheme)");
    }
}

constexpr const char *kProtocols[] = {"tcp",          "rdma",         "efa",     "cxi",
                                      "cxl",          "ub",           "ubshmem", "ascend",
                                      "sunrise_link", "nvlink_intra", "rpc_only"};

void validate_protocol(const std::string &v) {
    for (const char *p : kProtocols)
        if (v == p) return;
    std::string lower = v;
    for (auto &ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    for (const char *p : kProtocols)
        if (lower == p) invalid("protocol", v, std::string("must be lower case: '") + p + "'");
    std::string known;
    for (const char *p : kProtocols) known += std::string(known.empty() ? "" : ", ") + p;
    invalid("protocol", v,
            "is not a transport Mooncake knows (" + known +
                "; tcp or rdma "
                "on the PyPI wheels)");
}

void validate_metadata(const std::string &v) {
    if (v.empty())
        invalid("metadata_server", v,
                "is empty: give http://host:port/metadata, etcd://... or "
                "P2PHANDSHAKE");
    if (has_space(v)) invalid("metadata_server", v, "contains white space");
}

void validate(const ConfigMap &cfg) {
    auto it = cfg.find("master_server_addr");
    if (it != cfg.end()) validate_master(it->second);
    it = cfg.find("protocol");
    if (it != cfg.end()) validate_protocol(it->second);
    it = cfg.find("metadata_server");
    if (it != cfg.end()) validate_metadata(it->second);
}

// ---- process-wide settings -----------------------------------------------------
// Mooncake keeps two things once per process: the cluster id it read from
// MC_STORE_CLUSTER_ID, and its etcd connection (EtcdHelper connects once and
// refuses other endpoints).  The first client that reaches Mooncake's setup
// fixes them; a later client asking for others is refused up front.

std::mutex g_process_mu;
bool g_cluster_set = false;  // a client of this process used a cluster id
std::string g_cluster_id;    // ... this one ("" is Mooncake's default)
std::string g_etcd;          // the etcd endpoints of this process's HA master ("" none)

// The cluster id a client of `cfg` uses, if it uses one: its cluster_id, or
// for an HA master the environment's.
bool cluster_id_of(const ConfigMap &cfg, std::string &id, bool &given) {
    auto it = cfg.find("cluster_id");
    given = it != cfg.end() && !it->second.empty();
    if (given) {
        id = it->second;
        return true;
    }
    it = cfg.find("master_server_addr");
    if (it == cfg.end() || it->second.find("://") == std::string::npos) return false;
    const char *env = std::getenv("MC_STORE_CLUSTER_ID");
    id = env ? env : "";
    return true;
}

// The endpoint list of an etcd:// master ("" for any other master).
std::string etcd_of(const ConfigMap &cfg) {
    auto it = cfg.find("master_server_addr");
    if (it == cfg.end() || it->second.rfind("etcd://", 0) != 0) return "";
    return it->second.substr(7);
}

// The etcd key an HA client reads its leader from (Mooncake's
// EtcdLeaderCoordinator): mooncake-store/<cluster id>/master_view, the id
// being the config's, else MC_STORE_CLUSTER_ID, else Mooncake's default.
std::string master_view_key(const ConfigMap &cfg) {
    std::string id;
    bool given = false;
    if (!cluster_id_of(cfg, id, given) || id.empty()) id = kDefaultClusterId;
    if (id.back() == '/') id.pop_back();
    return "mooncake-store/" + id + "/master_view";
}

constexpr const char *kOwnProcess = "; clients of another cluster need a process of their own";

// With g_process_mu held.
void check_process_wide_locked(const ConfigMap &cfg) {
    std::string id, etcd = etcd_of(cfg);
    bool given = false;
    if (!g_etcd.empty() && !etcd.empty() && etcd != g_etcd)
        throw Error(MCS_E_INVALID_ARG, "master_server_addr " + shown("etcd://" + etcd) +
                                           ": this process's Mooncake is already connected to "
                                           "etcd " +
                                           shown(g_etcd) +
                                           " (Mooncake keeps one etcd connection per process)" +
                                           kOwnProcess);
    if (!cluster_id_of(cfg, id, given) || !g_cluster_set || id == g_cluster_id) return;
    auto name = [](const std::string &c) {
        return c.empty() ? std::string("Mooncake's default cluster id") : "cluster id " + shown(c);
    };
    throw Error(MCS_E_INVALID_ARG,
                "cluster_id: this client needs " + name(id) +
                    ", but this process's Mooncake clients already use " + name(g_cluster_id) +
                    " (Mooncake reads its cluster id, MC_STORE_CLUSTER_ID, once per process)" +
                    kOwnProcess);
}

}  // namespace

void prepare_connection(const ConfigMap &cfg, int probe_timeout_ms) {
    validate(cfg);
    {
        std::lock_guard<std::mutex> lk(g_process_mu);
        check_process_wide_locked(cfg);
    }
    if (probe_timeout_ms < 0) return;
    int t = probe_timeout_ms ? probe_timeout_ms : 2000;
    auto it = cfg.find("master_server_addr");
    probe_address("master_server_addr", it != cfg.end() ? it->second : "127.0.0.1:50051", t,
                  master_view_key(cfg));
    it = cfg.find("metadata_server");
    // Only the URL forms: a bare value is Mooncake's (P2PHANDSHAKE, or etcd by default).
    if (it != cfg.end() && it->second.find("://") != std::string::npos)
        probe_address("metadata_server", it->second, t);
}

int prepare_client_service(const std::string &addr, int probe_timeout_ms) {
    const char *key = "server_address";
    std::string host, port, why;
    if (addr.empty() || has_space(addr))
        invalid(key, addr, "is empty or contains white space: give the client service's host:port");
    if (!split_host_port(addr, host, port))
        invalid(key, addr,
                "is not host:port (the client service's RPC address, e.g. 127.0.0.1:50052)");
    if (!valid_port(port)) invalid(key, addr, "has port '" + port + "', which is not 1..65535");
    if (probe_timeout_ms >= 0 &&
        !tcp_probe(host, port, probe_timeout_ms ? probe_timeout_ms : 2000, why))
        throw Error(MCS_E_UNREACHABLE,
                    std::string("the client service at ") + addr + " is unreachable (" + why + ")");
    return int(std::strtol(port.c_str(), nullptr, 10));
}

void commit_process_wide(const ConfigMap &cfg) {
    std::lock_guard<std::mutex> lk(g_process_mu);
    check_process_wide_locked(cfg);
    std::string id, etcd = etcd_of(cfg);
    bool given = false;
    if (cluster_id_of(cfg, id, given)) {
        if (given) ::setenv("MC_STORE_CLUSTER_ID", id.c_str(), 1);
        g_cluster_set = true;
        g_cluster_id = id;
    }
    if (!etcd.empty()) g_etcd = etcd;
}

}  // namespace mcs
