// Model specs: the text a user writes (`mlp`, `cnn`, `mlp:784-256-128-10`, `cnn:fashion`,
// `layers:flatten; linear 256; layernorm; gelu; linear 10`, `gpt:layers=6,dim=384,heads=6,dropout=0.1`)
// parsed into a list of layer specs. `mlp` means mlp:784-256-128-10 and `cnn` means cnn:fashion =
// conv32-pool-conv64-pool-fc128-fc10 (3x3 convolutions, padding 1, ReLU after each
// convolution and hidden linear layer, 2x2 max pooling). `gpt` is a decoder-only
// transformer over a text's characters (Note [The gpt model]). `layers:` lists any sequence of
// layers, one per `;` (Note [Layer lists] in train/layer_text.hpp); a file of such lines, one layer a line, becomes
// that text through model_spec_from_file, so the spec that travels to other nodes is
// always one line of text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"

namespace troupe {

enum class layer_op : std::uint8_t {
  linear, conv2d, maxpool2d, relu, flatten, gelu, layer_norm, residual, embedding, attention, dropout, batch_norm
};

struct layer_spec {
  layer_op op = layer_op::relu;
  std::int64_t size = 0;    // linear: output features (0: the dataset's classes); conv2d: output channels;
                            // embedding: width; attention: heads
  std::int64_t kernel = 0;  // conv2d, maxpool2d
  std::int64_t stride = 1;
  std::int64_t pad = 0;
  float rate = 0.f;         // dropout: the probability of dropping an element
  std::vector<layer_spec> inner;  // residual: the block's layers, whose output is added to its input
};

struct model_spec {
  std::string name;                          // canonical text, e.g. "mlp:784-256-128-10"
  std::vector<layer_spec> layers;
  std::optional<std::int64_t> input_features;  // an mlp spec names its input width
};

// The spec names the command line accepts, for help texts and error messages.
inline constexpr std::string_view model_spec_help =
    "mlp (= mlp:784-256-128-10), cnn (= cnn:fashion), mlp:IN-H1-...-OUT, resnet (= resnet:width=32), resnet:width=W, "
    "gpt (= gpt:layers=6,dim=384,heads=6), "
    "gpt:layers=L,dim=C,heads=H[,dropout=P], layers:L1; L2; ... or file:PATH (one layer a line), each layer one "
    "of: linear N (or linear classes), conv2d C [k=3] [stride=1] [pad=0], maxpool2d [k=2] [stride=K], relu, gelu, "
    "layernorm, batchnorm, flatten, dropout P, embedding C, attention H, residual(L1, L2, ...)";

expected<model_spec> parse_model_spec(std::string_view text);

// The `layers:` spec of the layer list in a file: one layer a line as in a `layers:` spec,
// blank lines and text after '#' ignored. Errors name the file, the line and its text.
expected<std::string> model_spec_from_file(const std::string& path);

}  // namespace troupe
