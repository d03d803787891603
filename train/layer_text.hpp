// layer_text: the text of a `layers:` model, one layer at a time (Note [Layer lists]):
// its words, options and canonical text, and a whole list of layers into a model spec.
// Note [Layer lists]
// A `layers:` spec is a sequence of layers separated by ';', each a name and its
// arguments separated by spaces: a size first where the layer has one, then key=value
// options in any order.
//   linear N                                   N output features
//   conv2d C [k=3] [stride=1] [pad=0]          C output channels, a k x k kernel
//   maxpool2d [k=2] [stride=K]                 the stride defaults to the kernel
//   linear classes                             as many outputs as the dataset has classes
//   relu | gelu | layernorm | batchnorm | flatten
//   dropout P                                  drops each element with probability P
//                                              (0 < P < 1) in training, scaling the rest
//                                              by 1/(1 - P); passes all in evaluation
//   embedding C                                token ids (T) -> (T, C), the dataset's vocabulary
//   attention H                                causal self-attention with H heads over (T, C)
//   residual(L1, L2, ...)                      x + f(x), f those layers (',' between them),
//                                              which must end in x's shape; not nested
// A linear or conv2d layer is He-initialised when a relu or gelu follows it, else Xavier.
// Layernorm normalises over the last dimension, with its own weight (1) and bias (0);
// batchnorm over the channels of a (C, H, W) input (or flat features), with a weight and
// a bias per channel (Note [Population statistics] in train/layer.hpp).
// The canonical text (the model's name) writes every option, so two spellings of one
// model have one name, which is what checkpoints and model files compare.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "train/model_spec.hpp"

namespace troupe {

// A layer spec with these fields, the rest (a residual's layers) empty.
layer_spec spec_of(layer_op op, std::int64_t size = 0, std::int64_t kernel = 0, std::int64_t stride = 1,
                   std::int64_t pad = 0);

// `t` without its leading and trailing blanks.
std::string_view trim(std::string_view t);
// A whole number from 0 to max, or nothing.
std::optional<std::int64_t> positive(std::string_view tok, std::int64_t max = 1 << 24);
// A dropout rate: a decimal strictly between 0 and 1, or nothing.
std::optional<float> rate(std::string_view tok);

// A list of layer texts into a spec named by their canonical texts; `where(i)` names item
// i in errors ("layer 3").
expected<model_spec> parse_layer_list(const std::vector<std::string_view>& items,
                                      const std::function<std::string(std::size_t)>& where);

}  // namespace troupe
