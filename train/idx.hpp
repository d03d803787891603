// Reader for the IDX format (MNIST, Fashion-MNIST), gzip-compressed or raw. It checks the
// magic number, element type, rank, extents and the exact data length, and says which
// file is wrong and how when a check fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

struct idx_array {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;  // row-major, dims product bytes
};

// Reads an unsigned-byte IDX file of the given rank (1 for labels, 3 for images).
// Files ending in .gz are inflated; others are read as they are.
expected<idx_array> read_idx(const std::string& path, int expected_rank);

}  // namespace troupe
