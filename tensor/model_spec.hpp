// Model specs: the text a user writes (`mlp`, `cnn`, `mlp:784-256-128-10`, `cnn:fashion`)
// parsed into a list of layer specs. `mlp` means mlp:784-256-128-10 and `cnn` means
// cnn:fashion = conv32-pool-conv64-pool-fc128-fc10 (3x3 convolutions, padding 1, ReLU after
// each convolution and hidden linear layer, 2x2 max pooling).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

enum class layer_op : std::uint8_t { linear, conv2d, maxpool2d, relu, flatten };

struct layer_spec {
  layer_op op = layer_op::relu;
  std::int64_t size = 0;    // linear: output features; conv2d: output channels
  std::int64_t kernel = 0;  // conv2d, maxpool2d
  std::int64_t stride = 1;
  std::int64_t pad = 0;
};

struct model_spec {
  std::string name;                          // canonical text, e.g. "mlp:784-256-128-10"
  std::vector<layer_spec> layers;
  std::optional<std::int64_t> input_features;  // an mlp spec names its input width
};

// The spec names the command line accepts, for help texts and error messages.
inline constexpr std::string_view model_spec_help =
    "mlp (= mlp:784-256-128-10), cnn (= cnn:fashion), or mlp:IN-H1-...-OUT";

expected<model_spec> parse_model_spec(std::string_view text);

}  // namespace troupe
