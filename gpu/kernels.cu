// Troupe's own CUDA kernels but the normalisations (norm_kernels.cu): elementwise math,
// bias, pooling, softmax cross-entropy, reductions, optimizer updates, embeddings and
// attention's masked softmax. Elementwise and optimizer kernels apply the shared functors
// of tensor/elementwise.hpp per element.
#include "gpu/kernels.hpp"

#include <cmath>

#include "gpu/cuda_status.hpp"
#include "gpu/kernel_grid.cuh"
#include "tensor/elementwise.hpp"

namespace troupe::gpu {

namespace {

__global__ void relu_forward_kernel(float* out, const float* in, std::int64_t n) {
  const fn::relu f;
  GRID_STRIDE(i, n) out[i] = f(in[i]);
}

__global__ void relu_backward_kernel(float* gi, const float* go, const float* y, std::int64_t n) {
  const fn::relu_grad f;
  GRID_STRIDE(i, n) gi[i] = f(y[i], go[i]);
}

__global__ void axpy_kernel(float* out, float alpha, const float* in, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] += alpha * in[i];
}

__global__ void scale_kernel(float* out, float alpha, std::int64_t n) { GRID_STRIDE(i, n) out[i] *= alpha; }

__global__ void channel_bias_add_kernel(float* out, const float* bias, std::int64_t channels, std::int64_t positions,
                                        std::int64_t n) {
  GRID_STRIDE(i, n) out[i] += bias[(i / positions) % channels];
}

// One block per channel; a fixed reduction tree, so the result does not depend on timing.
__global__ void bias_grad_kernel(float* grad_bias, const float* g, std::int64_t batch, std::int64_t channels,
                                 std::int64_t positions) {
  __shared__ float part[threads];
  const std::int64_t c = blockIdx.x;
  float s = 0.f;
  for (std::int64_t j = threadIdx.x; j < batch * positions; j += blockDim.x) {
    const std::int64_t b = j / positions, p = j % positions;
    s += g[(b * channels + c) * positions + p];
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad_bias[c] += part[0];
}

__global__ void maxpool_forward_kernel(float* out, std::int32_t* argmax, const float* in, troupe_pool_geom g,
                                       std::int64_t n) {
  const std::int64_t oh_n = (g.in_h - g.kernel) / g.stride + 1, ow_n = (g.in_w - g.kernel) / g.stride + 1;
  GRID_STRIDE(i, n) {
    const std::int64_t ow = i % ow_n, oh = (i / ow_n) % oh_n, plane = i / (ow_n * oh_n);
    const float* x = in + plane * g.in_h * g.in_w;
    std::int64_t best = (oh * g.stride) * g.in_w + ow * g.stride;
    float m = x[best];
    for (std::int64_t kh = 0; kh < g.kernel; ++kh)
      for (std::int64_t kw = 0; kw < g.kernel; ++kw) {
        const std::int64_t at = (oh * g.stride + kh) * g.in_w + ow * g.stride + kw;
        if (x[at] > m) {  // strict: the first maximum wins ties, as on the CPU
          m = x[at];
          best = at;
        }
      }
    out[i] = m;
    argmax[i] = static_cast<std::int32_t>(best);
  }
}

__global__ void maxpool_backward_kernel(float* grad_in, const float* grad_out, const std::int32_t* argmax,
                                        std::int64_t out_plane, std::int64_t in_plane, std::int64_t n) {
  GRID_STRIDE(i, n) atomicAdd(grad_in + (i / out_plane) * in_plane + argmax[i], grad_out[i]);
}

// One block per row: max, sum of exponentials, probabilities, the row's loss.
__global__ void softmax_xent_forward_kernel(float* probs, double* row_loss, const float* logits,
                                            const std::int32_t* labels, std::int64_t classes) {
  __shared__ float red[threads];
  const std::int64_t r = blockIdx.x;
  const float* z = logits + r * classes;
  float* p = probs + r * classes;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = fmaxf(m, z[j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int w = threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float s = 0.f;
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += expf(z[j] - m);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int w = threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  s = red[0];
  for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) p[j] = expf(z[j] - m) / s;
  if (threadIdx.x == 0) {
    const std::int32_t y = labels[r];
    row_loss[r] = (y < 0 || y >= classes) ? NAN : static_cast<double>(logf(s) - (z[y] - m));
  }
}

__global__ void softmax_xent_backward_kernel(float* grad, const float* probs, const std::int32_t* labels,
                                             std::int64_t classes, float scale, std::int64_t n) {
  GRID_STRIDE(i, n) {
    const std::int64_t r = i / classes, j = i % classes;
    grad[i] = scale * (probs[i] - (labels[r] == j ? 1.f : 0.f));
  }
}

__global__ void count_correct_kernel(unsigned long long* correct, const float* logits, const std::int32_t* labels,
                                     std::int64_t rows, std::int64_t classes) {
  GRID_STRIDE(r, rows) {
    const float* z = logits + r * classes;
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < classes; ++j)
      if (z[j] > z[best]) best = j;
    if (best == labels[r]) atomicAdd(correct, 1ull);
  }
}

__global__ void any_non_finite_kernel(unsigned int* bad, const float* x, std::int64_t n) {
  GRID_STRIDE(i, n) if (!isfinite(x[i])) atomicOr(bad, 1u);
}

__global__ void sgd_kernel(float* p, const float* g, float* v, std::int64_t n, fn::sgd_momentum f) {
  GRID_STRIDE(i, n) f(p[i], g[i], v[i]);
}

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, fn::adam f) {
  GRID_STRIDE(i, n) f(p[i], g[i], m[i], v[i]);
}

__global__ void gelu_forward_kernel(float* out, const float* in, std::int64_t n) {
  const fn::gelu f;
  GRID_STRIDE(i, n) out[i] = f(in[i]);
}

__global__ void gelu_backward_kernel(float* gi, const float* go, const float* x, std::int64_t n) {
  const fn::gelu_grad f;
  GRID_STRIDE(i, n) gi[i] = f(x[i], go[i]);
}

__global__ void dropout_forward_kernel(float* out, float* kept, const float* in, std::int64_t n, fn::dropout_scale f) {
  GRID_STRIDE(i, n) {
    kept[i] = f(i);
    out[i] = in[i] * kept[i];
  }
}

__global__ void dropout_backward_kernel(float* gi, const float* go, const float* kept, std::int64_t n) {
  GRID_STRIDE(i, n) gi[i] = go[i] * kept[i];
}

// Embeddings: one thread an output element; the table's gradient sums, for each (token,
// column), the rows of that token in position order, so no atomics and a fixed order.
__global__ void embedding_forward_kernel(float* out, const float* ids, const float* table, const float* pos,
                                         std::int64_t context, std::int64_t dim, std::int64_t n) {
  GRID_STRIDE(i, n) {
    const std::int64_t r = i / dim, c = i % dim;
    out[i] = table[static_cast<std::int64_t>(ids[r]) * dim + c] + pos[(r % context) * dim + c];
  }
}

__global__ void embedding_backward_table_kernel(float* grad_table, const float* grad_out, const float* ids,
                                                std::int64_t rows, std::int64_t dim, std::int64_t n) {
  GRID_STRIDE(i, n) {
    const float v = static_cast<float>(i / dim);
    const std::int64_t c = i % dim;
    float s = 0.f;
    for (std::int64_t r = 0; r < rows; ++r)
      if (ids[r] == v) s += grad_out[r * dim + c];
    grad_table[i] += s;
  }
}

__global__ void embedding_backward_positions_kernel(float* grad_pos, const float* grad_out, std::int64_t batch,
                                                    std::int64_t context, std::int64_t dim, std::int64_t n) {
  GRID_STRIDE(i, n) {
    float s = 0.f;
    for (std::int64_t b = 0; b < batch; ++b) s += grad_out[b * context * dim + i];
    grad_pos[i] += s;
  }
}

__device__ float block_max(float v, float* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + w]);
    __syncthreads();
  }
  const float m = part[0];
  __syncthreads();
  return m;
}

