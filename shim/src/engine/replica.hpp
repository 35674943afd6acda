// Replica options: the caller's struct mcs_replica_options read and checked
// into mcs::ReplicaOptions, and Mooncake's C++ ReplicateConfig built from
// them in the layout of the loaded wheel.
//
// ReplicateConfig is a plain aggregate (sizes, bools, one-byte enums,
// strings, vectors and optionals) whose members changed between wheels.
// Each layout below mirrors one of them member for member (same types, same
// order; Mooncake's one-byte enums as uint8_t), compiled with the same
// compiler family and libstdc++ ABI as the wheels (GCC, _GLIBCXX_USE_CXX11_ABI
// = 1), so an object built here is the object Mooncake's code expects.
// Which layout a wheel has is told by its version (mcs_load) and checked
// against the field names ReplicateConfig's printer leaves in store.so.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "backend.hpp"

namespace mcs {

enum class Layout {
    kUnknown,
    k0310,  // 0.3.10.post2
    k0311,  // 0.3.11, 0.3.11.post1
    k0312,  // 0.3.12, 0.3.12.post1
    k0313,  // 0.3.13, 0.3.13.post1
    k0314,  // 0.3.14
};

// The layout of a wheel version ("0.3.12.post1"); kUnknown if not listed.
Layout layout_for_version(const std::string &version);
// "0.3.10" .. "0.3.14", or "unknown".
const char *layout_name(Layout layout);
// Whether store.so's bytes carry the field names `layout`'s printer prints
// (and none of the fields it lacks); `why` says what did not match.
bool layout_matches_image(Layout layout, const char *image, size_t size, std::string &why);

// Mooncake's defaults (mcs_replica_options_init).
void init_replica_options(mcs_replica_options *opts);
// Reads a caller's struct (struct_size bytes of it, the rest defaults) and
// checks its form; throws Error(MCS_E_INVALID_ARG) naming the field.
ReplicaOptions read_replica_options(const mcs_replica_options *in);
// Throws Error(MCS_E_UNSUPPORTED) for a field `layout` lacks that is not at
// its default.  `wheel` names the loaded wheel in the message.
void check_replica_supported(Layout layout, const std::string &wheel, const ReplicaOptions &opts);

// Builds the ReplicateConfig of `layout` from opts (group ids from
// `group_ids`, aligned with the call's keys, or none) and calls fn(const
// void *config) with its address.  Throws Error(MCS_E_UNSUPPORTED) for
// kUnknown.
struct ConfigFn {
    void *ctx;
    void (*call)(void *ctx, const void *config);
};
void with_replicate_config_fn(Layout layout, const ReplicaOptions &opts, const StrVec *group_ids,
                              ConfigFn fn);
template <class F>
void with_replicate_config(Layout layout, const ReplicaOptions &opts, const StrVec *group_ids,
                           F &&fn) {
    using Fn = std::remove_reference_t<F>;
    with_replicate_config_fn(layout, opts, group_ids, {&fn, [](void *ctx, const void *config) {
                                                           (*static_cast<Fn *>(ctx))(config);
                                                       }});
}

// For the tests (mcs_debug_*): field-by-field comparison of a ReplicateConfig
// Mooncake built with the one built from opts (number of differing fields,
// named in `diff`), and assignment of the built one to Mooncake's object.
int compare_replicate_config(Layout layout, const void *native, const ReplicaOptions &opts,
                             std::string &diff);
void assign_replicate_config(Layout layout, void *native, const ReplicaOptions &opts);

}  // namespace mcs
