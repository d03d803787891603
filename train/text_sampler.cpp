// Sampling characters from a language model, one forward pass a character.
#include "train/text_sampler.hpp"

#include <algorithm>
#include <cmath>

#include "tensor/random.hpp"

namespace troupe {

std::string sample_text(const model& m, const_tensor_view params, const std::vector<std::string>& vocabulary,
                        std::vector<std::int32_t> prompt, const sample_options& o) {
  TROUPE_CHECK(m.input_shape().rank() == 1 && m.classes() == static_cast<std::int64_t>(vocabulary.size()) &&
                   m.positions() == m.input_shape()[0],
               "sample_text: the model is not a language model over this vocabulary");
  TROUPE_CHECK(o.temperature > 0.f, "sample_text: the temperature must be positive");
  const std::int64_t context = m.input_shape()[0], classes = m.classes();
  if (prompt.empty()) {
    const auto nl = std::find(vocabulary.begin(), vocabulary.end(), "\n");
    prompt.push_back(nl == vocabulary.end() ? 0 : static_cast<std::int32_t>(nl - vocabulary.begin()));
  }
  auto acts = m.make_activations(1);
  auto scratch = m.make_scratch(1);
  tensor window({1, context});
  rng r(derive_seed(o.seed, {0x5a3b1e}));
  std::vector<double> p(static_cast<std::size_t>(classes));
  std::vector<std::int32_t> text = prompt;
  for (std::int64_t n = 0; n < o.characters; ++n) {
    const std::int64_t known = std::min<std::int64_t>(context, static_cast<std::int64_t>(text.size()));
    float* w = window.data<float>();
    std::fill(w, w + context, 0.f);
    for (std::int64_t i = 0; i < known; ++i) w[i] = static_cast<float>(text[text.size() - known + i]);
    const float* scores = m.forward(acts, scratch, window, params).data<float>() + (known - 1) * classes;
    const float top = *std::max_element(scores, scores + classes);
    double sum = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) sum += (p[c] = std::exp((scores[c] - top) / o.temperature));
    double u = r.uniform() * sum;
    std::int32_t next = static_cast<std::int32_t>(classes - 1);
    for (std::int64_t c = 0; c < classes; ++c)
      if ((u -= p[c]) < 0) {
        next = static_cast<std::int32_t>(c);
        break;
      }
    text.push_back(next);
  }
  std::string out;
  for (std::int32_t t : text) out += vocabulary[static_cast<std::size_t>(t)];
  return out;
}

}  // namespace troupe
