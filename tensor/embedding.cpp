// Embedding forward and backward on the host.
#include "tensor/embedding.hpp"

#include <cmath>
#include <string>

namespace troupe {

namespace {

struct dims {
  std::int64_t batch, context, vocab, dim;
};

dims check(const_tensor_view out, const_tensor_view ids, const_tensor_view table, const_tensor_view positions,
           const char* what) {
  TROUPE_CHECK(out.type() == dtype::f32 && ids.type() == dtype::f32 && table.type() == dtype::f32 &&
                   positions.type() == dtype::f32,
               std::string(what) + ": f32 tensors only");
  TROUPE_CHECK(table.rank() == 2 && positions.rank() == 2 && table.size(1) == positions.size(1),
               std::string(what) + ": table (V, C) and positions (T, C) must share C");
  const std::int64_t t = positions.size(0), c = table.size(1);
  TROUPE_CHECK(t > 0 && ids.numel() % t == 0 && out.numel() == ids.numel() * c,
               std::string(what) + ": ids must be (B, T) and out (B, T, C)");
  return {ids.numel() / t, t, table.size(0), c};
}

}  // namespace

void embedding_forward(tensor_view out, const_tensor_view ids, const_tensor_view table, const_tensor_view positions) {
  const dims s = check(out, ids, table, positions, "embedding_forward");
  const float* id = ids.data<float>();
  const float* tab = table.data<float>();
  const float* pos = positions.data<float>();
  float* y = out.data<float>();
  for (std::int64_t r = 0; r < s.batch * s.context; ++r) {
    const float f = id[r];
    if (!(f >= 0.f && f < static_cast<float>(s.vocab) && std::floor(f) == f))
      TROUPE_CHECK(false, "embedding: sequence " + std::to_string(r / s.context) + ", position " +
                              std::to_string(r % s.context) + " holds " + std::to_string(f) +
                              ", not a token id in [0, " + std::to_string(s.vocab) +
                              "); an embedding reads token ids, as a text dataset gives them");
    const float* trow = tab + static_cast<std::int64_t>(f) * s.dim;
    const float* prow = pos + (r % s.context) * s.dim;
    float* yrow = y + r * s.dim;
    for (std::int64_t c = 0; c < s.dim; ++c) yrow[c] = trow[c] + prow[c];
  }
}

void embedding_backward(tensor_view grad_table, tensor_view grad_positions, const_tensor_view grad_out,
                        const_tensor_view ids) {
  const dims s = check(grad_out, ids, grad_table, grad_positions, "embedding_backward");
  const float* id = ids.data<float>();
  const float* dy = grad_out.data<float>();
  float* dt = grad_table.data<float>();
  float* dp = grad_positions.data<float>();
  for (std::int64_t r = 0; r < s.batch * s.context; ++r) {
    float* trow = dt + static_cast<std::int64_t>(id[r]) * s.dim;
    float* prow = dp + (r % s.context) * s.dim;
    const float* g = dy + r * s.dim;
    for (std::int64_t c = 0; c < s.dim; ++c) {
      trow[c] += g[c];
      prow[c] += g[c];
    }
  }
}

}  // namespace troupe
