// Host loops for the elementwise ops; the arithmetic lives in tensor/elementwise.hpp, GELU's
// normal distribution in tensor/fast_math.hpp. The larger loops (GELU, bias) are split
// across the compute threads (tensor/host_parallel.hpp).
#include "tensor/ops.hpp"

#include <cmath>

#include "tensor/elementwise.hpp"
#include "tensor/fast_math.hpp"
#include "tensor/host_parallel.hpp"
#include "tensor/vector_clones.hpp"

namespace troupe {

namespace {

void require_f32(const_tensor_view t, const char* what) {
  TROUPE_CHECK(t.type() == dtype::f32 && t.is_contiguous() && t.where().kind == device_kind::cpu,
               std::string(what) + " must be a contiguous f32 host view");
}

// fn::gelu's x Phi(x), with Phi in vectorisable arithmetic (tensor/fast_math.hpp).
TROUPE_VECTOR_CLONES void gelu_range(float* o, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = x[i] * fast::normal_cdf(x[i]);
}

// fn::gelu_grad's dy (Phi(x) + x phi(x)), vectorisable as gelu_range.
TROUPE_VECTOR_CLONES void gelu_grad_range(float* gi, const float* go, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float pdf = 0.39894228040143268f * fast::exp_nonpositive(-0.5f * x[i] * x[i]);
    gi[i] = go[i] * (fast::normal_cdf(x[i]) + x[i] * pdf);
  }
}

TROUPE_VECTOR_CLONES void bias_add_rows(float* o, const float* b, std::int64_t n, std::int64_t rows) {
  for (std::int64_t r = 0; r < rows; ++r, o += n)
    for (std::int64_t j = 0; j < n; ++j) o[j] += b[j];
}

}  // namespace

void bias_add(tensor_view out, const_tensor_view bias) {
  require_f32(out, "bias_add out");
  require_f32(bias, "bias_add bias");
  const std::int64_t n = bias.numel();
  TROUPE_CHECK(out.rank() >= 1 && out.numel() % n == 0 && out.numel() / out.size(0) == n,
               "bias_add: out " + out.sizes().str() + " vs bias " + bias.sizes().str());
  float* o = out.data<float>();
  const float* b = bias.data<float>();
  parallel_ranges(out.size(0), parallel_grain / n + 1,
                  [o, b, n](std::int64_t lo, std::int64_t hi) { bias_add_rows(o + lo * n, b, n, hi - lo); });
}

TROUPE_VECTOR_CLONES void channel_bias_add(tensor_view out, const_tensor_view bias) {
  require_f32(out, "channel_bias_add out");
  require_f32(bias, "channel_bias_add bias");
  TROUPE_CHECK(out.rank() >= 2 && out.size(1) == bias.numel(), "channel_bias_add: channel mismatch");
  const std::int64_t batch = out.size(0), channels = out.size(1), positions = out.numel() / (batch * channels);
  float* o = out.data<float>();
  const float* b = bias.data<float>();
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t c = 0; c < channels; ++c, o += positions)
      for (std::int64_t p = 0; p < positions; ++p) o[p] += b[c];
}

TROUPE_VECTOR_CLONES void bias_grad_accumulate(tensor_view grad_bias, const_tensor_view grad_out) {
  require_f32(grad_bias, "bias_grad grad_bias");
  require_f32(grad_out, "bias_grad grad_out");
  const std::int64_t channels = grad_bias.numel();
  const std::int64_t batch = grad_out.size(0);
  TROUPE_CHECK(grad_out.rank() >= 2 && grad_out.size(1) == channels, "bias_grad: channel mismatch");
  const std::int64_t positions = grad_out.numel() / (batch * channels);
  float* gb = grad_bias.data<float>();
  const float* g = grad_out.data<float>();
  if (positions == 1) {  // dense: sum rows, row by row so the loop vectorises
    for (std::int64_t i = 0; i < batch; ++i, g += channels)
      for (std::int64_t c = 0; c < channels; ++c) gb[c] += g[c];
    return;
  }
  // Each plane sums in fast::sum's fixed lanes, which vectorise where one running sum
  // cannot; the images and channels add in order, so the result depends on nothing else.
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t c = 0; c < channels; ++c, g += positions) gb[c] += static_cast<float>(fast::sum(g, positions));
}

TROUPE_VECTOR_CLONES void relu_forward(tensor_view out, const_tensor_view in) {
  require_f32(out, "relu out");
  require_f32(in, "relu in");
  TROUPE_CHECK(out.numel() == in.numel(), "relu: numel mismatch");
  float* o = out.data<float>();
  const float* x = in.data<float>();
  const fn::relu f;
  for (std::int64_t i = 0, n = in.numel(); i < n; ++i) o[i] = f(x[i]);
}

