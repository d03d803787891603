// What Troupe's CUDA kernels share: 256 threads a block, grid-stride loops, the grid for
// n elements, and a block-wide sum in double.
#pragma once

#include <cstdint>

namespace troupe::gpu {

constexpr int threads = 256;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// The sum of every thread's v over the block (threads of them), returned to all threads.
__device__ inline double block_sum(double v, double* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = threads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double total = part[0];
  __syncthreads();
  return total;
}

}  // namespace troupe::gpu
