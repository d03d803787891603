// Causal multi-head self-attention on host f32 tensors (Vaswani et al. 2017, the decoder's
// masked form): the fused core between the input projection and the output projection.
// Each of the B sequences holds T positions of one row of queries, keys and values side by
// side, qkv (B, T, 3C) with C = heads * head_dim, head h's columns at h * head_dim within
// each third. Position i attends to positions 0..i only. The attention weights, probs
// (B, heads, T, T), are kept by the caller for backward; entries above the diagonal are 0.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

struct attention_geometry {
  std::int64_t context = 0;   // T
  std::int64_t heads = 0;     // H
  std::int64_t head_dim = 0;  // d; C = H * d
  std::int64_t dim() const { return heads * head_dim; }
};

// probs (B, H, T, T) = softmax over j <= i of q_i . k_j / sqrt(d), 0 for j > i;
// out (B, T, C) = probs v, head h in columns [h d, (h + 1) d).
void causal_attention_forward(tensor_view out, tensor_view probs, const_tensor_view qkv, const attention_geometry& g);

// grad_qkv (B, T, 3C) overwritten with the gradient of the loss with respect to qkv, from
// grad_out (B, T, C) and forward's qkv and probs; grad_probs (B, H, T, T) is scratch.
void causal_attention_backward(tensor_view grad_qkv, tensor_view grad_probs, const_tensor_view grad_out,
                               const_tensor_view qkv, const_tensor_view probs, const attention_geometry& g);

}  // namespace troupe
