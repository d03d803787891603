// model_file: a trained model's parameters on disk: Troupe's own format, which
// `train-local --init-from` and `troupe evaluate --model-file` read, or NumPy's .npz
// (one array per parameter block, named as the model names it) for any other framework.
//
// Note [Model files]
// Troupe's format is a tensor file (Note [Tensor files]) of kind "troupe-model": its
// meta says {"model": the model spec, "input_shape": one sample's shape, "classes": the
// class count, "blocks": [{"name", "shape", "offset"}], "source": where it came from},
// and its one section "params" holds the flat f32 parameters in the model's layout.
// Loading builds the model from the spec for that input and class count, and refuses a
// file whose parameters or blocks do not match what the spec builds.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

#include "base/expected.hpp"
#include "train/model.hpp"

namespace troupe {

struct saved_model {
  std::string spec;       // as the model was asked for ("mlp", "mlp:784-64-10", ...)
  shape input;            // one sample's shape
  std::int64_t classes = 0;
  tensor params;          // f32, net->num_params()
  nlohmann::json source;  // what made it (command, job, epochs, accuracy)
  std::optional<model> net;  // what the spec builds for that input and class count; set by load_model
};

// Writes params (m.num_params() f32) of model m, built from `spec`, to `path`: .npz when
// its name ends in ".npz", Troupe's format otherwise; why not.
std::optional<std::string> save_model(const std::filesystem::path& path, const std::string& spec, const model& m,
                                      const_tensor_view params, const nlohmann::json& source);

// Reads and checks a model file in Troupe's format.
expected<saved_model> load_model(const std::filesystem::path& path);

}  // namespace troupe
