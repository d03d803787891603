// Batch normalisation forward, evaluation and backward on the host.
#include "tensor/batch_norm.hpp"

#include <cmath>
#include <string>

#include "tensor/fast_math.hpp"
#include "tensor/vector_clones.hpp"

namespace troupe {

namespace {

struct geometry {
  std::int64_t batch, channels, positions;
};

geometry check(const_tensor_view in, const_tensor_view gamma, const char* what) {
  TROUPE_CHECK(in.type() == dtype::f32 && gamma.type() == dtype::f32, std::string(what) + ": f32 tensors only");
  TROUPE_CHECK(in.rank() == 3 && in.numel() > 0, std::string(what) + ": the input must be a non-empty (B, C, P)");
  TROUPE_CHECK(gamma.numel() == in.size(1), std::string(what) + ": gamma must have one element per channel");
  return {in.size(0), in.size(1), in.size(2)};
}

// Element p of sample b in channel c.
inline std::int64_t at(const geometry& g, std::int64_t b, std::int64_t c) { return (b * g.channels + c) * g.positions; }

}  // namespace

TROUPE_VECTOR_CLONES void batch_norm_forward(tensor_view out, tensor_view stats, const_tensor_view in,
                                             const_tensor_view gamma, const_tensor_view beta, float eps) {
  const geometry g = check(in, gamma, "batch_norm_forward");
  TROUPE_CHECK(out.numel() == in.numel() && beta.numel() == g.channels && stats.numel() == 2 * g.channels,
               "batch_norm_forward: shape mismatch");
  const float* x = in.data<float>();
  float* y = out.data<float>();
  float* st = stats.data<float>();
  const double n = static_cast<double>(g.batch * g.positions);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    double sum = 0.0;
    for (std::int64_t b = 0; b < g.batch; ++b) sum += fast::sum(x + at(g, b, c), g.positions);
    const double mean = sum / n;
    double sq = 0.0;
    for (std::int64_t b = 0; b < g.batch; ++b) {
      const float* xp = x + at(g, b, c);
      sq += fast::sum_of(g.positions, [xp, mean](std::int64_t p) { return (xp[p] - mean) * (xp[p] - mean); });
    }
    const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / std::sqrt(sq / n + eps));
    st[c] = m;
    st[g.channels + c] = rstd;
    const float scale = rstd * gamma.data<float>()[c], shift = beta.data<float>()[c];
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t p = 0, o = at(g, b, c); p < g.positions; ++p) y[o + p] = (x[o + p] - m) * scale + shift;
  }
}

TROUPE_VECTOR_CLONES void batch_norm_inference(tensor_view out, const_tensor_view in, const_tensor_view gamma,
                                               const_tensor_view beta, const_tensor_view population, float eps) {
  const geometry g = check(in, gamma, "batch_norm_inference");
  TROUPE_CHECK(out.numel() == in.numel() && beta.numel() == g.channels && population.numel() == 2 * g.channels,
               "batch_norm_inference: shape mismatch");
  const float* x = in.data<float>();
  float* y = out.data<float>();
  const float* pop = population.data<float>();
  for (std::int64_t c = 0; c < g.channels; ++c) {
    const float m = pop[c], rstd = 1.f / std::sqrt(pop[g.channels + c] + eps);
    const float scale = rstd * gamma.data<float>()[c], shift = beta.data<float>()[c];
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t p = 0, o = at(g, b, c); p < g.positions; ++p) y[o + p] = (x[o + p] - m) * scale + shift;
  }
}

TROUPE_VECTOR_CLONES void batch_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                                              const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                                              const_tensor_view stats) {
  const geometry g = check(in, gamma, "batch_norm_backward");
  TROUPE_CHECK(grad_out.numel() == in.numel() && grad_gamma.numel() == g.channels && grad_beta.numel() == g.channels &&
                   stats.numel() == 2 * g.channels && (grad_in.empty() || grad_in.numel() == in.numel()),
               "batch_norm_backward: shape mismatch");
  const float* x = in.data<float>();
  const float* dy = grad_out.data<float>();
  const float* st = stats.data<float>();
  const double n = static_cast<double>(g.batch * g.positions);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    const float m = st[c], rstd = st[g.channels + c], gm = gamma.data<float>()[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (std::int64_t b = 0; b < g.batch; ++b) {
      const float* xp = x + at(g, b, c);
      const float* dyp = dy + at(g, b, c);
      sum_dy += fast::sum(dyp, g.positions);
      sum_dy_xhat += fast::sum_of(g.positions, [xp, dyp, m, rstd](std::int64_t p) {
        return static_cast<double>(dyp[p] * ((xp[p] - m) * rstd));
      });
    }
    grad_gamma.data<float>()[c] += static_cast<float>(sum_dy_xhat);
    grad_beta.data<float>()[c] += static_cast<float>(sum_dy);
    if (grad_in.empty()) continue;
    const float mg = static_cast<float>(gm * sum_dy / n), mgx = static_cast<float>(gm * sum_dy_xhat / n);
    float* dx = grad_in.data<float>();
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t p = 0, o = at(g, b, c); p < g.positions; ++p) {
        const float xhat = (x[o + p] - m) * rstd;
        dx[o + p] = rstd * (dy[o + p] * gm - mg - xhat * mgx);
      }
  }
}

void fold_batch_statistics(tensor_view population, const_tensor_view stats, std::int64_t k, float eps) {
  TROUPE_CHECK(population.type() == dtype::f32 && stats.type() == dtype::f32 && population.numel() == stats.numel() &&
                   stats.numel() % 2 == 0 && k >= 0,
               "fold_batch_statistics: population and stats must be 2C f32 each, k >= 0");
  const std::int64_t channels = stats.numel() / 2;
  float* pop = population.data<float>();
  const float* st = stats.data<float>();
  const double w = 1.0 / static_cast<double>(k + 1);
  for (std::int64_t c = 0; c < channels; ++c) {
    const double var = 1.0 / (static_cast<double>(st[channels + c]) * st[channels + c]) - eps;
    const double mean0 = k == 0 ? 0.0 : pop[c], var0 = k == 0 ? 0.0 : pop[channels + c];
    pop[c] = static_cast<float>(mean0 + (st[c] - mean0) * w);
    pop[channels + c] = static_cast<float>(var0 + (var - var0) * w);
  }
}

}  // namespace troupe