// One block a row of scores (row i of a context x context matrix): softmax over j <= i,
// 0 above the diagonal.
__global__ void causal_softmax_kernel(float* probs, std::int64_t context) {
  __shared__ float fpart[threads];
  __shared__ double part[threads];
  float* row = probs + blockIdx.x * context;
  const std::int64_t i = blockIdx.x % context;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, fpart);
  double s = 0.0;
  for (std::int64_t j = threadIdx.x; j <= i; j += blockDim.x) s += expf(row[j] - mx);
  const float inv = static_cast<float>(1.0 / block_sum(s, part));
  for (std::int64_t j = threadIdx.x; j < context; j += blockDim.x) row[j] = j <= i ? expf(row[j] - mx) * inv : 0.f;
}

// One block a row: grad (dP in, dS out) = scale * P * (dP - sum_j P dP), 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(float* grad, const float* probs, std::int64_t context, float scale) {
  __shared__ double part[threads];
  float* row = grad + blockIdx.x * context;
  const float* p = probs + blockIdx.x * context;
  const std::int64_t i = blockIdx.x % context;
  double dot = 0.0;
  for (std::int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += static_cast<double>(p[j]) * row[j];
  const float d = static_cast<float>(block_sum(dot, part));
  for (std::int64_t j = threadIdx.x; j < context; j += blockDim.x) row[j] = j <= i ? scale * p[j] * (row[j] - d) : 0.f;
}

}  // namespace

