// CRC-32C (Castagnoli, the polynomial iSCSI, ext4 and Btrfs use): how Troupe's files
// check that what is read is what was written. In hardware (SSE 4.2's crc32) where the
// CPU has it, else by tables; both give the same values (tested against RFC 3720's).
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe {

// The CRC-32C of n bytes; pass an earlier result as `crc` to continue it over more bytes
// (crc32c(b, n, crc32c(a, m)) is the CRC of a followed by b).
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);

// The same by tables only, whatever the CPU has (for tests).
std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0);

// Whether crc32c() runs on the CPU's crc32 instruction.
bool crc32c_in_hardware();

}  // namespace troupe
