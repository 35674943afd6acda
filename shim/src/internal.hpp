// Internal declarations of the shim: the backend interface, lanes, L1 and
// the engine, plus the Mooncake backend's entry points.  Nothing here is
// exported; the C ABI lives in capi.cpp and the Mooncake backend in
// mooncake_backend.cpp.
#pragma once

#include "backend.hpp"
#include "engine.hpp"
#include "l1.hpp"
#include "lane.hpp"
#include "replica.hpp"

namespace mcs {

// The Mooncake backend (mooncake_backend.cpp).
int load_mooncake(const char *path, const char *version, std::string &msg);
bool mooncake_loaded();
int set_log_level(int level);
// The ReplicateConfig layout picked at load (kUnknown before, or if unknown).
Layout loaded_layout();
// Probes, creates and sets up a RealClient; throws Error on failure.
std::unique_ptr<Backend> make_mooncake_backend(const StrVec &keys, const StrVec &values,
                                               int probe_timeout_ms);
// A client of a standalone client service: Mooncake's DummyClient (mcs.h,
// mcs_client_create_dummy).
std::unique_ptr<Backend> make_dummy_backend(size_t mem_pool_size, size_t local_buffer_size,
                                            const std::string &server_address,
                                            int probe_timeout_ms);
// The process-wide ShmHelper of store.so (mcs_shm_alloc / mcs_shm_free).
void *shm_alloc(size_t size);
bool shm_free(void *ptr);  // false: not the start of a segment it allocated

}  // namespace mcs
