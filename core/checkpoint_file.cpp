// checkpoint_file: the identity every checkpoint file carries, and reading one back.
#include "core/checkpoint_file.hpp"

namespace troupe {

nlohmann::json checkpoint_identity::to_json() const {
  return {{"job_id", job_id}, {"model", model}, {"num_params", num_params}, {"optimizer", optimizer}};
}

std::optional<std::string> checkpoint_identity::mismatch(const nlohmann::json& other) const {
  if (!other.is_object()) return "it does not say which job and model it belongs to";
  const auto field = [&](const char* key) { return other.contains(key) ? other[key].dump() : std::string("nothing"); };
  if (other.value("model", std::string()) != model || other.value("num_params", std::int64_t{-1}) != num_params)
    return "it holds model " + field("model") + " of " + field("num_params") + " parameters, not '" + model + "' of " +
           std::to_string(num_params);
  if (other.value("optimizer", std::string()) != optimizer)
    return "it holds the state of optimizer " + field("optimizer") + ", not " + optimizer;
  if (other.value("job_id", std::string()) != job_id)
    return "it belongs to job " + field("job_id") + ", not '" + job_id + "'";
  return std::nullopt;
}

std::optional<std::string> write_checkpoint_file(
    const std::filesystem::path& path, const std::string& kind, const checkpoint_identity& id, nlohmann::json meta,
    const std::vector<std::pair<std::string, const_tensor_view>>& sections) {
  meta["identity"] = id.to_json();
  return write_tensor_file(path, kind, meta, sections);
}

expected<tensor_file> read_checkpoint_file(const std::filesystem::path& path, const std::string& kind,
                                           const checkpoint_identity& id) {
  auto file = read_tensor_file(path, kind);
  if (!file) return file.error();
  if (auto wrong = id.mismatch(file->meta.value("identity", nlohmann::json())))
    return failure{path.string() + ": " + *wrong};
  return file;
}

}  // namespace troupe
