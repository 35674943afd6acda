// CRC32C in software (slicing by 8) and with SSE4.2's crc32 instruction.
//
// Everything works on the raw register (the CRC before its final inversion):
// consuming bytes D from register s gives R(s, D) = R(s, zeros) ^ R(0, D),
// and R(s, |D| zero bytes) is s times x^(8|D|) modulo the polynomial, a linear
// map of s kept as four 256-entry tables.  The crc32 instruction has a latency
// of 3 cycles and a throughput of 1 per cycle, so long inputs run as three
// independent streams over consecutive thirds of a chunk, joined with that map.
#include "crc32c.hpp"

#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mcs {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reflected
constexpr size_t kLong = 8192;           // bytes per stream of a long chunk
constexpr size_t kShort = 256;           // ... of a short one

// A linear map of the register: the effect of `len` zero bytes.
struct Shift {
    uint32_t t[4][256];
    uint32_t operator()(uint32_t s) const {
        return t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24];
    }
};

struct Tables {
    uint32_t slice[8][256];
    Shift shift_long, shift_short;

    Tables() {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t s = i;
            for (int b = 0; b < 8; b++) s = (s & 1) ? (s >> 1) ^ kPoly : s >> 1;
            slice[0][i] = s;
        }
        for (int k = 1; k < 8; k++)
            for (uint32_t i = 0; i < 256; i++)
                slice[k][i] = (slice[k - 1][i] >> 8) ^ slice[0][slice[k - 1][i] & 0xff];
        build(shift_long, kLong);
        build(shift_short, kShort);
    }

    uint32_t zeros(uint32_t s, size_t len) const {
        for (size_t i = 0; i < len; i++) s = slice[0][s & 0xff] ^ (s >> 8);
        return s;
    }

    // The map is linear: the image of each register bit, then of each byte.
    void build(Shift &out, size_t len) const {
        uint32_t bit[32];
        for (int b = 0; b < 32; b++) bit[b] = zeros(uint32_t(1) << b, len);
        for (int k = 0; k < 4; k++)
            for (uint32_t v = 0; v < 256; v++) {
                uint32_t r = 0;
                for (int b = 0; b < 8; b++)
                    if (v & (1u << b)) r ^= bit[8 * k + b];
                out.t[k][v] = r;
            }
    }
};

const Tables &tables() {
    static const Tables *t = new Tables();  // leaked: used from threads at exit
    return *t;
}

uint64_t load64(const unsigned char *p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

uint32_t raw_sw(uint32_t s, const unsigned char *p, size_t n) {
    const Tables &t = tables();
    while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
        s = t.slice[0][(s ^ *p++) & 0xff] ^ (s >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = load64(p) ^ s;
        s = t.slice[7][w & 0xff] ^ t.slice[6][(w >> 8) & 0xff] ^ t.slice[5][(w >> 16) & 0xff] ^
            t.slice[4][(w >> 24) & 0xff] ^ t.slice[3][(w >> 32) & 0xff] ^
            t.slice[2][(w >> 40) & 0xff] ^ t.slice[1][(w >> 48) & 0xff] ^ t.slice[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) s = t.slice[0][(s ^ *p++) & 0xff] ^ (s >> 8);
    return s;
}

#if defined(__x86_64__)

// Three streams over [p, p + 3 * len), joined.
__attribute__((target("sse4.2"))) uint32_t three_streams(uint32_t s, const unsigned char *p,
                                                         size_t len, const Shift &shift) {
    uint64_t a = s, b = 0, c = 0;
    const unsigned char *q = p + len, *r = p + 2 * len;
    for (size_t i = 0; i < len; i += 8) {
        a = _mm_crc32_u64(a, load64(p + i));
        b = _mm_crc32_u64(b, load64(q + i));
        c = _mm_crc32_u64(c, load64(r + i));
    }
    return shift(shift(uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(c);
}

__attribute__((target("sse4.2"))) uint32_t raw_hw(uint32_t s, const unsigned char *p, size_t n) {
    const Tables &t = tables();
    while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
        s = _mm_crc32_u8(s, *p++);
        n--;
    }
    while (n >= 3 * kLong) {
        s = three_streams(s, p, kLong, t.shift_long);
        p += 3 * kLong;
        n -= 3 * kLong;
    }
    while (n >= 3 * kShort) {
        s = three_streams(s, p, kShort, t.shift_short);
        p += 3 * kShort;
        n -= 3 * kShort;
    }
    uint64_t w = s;
    while (n >= 8) {
        w = _mm_crc32_u64(w, load64(p));
        p += 8;
        n -= 8;
    }
    s = uint32_t(w);
    while (n--) s = _mm_crc32_u8(s, *p++);
    return s;
}

bool detect_hw() {
    __builtin_cpu_init();  // may run before libgcc's own constructor has
    return __builtin_cpu_supports("sse4.2");
}

#else

uint32_t raw_hw(uint32_t s, const unsigned char *p, size_t n) {
    return raw_sw(s, p, n);
}

bool detect_hw() {
    return false;
}

#endif

// Asked on first use, not at static initialisation (whose order across
// translation units is unspecified).
bool use_hw() {
    static const bool hw = detect_hw();
    return hw;
}

}  // namespace

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    const auto *p = static_cast<const unsigned char *>(data);
    return ~(use_hw() ? raw_hw(~crc, p, n) : raw_sw(~crc, p, n));
}

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t n) {
    return ~raw_sw(~crc, static_cast<const unsigned char *>(data), n);
}

bool crc32c_hw() {
    return use_hw();
}

}  // namespace mcs
