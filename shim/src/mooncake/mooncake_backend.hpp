// The Mooncake-facing backend's entry points, for the C glue: loading
// Mooncake's store.so, and the Backend (engine/backend.hpp) over one of its
// RealClients.  Everything Mooncake-specific stays behind these in this folder.
#pragma once

#include <memory>
#include <string>

#include "../engine/backend.hpp"
#include "../engine/replica.hpp"

namespace mcs {

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
