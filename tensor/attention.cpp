// Causal attention forward and backward on the host: per sequence and head, two GEMMs on
// strided views of qkv around a masked row softmax.
#include "tensor/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tensor/gemm.hpp"

namespace troupe {

namespace {

void check(const_tensor_view qkv, const_tensor_view probs, std::int64_t batch, const attention_geometry& g,
           const char* what) {
  const std::int64_t t = g.context, c = g.dim();
  TROUPE_CHECK(g.context > 0 && g.heads > 0 && g.head_dim > 0, std::string(what) + ": empty geometry");
  TROUPE_CHECK(qkv.type() == dtype::f32 && probs.type() == dtype::f32 && qkv.is_contiguous() && probs.is_contiguous(),
               std::string(what) + ": contiguous f32 tensors only");
  TROUPE_CHECK(qkv.numel() == batch * t * 3 * c, std::string(what) + ": qkv must be (B, T, 3C)");
  TROUPE_CHECK(probs.numel() == batch * g.heads * t * t, std::string(what) + ": probs must be (B, H, T, T)");
}

}  // namespace

void causal_attention_forward(tensor_view out, tensor_view probs, const_tensor_view qkv, const attention_geometry& g) {
  const std::int64_t t = g.context, c = g.dim(), d = g.head_dim;
  TROUPE_CHECK(out.type() == dtype::f32 && out.is_contiguous() && out.numel() % (t * c) == 0,
               "causal_attention_forward: out must be (B, T, C)");
  const std::int64_t batch = out.numel() / (t * c);
  check(qkv, probs, batch, g, "causal_attention_forward");
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const float* x = qkv.data<float>();
  float* p_all = probs.data<float>();
  float* y = out.data<float>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const float* q = x + b * t * 3 * c + h * d;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* p = p_all + (b * g.heads + h) * t * t;
      sgemm(transpose::no, transpose::yes, t, t, d, scale, q, 3 * c, k, 3 * c, 0.f, p, t);
      for (std::int64_t i = 0; i < t; ++i) {
        float* row = p + i * t;
        float mx = row[0];
        for (std::int64_t j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (std::int64_t j = i + 1; j < t; ++j) row[j] = 0.f;
      }
      sgemm(transpose::no, transpose::no, t, d, t, 1.f, p, t, v, 3 * c, 0.f, y + b * t * c + h * d, c);
    }
}

void causal_attention_backward(tensor_view grad_qkv, tensor_view grad_probs, const_tensor_view grad_out,
                               const_tensor_view qkv, const_tensor_view probs, const attention_geometry& g) {
  const std::int64_t t = g.context, c = g.dim(), d = g.head_dim;
  TROUPE_CHECK(grad_out.type() == dtype::f32 && grad_out.is_contiguous() && grad_out.numel() % (t * c) == 0,
               "causal_attention_backward: grad_out must be (B, T, C)");
  const std::int64_t batch = grad_out.numel() / (t * c);
  check(qkv, probs, batch, g, "causal_attention_backward");
  check(grad_qkv, grad_probs, batch, g, "causal_attention_backward");
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const float* x = qkv.data<float>();
  const float* dy_all = grad_out.data<float>();
  const float* p_all = probs.data<float>();
  float* dx = grad_qkv.data<float>();
  float* dp_all = grad_probs.data<float>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const float* q = x + b * t * 3 * c + h * d;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = dx + b * t * 3 * c + h * d;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* dy = dy_all + b * t * c + h * d;
      const float* p = p_all + (b * g.heads + h) * t * t;
      float* ds = dp_all + (b * g.heads + h) * t * t;
      // dP = dY V^T; dV = P^T dY.
      sgemm(transpose::no, transpose::yes, t, t, d, 1.f, dy, c, v, 3 * c, 0.f, ds, t);
      sgemm(transpose::yes, transpose::no, t, d, t, 1.f, p, t, dy, c, 0.f, dv, 3 * c);
      // dS = scale * P * (dP - rowsum(P * dP)), 0 above the diagonal where P is 0.
      for (std::int64_t i = 0; i < t; ++i) {
        const float* pr = p + i * t;
        float* row = ds + i * t;
        double dot = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) dot += static_cast<double>(pr[j]) * row[j];
        for (std::int64_t j = 0; j <= i; ++j) row[j] = scale * pr[j] * (row[j] - static_cast<float>(dot));
        for (std::int64_t j = i + 1; j < t; ++j) row[j] = 0.f;
      }
      // dQ = dS K; dK = dS^T Q.
      sgemm(transpose::no, transpose::no, t, d, t, 1.f, ds, t, k, 3 * c, 0.f, dq, 3 * c);
      sgemm(transpose::yes, transpose::no, t, d, t, 1.f, ds, t, q, 3 * c, 0.f, dk, 3 * c);
    }
}

}  // namespace troupe
