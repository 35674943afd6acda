// Verified values (the client option "integrity": "crc32c"): a Backend that
// holds the real one and stores every value with a 16-byte trailer after its
// bytes, {magic "MCI1", CRC32C of the value, writer nonce}, and checks it on
// every read.  Callers above it (the engine) see each value's own size.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend.hpp"

namespace mcs {

// The trailer, little-endian, right after the value's bytes.
struct Trailer {
    uint32_t magic;  // kTrailerMagic: this layout, version 1
    uint32_t crc;    // CRC32C of the value's bytes
    uint64_t nonce;  // unique per write: tells whose write a key holds
};
static_assert(sizeof(Trailer) == 16);
constexpr uint32_t kTrailerMagic = 0x3149434Du;  // "MCI1" in memory order
constexpr size_t kTrailerSize = sizeof(Trailer);

// Counters of one verifying client (mcs_client_integrity_stats).
struct IntegrityCounters {
    std::atomic<uint64_t> verified{0};  // values read that verified
    std::atomic<uint64_t> retried{0};   // re-reads after a value did not verify
    std::atomic<uint64_t> failed{0};    // keys answered MCS_E_CORRUPT
    std::atomic<uint64_t> written{0};   // values written with a trailer
};

// `inner` wrapped so that writes carry a trailer and reads verify it; a read
// that does not verify is read again a few times (about 15 ms in all: a read
// torn by a concurrent overwrite usually verifies on the next try), then
// fails with MCS_E_CORRUPT.
std::unique_ptr<Backend> make_integrity_backend(std::unique_ptr<Backend> inner,
                                                std::shared_ptr<IntegrityCounters> counters);

// Whether `t` is a trailer of the `n` bytes at `value`.
bool trailer_verifies(const Trailer &t, const void *value, size_t n);

}  // namespace mcs