void launch_relu_forward(cudaStream_t s, float* out, const float* in, std::int64_t n) {
  relu_forward_kernel<<<blocks_for(n), threads, 0, s>>>(out, in, n);
  TROUPE_GPU_LAUNCHED("relu_forward_kernel");
}
void launch_relu_backward(cudaStream_t s, float* gi, const float* go, const float* y, std::int64_t n) {
  relu_backward_kernel<<<blocks_for(n), threads, 0, s>>>(gi, go, y, n);
  TROUPE_GPU_LAUNCHED("relu_backward_kernel");
}
void launch_gelu_forward(cudaStream_t s, float* out, const float* in, std::int64_t n) {
  gelu_forward_kernel<<<blocks_for(n), threads, 0, s>>>(out, in, n);
  TROUPE_GPU_LAUNCHED("gelu_forward_kernel");
}
void launch_gelu_backward(cudaStream_t s, float* gi, const float* go, const float* x, std::int64_t n) {
  gelu_backward_kernel<<<blocks_for(n), threads, 0, s>>>(gi, go, x, n);
  TROUPE_GPU_LAUNCHED("gelu_backward_kernel");
}
void launch_dropout_forward(cudaStream_t s, float* out, float* kept, const float* in, std::int64_t n, float p,
                            std::uint64_t key) {
  dropout_forward_kernel<<<blocks_for(n), threads, 0, s>>>(out, kept, in, n, fn::dropout_scale{key, p, 1.f / (1.f - p)});
  TROUPE_GPU_LAUNCHED("dropout_forward_kernel");
}
void launch_dropout_backward(cudaStream_t s, float* gi, const float* go, const float* kept, std::int64_t n) {
  dropout_backward_kernel<<<blocks_for(n), threads, 0, s>>>(gi, go, kept, n);
  TROUPE_GPU_LAUNCHED("dropout_backward_kernel");
}
void launch_axpy(cudaStream_t s, float* out, float alpha, const float* in, std::int64_t n) {
  axpy_kernel<<<blocks_for(n), threads, 0, s>>>(out, alpha, in, n);
  TROUPE_GPU_LAUNCHED("axpy_kernel");
}
void launch_scale(cudaStream_t s, float* out, float alpha, std::int64_t n) {
  scale_kernel<<<blocks_for(n), threads, 0, s>>>(out, alpha, n);
  TROUPE_GPU_LAUNCHED("scale_kernel");
}
void launch_channel_bias_add(cudaStream_t s, float* out, const float* bias, std::int64_t batch,
                             std::int64_t channels, std::int64_t positions) {
  const std::int64_t n = batch * channels * positions;
  channel_bias_add_kernel<<<blocks_for(n), threads, 0, s>>>(out, bias, channels, positions, n);
  TROUPE_GPU_LAUNCHED("channel_bias_add_kernel");
}
void launch_bias_grad(cudaStream_t s, float* grad_bias, const float* grad_out, std::int64_t batch,
                      std::int64_t channels, std::int64_t positions) {
  if (channels == 0) return;
  bias_grad_kernel<<<static_cast<unsigned>(channels), threads, 0, s>>>(grad_bias, grad_out, batch, channels,
                                                                      positions);
  TROUPE_GPU_LAUNCHED("bias_grad_kernel");
}
void launch_maxpool2d_forward(cudaStream_t s, float* out, std::int32_t* argmax, const float* in, std::int64_t batch,
                              const troupe_pool_geom& g) {
  const std::int64_t n = batch * g.channels * ((g.in_h - g.kernel) / g.stride + 1) * ((g.in_w - g.kernel) / g.stride + 1);
  maxpool_forward_kernel<<<blocks_for(n), threads, 0, s>>>(out, argmax, in, g, n);
  TROUPE_GPU_LAUNCHED("maxpool_forward_kernel");
}
void launch_maxpool2d_backward(cudaStream_t s, float* grad_in, const float* grad_out, const std::int32_t* argmax,
                               std::int64_t batch, const troupe_pool_geom& g) {
  const std::int64_t out_plane = ((g.in_h - g.kernel) / g.stride + 1) * ((g.in_w - g.kernel) / g.stride + 1);
  const std::int64_t n = batch * g.channels * out_plane;
  maxpool_backward_kernel<<<blocks_for(n), threads, 0, s>>>(grad_in, grad_out, argmax, out_plane, g.in_h * g.in_w, n);
  TROUPE_GPU_LAUNCHED("maxpool_backward_kernel");
}
void launch_softmax_xent_forward(cudaStream_t s, float* probs, double* row_loss, const float* logits,
                                 const std::int32_t* labels, std::int64_t rows, std::int64_t classes) {
  if (rows == 0) return;
  softmax_xent_forward_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(probs, row_loss, logits, labels,
                                                                               classes);
  TROUPE_GPU_LAUNCHED("softmax_xent_forward_kernel");
}
void launch_softmax_xent_backward(cudaStream_t s, float* grad, const float* probs, const std::int32_t* labels,
                                  std::int64_t rows, std::int64_t classes, float scale) {
  const std::int64_t n = rows * classes;
  softmax_xent_backward_kernel<<<blocks_for(n), threads, 0, s>>>(grad, probs, labels, classes, scale, n);
  TROUPE_GPU_LAUNCHED("softmax_xent_backward_kernel");
}
void launch_count_correct(cudaStream_t s, unsigned long long* correct, const float* logits,
                          const std::int32_t* labels, std::int64_t rows, std::int64_t classes) {
  count_correct_kernel<<<blocks_for(rows), threads, 0, s>>>(correct, logits, labels, rows, classes);
  TROUPE_GPU_LAUNCHED("count_correct_kernel");
}
void launch_any_non_finite(cudaStream_t s, unsigned int* bad, const float* x, std::int64_t n) {
  any_non_finite_kernel<<<blocks_for(n), threads, 0, s>>>(bad, x, n);
  TROUPE_GPU_LAUNCHED("any_non_finite_kernel");
}
void launch_sgd_step(cudaStream_t s, float* p, const float* g, float* v, std::int64_t n, const troupe_sgd_args& a) {
  sgd_kernel<<<blocks_for(n), threads, 0, s>>>(p, g, v, n,
                                               fn::sgd_momentum{a.lr, a.momentum, a.weight_decay, a.nesterov != 0});
  TROUPE_GPU_LAUNCHED("sgd_kernel");
}
void launch_adam_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
                      const troupe_adam_args& a) {
  adam_kernel<<<blocks_for(n), threads, 0, s>>>(
      p, g, m, v, n, fn::adam{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.bias1, a.bias2_sqrt});
  TROUPE_GPU_LAUNCHED("adam_kernel");
}

