// Mooncake's setup on the wheels before 0.3.12, for a client without a segment,
// and what the backend and it share of Mooncake's ABI: the shape of a
// tl::expected<void, ErrorCode> return and the config dict.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace mooncake {
class RealClient;
class TransferEngine;  // only passed as an empty shared_ptr (see legacy_setup.cpp)
}  // namespace mooncake

namespace mcs {

using ConfigDict = std::unordered_map<std::string, std::string>;

// tl::expected<void, ErrorCode>: 8 bytes in RAX, low 32 bits the error code,
// byte 4 has_value.  Trivially copyable here so it is returned the same way.
struct ExpectedVoid {
    int32_t error;
    uint8_t has_value;
    uint8_t pad[3];
};
static_assert(sizeof(ExpectedVoid) == 8, "ExpectedVoid must be 8 bytes");

// The value of `key` in `cfg`, or `fallback`.
std::string config_or(const ConfigDict &cfg, const char *key, const char *fallback);

// Whether the config asks for no segment (global_segment_size "0").
bool wants_no_segment(const ConfigDict &cfg);

// Looks the pre-0.3.12 setup overload up in store.so (`handle` from dlopen);
// has_legacy_setup() says whether the loaded wheel has it.
void resolve_legacy_setup(void *handle);
bool has_legacy_setup();

// ConfigDict setup as those wheels run it, with a segment of 0 (only when
// has_legacy_setup()).  Throws Error(MCS_E_INVALID_ARG) for a key it refuses.
ExpectedVoid legacy_setup_without_segment(mooncake::RealClient *client, const ConfigDict &cfg);

}  // namespace mcs
