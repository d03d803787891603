// Text from a trained character-level language model: each next character is drawn from
// the softmax of the model's scores at the last known position (divided by a
// temperature), the window sliding once the text is longer than the model's context.
// Causal attention makes the scores at position k depend on positions 0..k only, so a
// window shorter than the context is padded after its end without changing them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/model.hpp"

namespace troupe {

struct sample_options {
  std::int64_t characters = 300;  // to generate after the prompt
  float temperature = 0.8f;       // > 0; lower is more conservative
  std::uint64_t seed = 1;
};

// The prompt (class ids; empty: a newline, or the vocabulary's first character when it has
// none) followed by the
// generated characters, as UTF-8. params is host memory of m's layout.
std::string sample_text(const model& m, const_tensor_view params, const std::vector<std::string>& vocabulary,
                        std::vector<std::int32_t> prompt, const sample_options& o);

}  // namespace troupe
