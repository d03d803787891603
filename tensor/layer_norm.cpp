// Layer normalisation forward and backward on the host.
#include "tensor/layer_norm.hpp"

#include <cmath>

#include "tensor/fast_math.hpp"
#include "tensor/vector_clones.hpp"

namespace troupe {

namespace {

struct row_stats {
  float mean, rstd;
};

TROUPE_VECTOR_CLONES row_stats stats_of(const float* x, std::int64_t cols, float eps) {
  const double mean = fast::sum(x, cols) / static_cast<double>(cols);
  const double var = fast::sum_of(cols, [x, mean](std::int64_t c) { return (x[c] - mean) * (x[c] - mean); }) /
                     static_cast<double>(cols);
  return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(var + eps))};
}

void check_shapes(const_tensor_view in, const_tensor_view gamma, const char* what) {
  TROUPE_CHECK(in.type() == dtype::f32 && gamma.type() == dtype::f32, std::string(what) + ": f32 tensors only");
  TROUPE_CHECK(in.rank() >= 1 && in.numel() > 0, std::string(what) + ": an empty input");
  TROUPE_CHECK(gamma.numel() == in.size(in.rank() - 1),
               std::string(what) + ": gamma must have one element per column of the input");
}

}  // namespace

TROUPE_VECTOR_CLONES void layer_norm_forward(tensor_view out, const_tensor_view in, const_tensor_view gamma,
                                             const_tensor_view beta, float eps) {
  check_shapes(in, gamma, "layer_norm_forward");
  TROUPE_CHECK(out.numel() == in.numel() && beta.numel() == gamma.numel(), "layer_norm_forward: shape mismatch");
  const std::int64_t cols = gamma.numel(), rows = in.numel() / cols;
  const float* g = gamma.data<float>();
  const float* b = beta.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = in.data<float>() + r * cols;
    float* y = out.data<float>() + r * cols;
    const row_stats s = stats_of(x, cols, eps);
    for (std::int64_t c = 0; c < cols; ++c) y[c] = (x[c] - s.mean) * s.rstd * g[c] + b[c];
  }
}

TROUPE_VECTOR_CLONES void layer_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                                              const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                                              float eps) {
  check_shapes(in, gamma, "layer_norm_backward");
  TROUPE_CHECK(grad_out.numel() == in.numel() && grad_gamma.numel() == gamma.numel() &&
                   grad_beta.numel() == gamma.numel() && (grad_in.empty() || grad_in.numel() == in.numel()),
               "layer_norm_backward: shape mismatch");
  const std::int64_t cols = gamma.numel(), rows = in.numel() / cols;
  const float* g = gamma.data<float>();
  float* dg = grad_gamma.data<float>();
  float* db = grad_beta.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = in.data<float>() + r * cols;
    const float* dy = grad_out.data<float>() + r * cols;
    const row_stats s = stats_of(x, cols, eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      dg[c] += dy[c] * ((x[c] - s.mean) * s.rstd);
      db[c] += dy[c];
    }
    if (grad_in.empty()) continue;
    const double mean_g = fast::sum_of(cols, [dy, g](std::int64_t c) { return static_cast<double>(dy[c] * g[c]); });
    const double mean_gx = fast::sum_of(
        cols, [dy, g, x, s](std::int64_t c) { return static_cast<double>(dy[c] * g[c] * ((x[c] - s.mean) * s.rstd)); });
    const float mg = static_cast<float>(mean_g / static_cast<double>(cols));
    const float mgx = static_cast<float>(mean_gx / static_cast<double>(cols));
    float* dx = grad_in.data<float>() + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float xhat = (x[c] - s.mean) * s.rstd;
      dx[c] = s.rstd * (dy[c] * g[c] - mg - xhat * mgx);
    }
  }
}

}  // namespace troupe
