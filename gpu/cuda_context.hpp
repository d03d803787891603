// What every entry of the CUDA backend's table shares: a context (one device: a compute
// and a communication stream with events to order them, cuBLAS and cuDNN handles, the
// caching allocator, a pinned staging buffer and cuDNN convolution plans cached by
// shape), running an entry on its device, call-long scratch blocks and synchronous
// downloads. Private to the module (gpu/cuda_*.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "gpu/caching_allocator.hpp"
#include "gpu/conv_plan.hpp"
#include "gpu/cuda_status.hpp"
#include "gpu/handles.hpp"
#include "tensor/backend_abi.h"
#include "tensor/backend_guard.hpp"

namespace troupe::gpu {

struct context {
  int device = 0;
  stream compute, comm;
  event compute_ready, comm_done;
  cublas_handle blas;
  cudnn_handle dnn;
  std::unique_ptr<caching_allocator> alloc;
  pinned_buffer staging;
  conv_plan_cache convs;
  bool tf32 = false;
  std::int64_t timeout_ms = 60000;  // collectives: set by collective_open
};

inline context& ctx_of(void* ctx) { return *static_cast<context*>(ctx); }

// Runs `body` with the context's device current.
template <class F>
int on_device(void* ctx, F&& body) {
  return guarded([&] {
    TROUPE_GPU(cudaSetDevice(ctx_of(ctx).device));
    body(ctx_of(ctx));
  });
}

// A scratch block from the allocator for the length of one call (stream-ordered reuse is
// safe: every op of a context runs on its compute stream).
class scratch {
 public:
  scratch(context& c, std::size_t bytes) : c_(c), p_(c.alloc->allocate(bytes)) {
    if (!p_ && bytes) throw gpu_error("out of device memory for a " + std::to_string(bytes) + "-byte scratch buffer");
  }
  ~scratch() { c_.alloc->release(p_); }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  context& c_;
  void* p_;
};

inline void download_sync(context& c, void* dst, const void* src, std::size_t bytes) {
  void* pinned = c.staging.reserve(bytes);
  TROUPE_GPU(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, c.compute.get()));
  TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
  std::memcpy(dst, pinned, bytes);
}

}  // namespace troupe::gpu
