// LayerNorm's and BatchNorm's CUDA kernels: one block a row (LayerNorm) or a channel
// (BatchNorm) for statistics and parameter gradients, summed in double in a fixed order
// as the host ops do, so results do not depend on scheduling.
#include <cmath>

#include "gpu/cuda_status.hpp"
#include "gpu/kernel_grid.cuh"
#include "gpu/kernels.hpp"

namespace troupe::gpu {

namespace {

// One block a row: its mean and 1 / sqrt(biased variance + eps), in double as the host does.
__device__ float2 row_stats(const float* x, std::int64_t cols, float eps, double* part) {
  double s = 0.0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += x[c];
  const double mean = block_sum(s, part) / static_cast<double>(cols);
  double q = 0.0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) q += (x[c] - mean) * (x[c] - mean);
  const double var = block_sum(q, part) / static_cast<double>(cols);
  return make_float2(static_cast<float>(mean), static_cast<float>(1.0 / sqrt(var + eps)));
}

__global__ void layer_norm_forward_kernel(float* out, const float* in, const float* gamma, const float* beta,
                                          std::int64_t cols, float eps) {
  __shared__ double part[threads];
  const float* x = in + blockIdx.x * cols;
  float* y = out + blockIdx.x * cols;
  const float2 st = row_stats(x, cols, eps, part);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (x[c] - st.x) * st.y * gamma[c] + beta[c];
}

// Batch normalisation: element i of channel c's batch x positions elements.
__device__ std::int64_t channel_element(std::int64_t i, std::int64_t c, std::int64_t channels, std::int64_t positions) {
  return (i / positions * channels + c) * positions + i % positions;
}

// One block a channel: its mean and 1 / sqrt(biased variance + eps), in double as the host does.
__global__ void batch_norm_forward_kernel(float* out, float* stats, const float* in, const float* gamma,
                                          const float* beta, std::int64_t batch, std::int64_t channels,
                                          std::int64_t positions, float eps) {
  __shared__ double part[threads];
  const std::int64_t c = blockIdx.x, n = batch * positions;
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += in[channel_element(i, c, channels, positions)];
  const double mean = block_sum(s, part) / static_cast<double>(n);
  double q = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = in[channel_element(i, c, channels, positions)] - mean;
    q += d * d;
  }
  const double var = block_sum(q, part) / static_cast<double>(n);
  const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / sqrt(var + eps));
  if (threadIdx.x == 0) {
    stats[c] = m;
    stats[channels + c] = rstd;
  }
  const float scale = rstd * gamma[c], shift = beta[c];
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int64_t e = channel_element(i, c, channels, positions);
    out[e] = (in[e] - m) * scale + shift;
  }
}

__global__ void batch_norm_inference_kernel(float* out, const float* in, const float* gamma, const float* beta,
                                            const float* population, std::int64_t n, std::int64_t channels,
                                            std::int64_t positions, float eps) {
  GRID_STRIDE(i, n) {
    const std::int64_t c = i / positions % channels;
    const float rstd = 1.f / sqrtf(population[channels + c] + eps);
    out[i] = (in[i] - population[c]) * (rstd * gamma[c]) + beta[c];
  }
}

// One block a channel: grad_gamma and grad_beta, then grad_in when asked.
__global__ void batch_norm_backward_kernel(float* grad_in, float* grad_gamma, float* grad_beta, const float* grad_out,
                                           const float* in, const float* gamma, const float* stats,
                                           std::int64_t batch, std::int64_t channels, std::int64_t positions) {
  __shared__ double part[threads];
  const std::int64_t c = blockIdx.x, n = batch * positions;
  const float m = stats[c], rstd = stats[channels + c], gm = gamma[c];
  double dy_sum = 0.0, dyx_sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int64_t e = channel_element(i, c, channels, positions);
    dy_sum += grad_out[e];
    dyx_sum += grad_out[e] * ((in[e] - m) * rstd);
  }
  const double sdy = block_sum(dy_sum, part), sdyx = block_sum(dyx_sum, part);
  if (threadIdx.x == 0) {
    grad_gamma[c] += static_cast<float>(sdyx);
    grad_beta[c] += static_cast<float>(sdy);
  }
  if (!grad_in) return;
  const float mg = static_cast<float>(gm * sdy / static_cast<double>(n));
  const float mgx = static_cast<float>(gm * sdyx / static_cast<double>(n));
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int64_t e = channel_element(i, c, channels, positions);
    const float xhat = (in[e] - m) * rstd;
    grad_in[e] = rstd * (grad_out[e] * gm - mg - xhat * mgx);
  }
}

