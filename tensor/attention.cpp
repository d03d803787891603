// Causal attention forward and backward on the host: per sequence and head, GEMMs on
// strided views of qkv, by blocks of rows, around a masked row softmax. The (sequence,
// head) pairs are split across the compute threads (tensor/host_parallel.hpp); each
// pair's arithmetic is the same on any number of threads.
#include "tensor/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tensor/fast_math.hpp"
#include "tensor/gemm.hpp"
#include "tensor/host_parallel.hpp"
#include "tensor/vector_clones.hpp"

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

// Rows [r0, r1) of t-wide scores p become their causal softmax: row i's columns [0, i]
// its probabilities, the columns above the diagonal 0.
TROUPE_VECTOR_CLONES void causal_softmax_rows(float* p, std::int64_t t, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t i = r0; i < r1; ++i) {
    float* row = p + i * t;
    const float mx = fast::max(row, i + 1);
    for (std::int64_t j = 0; j <= i; ++j) row[j] = fast::exp_nonpositive(row[j] - mx);
    const float inv = static_cast<float>(1.0 / fast::sum(row, i + 1));
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (std::int64_t j = i + 1; j < t; ++j) row[j] = 0.f;
  }
}

// Rows [r0, r1) of dP become dS = scale * P * (dP - rowsum(P * dP)), 0 above the
// diagonal where P is 0.
TROUPE_VECTOR_CLONES void causal_softmax_grad_rows(float* ds, const float* p, std::int64_t t, float scale,
                                                   std::int64_t r0, std::int64_t r1) {
  for (std::int64_t i = r0; i < r1; ++i) {
    const float* pr = p + i * t;
    float* row = ds + i * t;
    const float dot = static_cast<float>(fast::dot(pr, row, i + 1));
    for (std::int64_t j = 0; j <= i; ++j) row[j] = scale * pr[j] * (row[j] - dot);
    for (std::int64_t j = i + 1; j < t; ++j) row[j] = 0.f;
  }
}

}  // namespace

// Rows are taken in blocks of `row_block`: a block of queries needs the keys up to its
// last row only, so the GEMMs skip the masked upper blocks (about 40% of the work at a
// context of 256) and the softmax writes the zeros.
constexpr std::int64_t row_block = 64;

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
  parallel_ranges(batch * g.heads, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bh = lo; bh < hi; ++bh) {
      const std::int64_t b = bh / g.heads, h = bh % g.heads;
      const float* q = x + b * t * 3 * c + h * d;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* p = p_all + bh * t * t;
      for (std::int64_t r0 = 0; r0 < t; r0 += row_block) {
        const std::int64_t r1 = std::min(t, r0 + row_block);
        // Scores of rows [r0, r1) against keys [0, r1).
        sgemm(transpose::no, transpose::yes, r1 - r0, r1, d, scale, q + r0 * 3 * c, 3 * c, k, 3 * c, 0.f, p + r0 * t,
              t);
        causal_softmax_rows(p, t, r0, r1);
        sgemm(transpose::no, transpose::no, r1 - r0, d, r1, 1.f, p + r0 * t, t, v, 3 * c, 0.f,
              y + (b * t + r0) * c + h * d, c);
      }
    }
  });
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
  parallel_ranges(batch * g.heads, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bh = lo; bh < hi; ++bh) {
      const std::int64_t b = bh / g.heads, h = bh % g.heads;
      const float* q = x + b * t * 3 * c + h * d;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = dx + b * t * 3 * c + h * d;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* dy = dy_all + b * t * c + h * d;
      const float* p = p_all + bh * t * t;
      float* ds = dp_all + bh * t * t;
      for (std::int64_t r0 = 0; r0 < t; r0 += row_block) {
        const std::int64_t r1 = std::min(t, r0 + row_block);
        // dP = dY V^T for rows [r0, r1) and keys [0, r1); then dS; then dQ = dS K.
        sgemm(transpose::no, transpose::yes, r1 - r0, r1, d, 1.f, dy + r0 * c, c, v, 3 * c, 0.f, ds + r0 * t, t);
        causal_softmax_grad_rows(ds, p, t, scale, r0, r1);
        sgemm(transpose::no, transpose::no, r1 - r0, d, r1, 1.f, ds + r0 * t, t, k, 3 * c, 0.f, dq + r0 * 3 * c, 3 * c);
      }
      // Key and value rows [c0, c1) are attended by query rows [c0, T) only: dV = P^T dY
      // and dK = dS^T Q over those.
      for (std::int64_t c0 = 0; c0 < t; c0 += row_block) {
        const std::int64_t c1 = std::min(t, c0 + row_block);
        sgemm(transpose::yes, transpose::no, c1 - c0, d, t - c0, 1.f, p + c0 * t + c0, t, dy + c0 * c, c, 0.f,
              dv + c0 * 3 * c, 3 * c);
        sgemm(transpose::yes, transpose::no, c1 - c0, d, t - c0, 1.f, ds + c0 * t + c0, t, q + c0 * 3 * c, 3 * c, 0.f,
              dk + c0 * 3 * c, 3 * c);
      }
    }
  });
}

}  // namespace troupe
