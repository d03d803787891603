// checkpoint_file: what every file of a checkpoint shares: the identity of the job it
// belongs to, written in its description as {"identity": ...}, and the checks made when
// it is read back (its kind, its identity, its description's fields), each failure
// naming the file. A file is read back only for the identity it was written under: a
// checkpoint of another model, optimizer or job is refused by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/expected.hpp"
#include "tensor/tensor_file.hpp"

namespace troupe {

// What a checkpoint's files must agree on with the job that reads them.
struct checkpoint_identity {
  std::string job_id;
  std::string model;  // the model spec
  std::int64_t num_params = 0;
  std::string optimizer;  // sgd, adam or adamw
  nlohmann::json to_json() const;
  // Why `other`, read from a file, is not this identity; nullopt when it is.
  std::optional<std::string> mismatch(const nlohmann::json& other) const;
};

// Writes `sections` durably as a tensor file of `kind` whose description is `meta` with
// the identity added; why not.
std::optional<std::string> write_checkpoint_file(
    const std::filesystem::path& path, const std::string& kind, const checkpoint_identity& id, nlohmann::json meta,
    const std::vector<std::pair<std::string, const_tensor_view>>& sections);

// Reads a tensor file of `kind` and checks that it was written under `id`.
expected<tensor_file> read_checkpoint_file(const std::filesystem::path& path, const std::string& kind,
                                           const checkpoint_identity& id);

// Runs `read` over a file's description; a missing or mistyped field fails with
// "PATH: its description is not WHAT".
template <class F>
std::optional<std::string> read_description(const std::filesystem::path& path, const std::string& what, F&& read) {
  try {
    read();
  } catch (const nlohmann::json::exception&) {
    return path.string() + ": its description is not " + what;
  }
  return std::nullopt;
}

}  // namespace troupe
