// Elementwise and row-wise ops on host f32 tensors: bias, ReLU, GELU, dropout, scaled adds,
// finiteness.
// Output first; nothing allocates. Preconditions: contiguous f32 host views of the stated
// shapes; in-place use is allowed where `out` and `in` are named as allowed to alias.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

// out (B, N) += bias (N), broadcast over rows.
void bias_add(tensor_view out, const_tensor_view bias);
// grad_bias (N) += sum over rows of grad_out (B, N). Channel form: grad_out (B, C, P) sums over B and P.
void bias_grad_accumulate(tensor_view grad_bias, const_tensor_view grad_out);
// out (B, C, P) += bias (C), broadcast over batch and positions (convolution bias).
void channel_bias_add(tensor_view out, const_tensor_view bias);

// out = max(in, 0). out may alias in.
void relu_forward(tensor_view out, const_tensor_view in);
// grad_in = grad_out where out > 0, else 0. grad_in may alias grad_out.
void relu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view out);

// out = GELU(in) (fn::gelu, the exact form, with Phi from tensor/fast_math.hpp: within a
// few parts in 10^7 of erff's). out may alias in.
void gelu_forward(tensor_view out, const_tensor_view in);
// grad_in = grad_out * GELU'(in). grad_in may alias grad_out, not in.
void gelu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view in);

// Inverted dropout (Note [Dropout masks] in tensor/elementwise.hpp): kept = each
// element's scale, 0 or 1 / (1 - p), drawn from `key`; out = in * kept. 0 <= p < 1; all
// three have the same numel; out may alias in.
void dropout_forward(tensor_view out, tensor_view kept, const_tensor_view in, float p, std::uint64_t key);
// grad_in = grad_out * kept. grad_in may alias grad_out.
void dropout_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view kept);

// out += alpha * in (same numel).
void axpy(tensor_view out, float alpha, const_tensor_view in);
// out *= alpha.
void scale(tensor_view out, float alpha);
// True when every element is finite (no NaN, no +-inf).
bool all_finite(const_tensor_view t);
// Sum of squares, accumulated in double.
double squared_norm(const_tensor_view t);

}  // namespace troupe