// One block a row: the row's statistics into stats (mean, rstd), and grad_in when asked.
__global__ void layer_norm_backward_rows_kernel(float* grad_in, float2* stats, const float* grad_out, const float* in,
                                                const float* gamma, std::int64_t cols, float eps) {
  __shared__ double part[threads];
  const float* x = in + blockIdx.x * cols;
  const float* dy = grad_out + blockIdx.x * cols;
  const float2 st = row_stats(x, cols, eps, part);
  if (threadIdx.x == 0) stats[blockIdx.x] = st;
  if (!grad_in) return;
  double g = 0.0, gx = 0.0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (x[c] - st.x) * st.y;
    g += dy[c] * gamma[c];
    gx += dy[c] * gamma[c] * xhat;
  }
  const float mg = static_cast<float>(block_sum(g, part) / static_cast<double>(cols));
  const float mgx = static_cast<float>(block_sum(gx, part) / static_cast<double>(cols));
  float* dx = grad_in + blockIdx.x * cols;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (x[c] - st.x) * st.y;
    dx[c] = st.y * (dy[c] * gamma[c] - mg - xhat * mgx);
  }
}

// One block a column: grad_gamma and grad_beta summed over the rows in a fixed order.
__global__ void layer_norm_backward_params_kernel(float* grad_gamma, float* grad_beta, const float2* stats,
                                                  const float* grad_out, const float* in, std::int64_t rows,
                                                  std::int64_t cols) {
  __shared__ double part[threads];
  const std::int64_t c = blockIdx.x;
  double dg = 0.0, db = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float dy = grad_out[r * cols + c];
    dg += dy * ((in[r * cols + c] - stats[r].x) * stats[r].y);
    db += dy;
  }
  const double sg = block_sum(dg, part), sb = block_sum(db, part);
  if (threadIdx.x == 0) {
    grad_gamma[c] += static_cast<float>(sg);
    grad_beta[c] += static_cast<float>(sb);
  }
}

}  // namespace

void launch_layer_norm_forward(cudaStream_t s, float* out, const float* in, const float* gamma, const float* beta,
                               std::int64_t rows, std::int64_t cols, float eps) {
  layer_norm_forward_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(out, in, gamma, beta, cols, eps);
  TROUPE_GPU_LAUNCHED("layer_norm_forward_kernel");
}
void launch_layer_norm_backward(cudaStream_t s, float* grad_in, float* grad_gamma, float* grad_beta, void* stats,
                                const float* grad_out, const float* in, const float* gamma, std::int64_t rows,
                                std::int64_t cols, float eps) {
  auto* st = static_cast<float2*>(stats);
  layer_norm_backward_rows_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(grad_in, st, grad_out, in, gamma,
                                                                                 cols, eps);
  TROUPE_GPU_LAUNCHED("layer_norm_backward_rows_kernel");
  layer_norm_backward_params_kernel<<<static_cast<unsigned>(cols), threads, 0, s>>>(grad_gamma, grad_beta, st,
                                                                                   grad_out, in, rows, cols);
  TROUPE_GPU_LAUNCHED("layer_norm_backward_params_kernel");
}
void launch_batch_norm_forward(cudaStream_t s, float* out, float* stats, const float* in, const float* gamma,
                               const float* beta, std::int64_t batch, std::int64_t channels, std::int64_t positions,
                               float eps) {
  batch_norm_forward_kernel<<<static_cast<unsigned>(channels), threads, 0, s>>>(out, stats, in, gamma, beta, batch,
                                                                                channels, positions, eps);
  TROUPE_GPU_LAUNCHED("batch_norm_forward_kernel");
}
void launch_batch_norm_inference(cudaStream_t s, float* out, const float* in, const float* gamma, const float* beta,
                                 const float* population, std::int64_t batch, std::int64_t channels,
                                 std::int64_t positions, float eps) {
  const std::int64_t n = batch * channels * positions;
  batch_norm_inference_kernel<<<blocks_for(n), threads, 0, s>>>(out, in, gamma, beta, population, n, channels,
                                                                 positions, eps);
  TROUPE_GPU_LAUNCHED("batch_norm_inference_kernel");
}
void launch_batch_norm_backward(cudaStream_t s, float* grad_in, float* grad_gamma, float* grad_beta,
                                const float* grad_out, const float* in, const float* gamma, const float* stats,
                                std::int64_t batch, std::int64_t channels, std::int64_t positions) {
  batch_norm_backward_kernel<<<static_cast<unsigned>(channels), threads, 0, s>>>(
      grad_in, grad_gamma, grad_beta, grad_out, in, gamma, stats, batch, channels, positions);
  TROUPE_GPU_LAUNCHED("batch_norm_backward_kernel");
}

}  // namespace troupe::gpu
