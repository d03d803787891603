// Softmax cross-entropy and accuracy loops.
#include "tensor/loss.hpp"

#include <cmath>

namespace troupe {

namespace {

void check_rows(const_tensor_view mat, const_tensor_view labels, const char* what) {
  TROUPE_CHECK(mat.rank() == 2 && mat.is_contiguous() && mat.type() == dtype::f32,
               std::string(what) + ": expected contiguous f32 (B, C)");
  TROUPE_CHECK(labels.type() == dtype::i32 && labels.numel() == mat.size(0),
               std::string(what) + ": labels must be i32 with one entry per row");
}

}  // namespace

double softmax_xent_forward(tensor_view probs, const_tensor_view logits, const_tensor_view labels) {
  check_rows(logits, labels, "softmax_xent_forward");
  TROUPE_CHECK(probs.sizes() == logits.sizes(), "softmax_xent_forward: probs shape");
  const std::int64_t rows = logits.size(0), classes = logits.size(1);
  if (rows == 0) return 0.0;
  const float* z = logits.data<float>();
  float* p = probs.data<float>();
  const std::int32_t* y = labels.data<std::int32_t>();
  double total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r, z += classes, p += classes) {
    TROUPE_CHECK(y[r] >= 0 && y[r] < classes, "label out of range");
    float m = z[0];
    for (std::int64_t c = 1; c < classes; ++c) m = z[c] > m ? z[c] : m;
    double sum = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      p[c] = std::exp(z[c] - m);
      sum += p[c];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (std::int64_t c = 0; c < classes; ++c) p[c] *= inv;
    total += std::log(sum) + m - z[y[r]];
  }
  return total / static_cast<double>(rows);
}

void softmax_xent_backward(tensor_view grad_logits, const_tensor_view probs, const_tensor_view labels,
                           float scale) {
  check_rows(probs, labels, "softmax_xent_backward");
  TROUPE_CHECK(grad_logits.sizes() == probs.sizes(), "softmax_xent_backward: grad shape");
  const std::int64_t rows = probs.size(0), classes = probs.size(1);
  const float* p = probs.data<float>();
  float* g = grad_logits.data<float>();
  const std::int32_t* y = labels.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r, p += classes, g += classes) {
    for (std::int64_t c = 0; c < classes; ++c) g[c] = scale * p[c];
    g[y[r]] -= scale;
  }
}

std::int64_t count_correct(const_tensor_view logits, const_tensor_view labels) {
  check_rows(logits, labels, "count_correct");
  const std::int64_t rows = logits.size(0), classes = logits.size(1);
  const float* z = logits.data<float>();
  const std::int32_t* y = labels.data<std::int32_t>();
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < rows; ++r, z += classes) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    correct += best == y[r];
  }
  return correct;
}

}  // namespace troupe
