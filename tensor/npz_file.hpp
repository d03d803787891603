// npz_file: NumPy's .npz (a zip archive of .npy arrays, stored uncompressed), so any
// framework can read Troupe's parameters: numpy.load(path)["fc1.weight"]. Written durably
// (base/durable_file.hpp). Without ZIP64, so every array and the archive stay under 4 GiB;
// larger ones are refused with a message that says to use Troupe's own format.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.hpp"

namespace troupe {

// Writes arrays (name -> contiguous host tensor; f32, i32 or u8) as NAME.npy entries; why not.
std::optional<std::string> write_npz(const std::filesystem::path& path,
                                     const std::vector<std::pair<std::string, const_tensor_view>>& arrays);

}  // namespace troupe
