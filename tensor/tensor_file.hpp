// tensor_file: Troupe's file of named tensors with a JSON description, each section and
// the description under CRC-32C, written durably (base/durable_file.hpp). Model files are
// one kind (train/model_file.hpp).
//
// Note [Tensor files]
// Layout, little-endian:
//   "TROUPEtf" (8 bytes), u32 format version, u32 zero
//   the sections' bytes, back to back, from offset 16
//   the footer: UTF-8 JSON {"kind", "meta", "sections": [{"name", "dtype", "shape",
//     "offset", "bytes", "crc32c"}]}
//   u64 the footer's length, u32 its CRC-32C, u32 format version, "TROUPEnd" (8 bytes)
// The footer goes last so the writer streams each section once, computing its CRC as the
// bytes pass. A reader checks both magics and versions (a truncated file has no end
// mark), the footer's CRC and form, that the sections tile the space between the start
// and the footer exactly, each section's CRC, and the kind; any failure names the file
// and what is wrong with it. A file of a newer version is refused as such.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

inline constexpr std::uint32_t tensor_file_version = 1;

struct tensor_file {
  std::string kind;
  nlohmann::json meta;
  std::vector<std::pair<std::string, tensor>> sections;  // in file order

  // The section of that name; nullptr when there is none.
  const tensor* find(const std::string& name) const;
};

// Writes the file durably (the old one at `path` stays until the new one is complete);
// why not. Section names must be unique and the tensors contiguous.
std::optional<std::string> write_tensor_file(const std::filesystem::path& path, const std::string& kind,
                                             const nlohmann::json& meta,
                                             const std::vector<std::pair<std::string, const_tensor_view>>& sections);

// Reads and checks a file of the given kind.
expected<tensor_file> read_tensor_file(const std::filesystem::path& path, const std::string& kind);

}  // namespace troupe
