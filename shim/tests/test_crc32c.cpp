// Tests of the shim's CRC32C (crc32c.hpp): known vectors, the hardware path
// against the software one at every length and alignment around the stream
// boundaries, and chaining.  Built with -Dshim_tests=true.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../src/engine/crc32c.hpp"

namespace {

int g_failed = 0;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::fprintf(stderr, "  CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            g_failed++;                                                                       \
        }                                                                                     \
    } while (0)

void known_vectors() {
    const char *digits = "123456789";
    CHECK(mcs::crc32c(0, digits, 9) == 0xE3069283u);
    CHECK(mcs::crc32c_sw(0, digits, 9) == 0xE3069283u);
    CHECK(mcs::crc32c(0, "", 0) == 0);
    // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xff, ascending, descending.
    unsigned char buf[32];
    std::memset(buf, 0, sizeof buf);
    CHECK(mcs::crc32c(0, buf, 32) == 0x8A9136AAu);
    std::memset(buf, 0xff, sizeof buf);
    CHECK(mcs::crc32c(0, buf, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = static_cast<unsigned char>(i);
    CHECK(mcs::crc32c(0, buf, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = static_cast<unsigned char>(31 - i);
    CHECK(mcs::crc32c(0, buf, 32) == 0x113FDB5Cu);
}

void hardware_matches_software() {
    std::mt19937 rng(7);
    std::vector<unsigned char> data(3 * 8192 * 2 + 4096);
    for (auto &b : data) b = static_cast<unsigned char>(rng());
    const size_t lengths[] = {0,    1,    7,    8,     9,     255,   256,   767,   768,  769,
                              1000, 4096, 8191, 24575, 24576, 24577, 30000, 49152, 50000};
    for (size_t off = 0; off < 8; off++)
        for (size_t n : lengths) {
            if (off + n > data.size()) continue;
            uint32_t hw = mcs::crc32c(0, data.data() + off, n);
            uint32_t sw = mcs::crc32c_sw(0, data.data() + off, n);
            if (hw != sw) std::fprintf(stderr, "  off %zu len %zu: %08x != %08x\n", off, n, hw, sw);
            CHECK(hw == sw);
        }
}

void chaining_is_concatenation() {
    std::vector<unsigned char> data(100000);
    for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<unsigned char>(i * 31 + 7);
    uint32_t whole = mcs::crc32c(0, data.data(), data.size());
    for (size_t cut : {size_t(0), size_t(1), size_t(13), size_t(8192), size_t(65536)}) {
        uint32_t a = mcs::crc32c(0, data.data(), cut);
        CHECK(mcs::crc32c(a, data.data() + cut, data.size() - cut) == whole);
    }
}

}  // namespace

int main() {
    std::printf("crc32c uses the crc32 instruction: %s\n", mcs::crc32c_hw() ? "yes" : "no");
    struct {
        const char *name;
        void (*fn)();
    } tests[] = {{"known_vectors", known_vectors},
                 {"hardware_matches_software", hardware_matches_software},
                 {"chaining_is_concatenation", chaining_is_concatenation}};
    int failed = 0;
    for (auto &t : tests) {
        int before = g_failed;
        t.fn();
        bool ok = g_failed == before;
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", t.name);
        failed += !ok;
    }
    return failed ? 1 : 0;
}
