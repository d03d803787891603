// Batch normalisation over the channels of host f32 tensors (Ioffe and Szegedy 2015;
// PyTorch's nn.BatchNorm2d, and nn.BatchNorm1d for flat features). The input is (B, C,
// P): B samples, C channels, P positions a channel (H x W, or 1 for flat features). In
// training each channel is shifted to mean 0 and scaled to variance 1 over the batch and
// its positions (the biased variance, plus eps), then scaled by gamma and shifted by
// beta; in evaluation the same with statistics given (Note [Population statistics] in
// train/layer.hpp). Statistics are accumulated in double.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

inline constexpr float batch_norm_eps = 1e-5f;

// Training: stats (2C) = each channel's batch mean, then its 1 / sqrt(var + eps);
// out = (in - mean) * rstd * gamma + beta. out may alias in.
void batch_norm_forward(tensor_view out, tensor_view stats, const_tensor_view in, const_tensor_view gamma,
                        const_tensor_view beta, float eps = batch_norm_eps);
// Evaluation: population (2C) = each channel's mean, then its variance;
// out = (in - mean) / sqrt(var + eps) * gamma + beta. out may alias in.
void batch_norm_inference(tensor_view out, const_tensor_view in, const_tensor_view gamma, const_tensor_view beta,
                          const_tensor_view population, float eps = batch_norm_eps);
// The training forward's backward, from the stats it wrote: grad_gamma (C) += the sum of
// grad_out * x_hat over batch and positions, grad_beta (C) += the sum of grad_out, and
// grad_in = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) with g = grad_out * gamma and
// the means over the channel's B x P elements; grad_in overwritten, skipped when empty
// (it may not alias in).
void batch_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                         const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                         const_tensor_view stats);
// Note [Population statistics]: folds one batch's stats (2C, as batch_norm_forward wrote
// them) into population (2C: mean, variance) as the (k + 1)-th of an equal-weight running
// average (k = 0 overwrites).
void fold_batch_statistics(tensor_view population, const_tensor_view stats, std::int64_t k,
                           float eps = batch_norm_eps);

}  // namespace troupe
