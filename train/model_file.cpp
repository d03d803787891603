// model_file: a model's parameters to and from Troupe's format (Note [Model files]), and
// to .npz block by block.
#include "train/model_file.hpp"

#include "tensor/npz_file.hpp"
#include "tensor/tensor_file.hpp"
#include "train/model_spec.hpp"

namespace troupe {

namespace {

constexpr const char* kind = "troupe-model";

nlohmann::json dims_of(const shape& s) {
  nlohmann::json out = nlohmann::json::array();
  for (auto d : s.dims()) out.push_back(d);
  return out;
}

nlohmann::json blocks_of(const model& m) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : m.blocks()) out.push_back({{"name", b.name}, {"shape", dims_of(b.shape)}, {"offset", b.offset}});
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::optional<std::string> save_model(const std::filesystem::path& path, const std::string& spec, const model& m,
                                      const_tensor_view params, const nlohmann::json& source) {
  if (params.type() != dtype::f32 || params.numel() != m.num_params())
    return "cannot write " + path.string() + ": " + std::to_string(params.numel()) + " parameters for a model of " +
           std::to_string(m.num_params());
  if (ends_with(path.filename().string(), ".npz")) {
    std::vector<std::pair<std::string, const_tensor_view>> arrays;
    for (const auto& b : m.blocks())
      arrays.emplace_back(b.name, params.flat(b.offset, b.numel).reshape(b.shape));
    return write_npz(path, arrays);
  }
  const nlohmann::json meta = {{"model", spec},
                               {"input_shape", dims_of(m.input_shape())},
                               {"classes", m.classes()},  // a language model: its vocabulary, not positions x vocabulary
                               {"blocks", blocks_of(m)},
                               {"source", source}};
  return write_tensor_file(path, kind, meta, {{"params", params.reshape({params.numel()})}});
}

expected<saved_model> load_model(const std::filesystem::path& path) {
  auto file = read_tensor_file(path, kind);
  if (!file && ends_with(path.filename().string(), ".npz"))
    return failure{file.error().message + " (a .npz archive is for other frameworks; give the file --save-model wrote "
                                          "under a name without .npz)"};
  if (!file) return file.error();
  const std::string what = path.string() + ": ";
  const auto& meta = file->meta;
  if (!meta.contains("model") || !meta["model"].is_string() || !meta.contains("input_shape") ||
      !meta["input_shape"].is_array() || !meta.contains("classes") || !meta["classes"].is_number_integer())
    return failure{what + "its description lacks the model, the input shape or the class count"};
  saved_model out;
  out.spec = meta["model"].get<std::string>();
  std::vector<std::int64_t> dims;
  for (const auto& d : meta["input_shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() <= 0 || dims.size() == shape::max_rank)
      return failure{what + "its input shape is not a shape"};
    dims.push_back(d.get<std::int64_t>());
  }
  out.input = shape(std::span<const std::int64_t>(dims));
  out.classes = meta["classes"].get<std::int64_t>();
  out.source = meta.contains("source") ? meta["source"] : nlohmann::json::object();
  auto spec = parse_model_spec(out.spec);
  if (!spec) return failure{what + "its model '" + out.spec + "': " + spec.error().message};
  auto m = model::build(*spec, out.input, out.classes);
  if (!m) return failure{what + "its model '" + out.spec + "': " + m.error().message};
  tensor* params = nullptr;
  for (auto& [name, t] : file->sections)
    if (name == "params") params = &t;
  if (!params || params->type() != dtype::f32 || params->numel() != m->num_params())
    return failure{what + "it holds " + (params ? std::to_string(params->numel()) : std::string("no")) +
                   " parameters where model '" + out.spec + "' has " + std::to_string(m->num_params())};
  if (meta.contains("blocks") && meta["blocks"] != blocks_of(*m))
    return failure{what + "its parameter blocks are not those model '" + out.spec + "' builds in this Troupe"};
  out.params = std::move(*params);
  out.net = std::move(*m);
  return out;
}

}  // namespace troupe
