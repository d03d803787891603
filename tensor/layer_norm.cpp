// Layer normalisation forward and backward on the host, rows split across the compute
// threads (tensor/host_parallel.hpp).
#include "tensor/layer_norm.hpp"

#include <cmath>
#include <vector>

#include "tensor/fast_math.hpp"
#include "tensor/host_parallel.hpp"
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

TROUPE_VECTOR_CLONES void normalize_rows(float* y, const float* x, const float* g, const float* b, std::int64_t cols,
                                         std::int64_t rows, float eps) {
  for (std::int64_t r = 0; r < rows; ++r, x += cols, y += cols) {
    const row_stats s = stats_of(x, cols, eps);
    for (std::int64_t c = 0; c < cols; ++c) y[c] = (x[c] - s.mean) * s.rstd * g[c] + b[c];
  }
}

// Each row's statistics into stats and, when dx is not null, its input gradient.
TROUPE_VECTOR_CLONES void input_grad_rows(float* dx, row_stats* stats, const float* dy, const float* x, const float* g,
                                          std::int64_t cols, std::int64_t rows, float eps) {
  for (std::int64_t r = 0; r < rows; ++r, x += cols, dy += cols) {
    const row_stats s = stats[r] = stats_of(x, cols, eps);
    if (!dx) continue;
    const double mean_g = fast::sum_of(cols, [dy, g](std::int64_t c) { return static_cast<double>(dy[c] * g[c]); });
    const double mean_gx = fast::sum_of(
        cols, [dy, g, x, s](std::int64_t c) { return static_cast<double>(dy[c] * g[c] * ((x[c] - s.mean) * s.rstd)); });
    const float mg = static_cast<float>(mean_g / static_cast<double>(cols));
    const float mgx = static_cast<float>(mean_gx / static_cast<double>(cols));
    float* d = dx + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float xhat = (x[c] - s.mean) * s.rstd;
      d[c] = s.rstd * (dy[c] * g[c] - mg - xhat * mgx);
    }
  }
}

// Columns [c0, c1) of gamma's and beta's gradients, summed over every row in order.
TROUPE_VECTOR_CLONES void param_grad_cols(float* dg, float* db, const float* dy, const float* x, const row_stats* stats,
                                          std::int64_t cols, std::int64_t rows, std::int64_t c0, std::int64_t c1) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const row_stats s = stats[r];
    for (std::int64_t c = c0; c < c1; ++c) {
      dg[c] += dyr[c] * ((xr[c] - s.mean) * s.rstd);
      db[c] += dyr[c];
    }
  }
}

void check_shapes(const_tensor_view in, const_tensor_view gamma, const char* what) {
  TROUPE_CHECK(in.type() == dtype::f32 && gamma.type() == dtype::f32, std::string(what) + ": f32 tensors only");
  TROUPE_CHECK(in.rank() >= 1 && in.numel() > 0, std::string(what) + ": an empty input");
  TROUPE_CHECK(gamma.numel() == in.size(in.rank() - 1),
               std::string(what) + ": gamma must have one element per column of the input");
}

}  // namespace

void layer_norm_forward(tensor_view out, const_tensor_view in, const_tensor_view gamma, const_tensor_view beta,
                        float eps) {
  check_shapes(in, gamma, "layer_norm_forward");
  TROUPE_CHECK(out.numel() == in.numel() && beta.numel() == gamma.numel(), "layer_norm_forward: shape mismatch");
  const std::int64_t cols = gamma.numel(), rows = in.numel() / cols;
  const float* g = gamma.data<float>();
  const float* b = beta.data<float>();
  const float* x = in.data<float>();
  float* y = out.data<float>();
  parallel_ranges(rows, parallel_grain / cols + 1, [=](std::int64_t lo, std::int64_t hi) {
    normalize_rows(y + lo * cols, x + lo * cols, g, b, cols, hi - lo, eps);
  });
}

void layer_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta, const_tensor_view grad_out,
                         const_tensor_view in, const_tensor_view gamma, float eps) {
  check_shapes(in, gamma, "layer_norm_backward");
  TROUPE_CHECK(grad_out.numel() == in.numel() && grad_gamma.numel() == gamma.numel() &&
                   grad_beta.numel() == gamma.numel() && (grad_in.empty() || grad_in.numel() == in.numel()),
               "layer_norm_backward: shape mismatch");
  const std::int64_t cols = gamma.numel(), rows = in.numel() / cols;
  const float* g = gamma.data<float>();
  const float* x = in.data<float>();
  const float* dy = grad_out.data<float>();
  float* dx = grad_in.empty() ? nullptr : grad_in.data<float>();
  std::vector<row_stats> stats(static_cast<std::size_t>(rows));
  row_stats* st = stats.data();
  parallel_ranges(rows, parallel_grain / cols + 1, [=](std::int64_t lo, std::int64_t hi) {
    input_grad_rows(dx ? dx + lo * cols : nullptr, st + lo, dy + lo * cols, x + lo * cols, g, cols, hi - lo, eps);
  });
  // Split by columns, so each column's sum over the rows keeps the one-thread order.
  float* dg = grad_gamma.data<float>();
  float* db = grad_beta.data<float>();
  parallel_ranges(cols, rows * cols >= parallel_grain ? 16 : cols,
                  [=](std::int64_t lo, std::int64_t hi) { param_grad_cols(dg, db, dy, x, st, cols, rows, lo, hi); });
}

}  // namespace troupe
