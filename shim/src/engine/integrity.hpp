// Verified values (the client option "integrity": "crc32c"): a Backend that
// holds the real one and stores every value with a 16-byte trailer after its
// bytes, {magic "MCI2", CRC32C of the key then the value, writer nonce}, and
// checks it on every read.  Binding the key into the CRC makes a whole value
// of another key (bytes and trailer, as a late write can land them in memory
// since handed to this key) fail to verify, not only a torn one.  Values
// written with version 1 ("MCI1", the CRC of the value alone) still verify.
// Callers above it (the engine) see each value's own size.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backend.hpp"

namespace mcs {

// The trailer, little-endian, right after the value's bytes.
struct Trailer {
    uint32_t magic;  // kTrailerMagic (written), or kTrailerMagicV1 (still read)
    uint32_t crc;    // CRC32C of the key's bytes then the value's (v1: the value's)
    uint64_t nonce;  // unique per write: tells whose write a key holds
};
static_assert(sizeof(Trailer) == 16);
constexpr uint32_t kTrailerMagic = 0x3249434Du;    // "MCI2" in memory order
constexpr uint32_t kTrailerMagicV1 = 0x3149434Du;  // "MCI1": the value's CRC alone
constexpr size_t kTrailerSize = sizeof(Trailer);

// Whether `magic` is a trailer's (either version).
inline bool trailer_magic(uint32_t magic) {
    return magic == kTrailerMagic || magic == kTrailerMagicV1;
}

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

// The CRC a version-2 trailer's CRC32C of a value starts from: that of its key.
uint32_t key_seed(const std::string &key);

// Whether `t` is a trailer of the `n` bytes at `value` stored under `key`.
bool trailer_verifies(const Trailer &t, const std::string &key, const void *value, size_t n);

}  // namespace mcs
