// Layer normalisation over the last dimension of host f32 tensors (Ba, Kiros and Hinton
// 2016; PyTorch's nn.LayerNorm over one dimension): each row is shifted to mean 0 and
// scaled to variance 1 (the biased variance, plus eps), then scaled by gamma and shifted
// by beta per column. Backward recomputes each row's statistics from the input, so
// nothing is kept between the two.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

inline constexpr float layer_norm_eps = 1e-5f;

// out (R, C) = (in - mean_row) / sqrt(var_row + eps) * gamma (C) + beta (C). out may
// alias in. Statistics are accumulated in double.
void layer_norm_forward(tensor_view out, const_tensor_view in, const_tensor_view gamma, const_tensor_view beta,
                        float eps = layer_norm_eps);
// grad_gamma (C) += sum over rows of grad_out * x_hat; grad_beta (C) += sum over rows of
// grad_out; grad_in (R, C) = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) with
// g = grad_out * gamma, overwritten, skipped when empty (it may not alias in).
void layer_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                         const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                         float eps = layer_norm_eps);

}  // namespace troupe
