// Launchers for Troupe's own CUDA kernels: elementwise math, bias, max pooling, softmax
// cross-entropy, reductions and the optimizer updates. The arithmetic of the elementwise
// and optimizer kernels is tensor/elementwise.hpp's functors, the same code the CPU loops
// run. Every launcher enqueues on `s` and checks that the launch was accepted; none waits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/backend_abi.h"

namespace troupe::gpu {

void launch_relu_forward(cudaStream_t s, float* out, const float* in, std::int64_t n);
void launch_relu_backward(cudaStream_t s, float* grad_in, const float* grad_out, const float* out, std::int64_t n);
void launch_gelu_forward(cudaStream_t s, float* out, const float* in, std::int64_t n);
void launch_gelu_backward(cudaStream_t s, float* grad_in, const float* grad_out, const float* in, std::int64_t n);
// Inverted dropout with fn::dropout_scale's mask (the host's, bit for bit).
void launch_dropout_forward(cudaStream_t s, float* out, float* kept, const float* in, std::int64_t n, float p,
                            std::uint64_t key);
void launch_dropout_backward(cudaStream_t s, float* grad_in, const float* grad_out, const float* kept,
                             std::int64_t n);
// Batch normalisation of (batch, channels, positions), one block a channel for the
// training forward and the backward (statistics and sums in double, in a fixed order).
void launch_batch_norm_forward(cudaStream_t s, float* out, float* stats, const float* in, const float* gamma,
                               const float* beta, std::int64_t batch, std::int64_t channels, std::int64_t positions,
                               float eps);
void launch_batch_norm_inference(cudaStream_t s, float* out, const float* in, const float* gamma, const float* beta,
                                 const float* population, std::int64_t batch, std::int64_t channels,
                                 std::int64_t positions, float eps);
void launch_batch_norm_backward(cudaStream_t s, float* grad_in, float* grad_gamma, float* grad_beta,
                                const float* grad_out, const float* in, const float* gamma, const float* stats,
                                std::int64_t batch, std::int64_t channels, std::int64_t positions);
void launch_layer_norm_forward(cudaStream_t s, float* out, const float* in, const float* gamma, const float* beta,
                               std::int64_t rows, std::int64_t cols, float eps);
// stats: device scratch of 2 floats a row (each row's mean and 1 / std), used between the
// row kernel and the column kernel that sums grad_gamma and grad_beta.
void launch_layer_norm_backward(cudaStream_t s, float* grad_in, float* grad_gamma, float* grad_beta, void* stats,
                                const float* grad_out, const float* in, const float* gamma, std::int64_t rows,
                                std::int64_t cols, float eps);
void launch_axpy(cudaStream_t s, float* out, float alpha, const float* in, std::int64_t n);
void launch_scale(cudaStream_t s, float* out, float alpha, std::int64_t n);
// out (batch, channels, positions) += bias (channels); rows x cols is batch x channels x 1.
void launch_channel_bias_add(cudaStream_t s, float* out, const float* bias, std::int64_t batch,
                             std::int64_t channels, std::int64_t positions);
// grad_bias (channels) += the sum over batch and positions, one block per channel.
void launch_bias_grad(cudaStream_t s, float* grad_bias, const float* grad_out, std::int64_t batch,
                      std::int64_t channels, std::int64_t positions);
void launch_maxpool2d_forward(cudaStream_t s, float* out, std::int32_t* argmax, const float* in, std::int64_t batch,
                              const troupe_pool_geom& g);
// grad_in must be zeroed first; overlapping windows add with atomics.
void launch_maxpool2d_backward(cudaStream_t s, float* grad_in, const float* grad_out, const std::int32_t* argmax,
                               std::int64_t batch, const troupe_pool_geom& g);
// probs and row_loss (rows, double) from logits; a label outside [0, classes) gives a NaN loss.
void launch_softmax_xent_forward(cudaStream_t s, float* probs, double* row_loss, const float* logits,
                                 const std::int32_t* labels, std::int64_t rows, std::int64_t classes);
void launch_softmax_xent_backward(cudaStream_t s, float* grad, const float* probs, const std::int32_t* labels,
                                  std::int64_t rows, std::int64_t classes, float scale);
// *correct (device, zeroed first) += rows whose first largest logit is at the label.
void launch_count_correct(cudaStream_t s, unsigned long long* correct, const float* logits,
                          const std::int32_t* labels, std::int64_t rows, std::int64_t classes);
// *bad (device, zeroed first) becomes non-zero when any element is NaN or infinite.
void launch_any_non_finite(cudaStream_t s, unsigned int* bad, const float* x, std::int64_t n);
void launch_sgd_step(cudaStream_t s, float* p, const float* g, float* v, std::int64_t n, const troupe_sgd_args& a);
void launch_adam_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
                      const troupe_adam_args& a);

// out (batch, context, dim) = table[ids] + positions; grads accumulate in a fixed order.
void launch_embedding_forward(cudaStream_t s, float* out, const float* ids, const float* table, const float* pos,
                              std::int64_t batch, std::int64_t context, std::int64_t dim);
void launch_embedding_backward(cudaStream_t s, float* grad_table, float* grad_pos, const float* grad_out,
                               const float* ids, std::int64_t batch, std::int64_t context, std::int64_t vocab,
                               std::int64_t dim);
// In place over rows (a multiple of context) of context scores: the causal softmax, and
// its backward (grad holds dP and becomes scale * dS).
void launch_causal_softmax(cudaStream_t s, float* probs, std::int64_t rows, std::int64_t context);
void launch_causal_softmax_backward(cudaStream_t s, float* grad, const float* probs, std::int64_t rows,
                                    std::int64_t context, float scale);

}  // namespace troupe::gpu