void launch_embedding_forward(cudaStream_t s, float* out, const float* ids, const float* table, const float* pos,
                              std::int64_t batch, std::int64_t context, std::int64_t dim) {
  const std::int64_t n = batch * context * dim;
  embedding_forward_kernel<<<blocks_for(n), threads, 0, s>>>(out, ids, table, pos, context, dim, n);
  TROUPE_GPU_LAUNCHED("embedding_forward_kernel");
}
void launch_embedding_backward(cudaStream_t s, float* grad_table, float* grad_pos, const float* grad_out,
                               const float* ids, std::int64_t batch, std::int64_t context, std::int64_t vocab,
                               std::int64_t dim) {
  embedding_backward_table_kernel<<<blocks_for(vocab * dim), threads, 0, s>>>(grad_table, grad_out, ids,
                                                                              batch * context, dim, vocab * dim);
  TROUPE_GPU_LAUNCHED("embedding_backward_table_kernel");
  embedding_backward_positions_kernel<<<blocks_for(context * dim), threads, 0, s>>>(grad_pos, grad_out, batch,
                                                                                     context, dim, context * dim);
  TROUPE_GPU_LAUNCHED("embedding_backward_positions_kernel");
}
void launch_causal_softmax(cudaStream_t s, float* probs, std::int64_t rows, std::int64_t context) {
  causal_softmax_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(probs, context);
  TROUPE_GPU_LAUNCHED("causal_softmax_kernel");
}
void launch_causal_softmax_backward(cudaStream_t s, float* grad, const float* probs, std::int64_t rows,
                                    std::int64_t context, float scale) {
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(grad, probs, context, scale);
  TROUPE_GPU_LAUNCHED("causal_softmax_backward_kernel");
}

}  // namespace troupe::gpu
