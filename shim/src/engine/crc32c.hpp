// CRC32C (the Castagnoli polynomial 0x1EDC6F41, bit-reflected 0x82F63B78, as
// iSCSI, ext4 and SSE4.2's crc32 instruction use it), in software and with the
// CPU's crc32 instruction when it has one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mcs {

// The CRC32C of `n` bytes at `data` continuing `crc` (the CRC of the bytes
// before them; 0 for none): crc32c(crc32c(0, a, n), b, m) is the CRC of a
// followed by b.  Uses SSE4.2 when the CPU has it, three interleaved streams
// for long inputs.
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

// The same, table-driven in software only (for CPUs without SSE4.2, and tests).
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t n);

// Whether crc32c() uses the CPU's crc32 instruction.
bool crc32c_hw();

}  // namespace mcs
