// A 64-bit FNV-1a fingerprint of bytes: how a job's result names its final parameters,
// so two runs can be compared bitwise (reproducibility, or a run under attack against
// one without) without printing millions of floats. Not a cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe {

std::uint64_t fnv1a64(const void* bytes, std::size_t n);
// 16 lowercase hex digits.
std::string hex64(std::uint64_t v);

}  // namespace troupe
