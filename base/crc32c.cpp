// CRC-32C: slicing-by-8 tables, and SSE 4.2's crc32 instruction chosen at run time.
#include "base/crc32c.hpp"

#include <array>
#include <cstring>

namespace troupe {

namespace {

constexpr std::uint32_t poly = 0x82F63B78u;  // Castagnoli, reflected

using table_t = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr table_t make_tables() {
  table_t t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}

constexpr table_t tables = make_tables();

// On the raw (inverted) register.
std::uint32_t by_tables(const unsigned char* p, std::size_t n, std::uint32_t c) {
  for (; n >= 8; p += 8, n -= 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^ tables[4][lo >> 24] ^
        tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^ tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = (c >> 8) ^ tables[0][(c ^ *p) & 0xFF];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t by_instruction(const unsigned char* p, std::size_t n,
                                                               std::uint32_t c) {
  std::uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; ++p, --n) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
const bool hardware = __builtin_cpu_supports("sse4.2");
#else
const bool hardware = false;
#endif

}  // namespace

std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc) {
  return ~by_tables(static_cast<const unsigned char*>(data), n, ~crc);
}

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
#if defined(__x86_64__)
  if (hardware) return ~by_instruction(static_cast<const unsigned char*>(data), n, ~crc);
#endif
  return crc32c_portable(data, n, crc);
}

bool crc32c_in_hardware() { return hardware; }

}  // namespace troupe