TROUPE_VECTOR_CLONES void relu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view out) {
  require_f32(grad_in, "relu_backward grad_in");
  require_f32(grad_out, "relu_backward grad_out");
  require_f32(out, "relu_backward out");
  TROUPE_CHECK(grad_in.numel() == out.numel() && grad_out.numel() == out.numel(), "relu_backward: numel mismatch");
  float* gi = grad_in.data<float>();
  const float* go = grad_out.data<float>();
  const float* y = out.data<float>();
  const fn::relu_grad f;
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i) gi[i] = f(y[i], go[i]);
}

void gelu_forward(tensor_view out, const_tensor_view in) {
  require_f32(out, "gelu out");
  require_f32(in, "gelu in");
  TROUPE_CHECK(out.numel() == in.numel(), "gelu: numel mismatch");
  float* o = out.data<float>();
  const float* x = in.data<float>();
  parallel_ranges(in.numel(), parallel_grain,
                  [o, x](std::int64_t lo, std::int64_t hi) { gelu_range(o + lo, x + lo, hi - lo); });
}

void gelu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view in) {
  require_f32(grad_in, "gelu_backward grad_in");
  require_f32(grad_out, "gelu_backward grad_out");
  require_f32(in, "gelu_backward in");
  TROUPE_CHECK(grad_in.numel() == in.numel() && grad_out.numel() == in.numel(), "gelu_backward: numel mismatch");
  float* gi = grad_in.data<float>();
  const float* go = grad_out.data<float>();
  const float* x = in.data<float>();
  parallel_ranges(in.numel(), parallel_grain, [gi, go, x](std::int64_t lo, std::int64_t hi) {
    gelu_grad_range(gi + lo, go + lo, x + lo, hi - lo);
  });
}

TROUPE_VECTOR_CLONES void dropout_forward(tensor_view out, tensor_view kept, const_tensor_view in, float p,
                                          std::uint64_t key) {
  require_f32(out, "dropout out");
  require_f32(kept, "dropout kept");
  require_f32(in, "dropout in");
  TROUPE_CHECK(out.numel() == in.numel() && kept.numel() == in.numel(), "dropout: numel mismatch");
  TROUPE_CHECK(p >= 0.f && p < 1.f, "dropout: p must lie in [0, 1)");
  const fn::dropout_scale f{key, p, 1.f / (1.f - p)};
  float* o = out.data<float>();
  float* k = kept.data<float>();
  const float* x = in.data<float>();
  for (std::int64_t i = 0, n = in.numel(); i < n; ++i) {
    k[i] = f(i);
    o[i] = x[i] * k[i];
  }
}

TROUPE_VECTOR_CLONES void dropout_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view kept) {
  require_f32(grad_in, "dropout_backward grad_in");
  require_f32(grad_out, "dropout_backward grad_out");
  require_f32(kept, "dropout_backward kept");
  TROUPE_CHECK(grad_in.numel() == kept.numel() && grad_out.numel() == kept.numel(), "dropout_backward: numel mismatch");
  float* gi = grad_in.data<float>();
  const float* go = grad_out.data<float>();
  const float* k = kept.data<float>();
  for (std::int64_t i = 0, n = kept.numel(); i < n; ++i) gi[i] = go[i] * k[i];
}

TROUPE_VECTOR_CLONES void axpy(tensor_view out, float alpha, const_tensor_view in) {
  require_f32(out, "axpy out");
  require_f32(in, "axpy in");
  TROUPE_CHECK(out.numel() == in.numel(), "axpy: numel mismatch");
  float* o = out.data<float>();
  const float* x = in.data<float>();
  for (std::int64_t i = 0, n = in.numel(); i < n; ++i) o[i] += alpha * x[i];
}

TROUPE_VECTOR_CLONES void scale(tensor_view out, float alpha) {
  require_f32(out, "scale out");
  float* o = out.data<float>();
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i) o[i] *= alpha;
}

bool all_finite(const_tensor_view t) {
  require_f32(t, "all_finite input");
  // An IEEE float is NaN or infinite exactly when its exponent bits are all ones. Testing
  // the bits with integer operations lets the loop vectorise (a float reduction would not).
  const auto* bits = reinterpret_cast<const std::uint32_t*>(t.bytes());
  std::uint32_t bad = 0;
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

double squared_norm(const_tensor_view t) {
  require_f32(t, "squared_norm input");
  const float* x = t.data<float>();
  double s = 0.0;
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace troupe
