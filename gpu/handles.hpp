// RAII owners for every CUDA-side handle the backend holds: streams, events, cuBLAS and
// cuDNN handles, cuDNN descriptors, NCCL communicators and pinned host buffers. Each is
// created checked and destroyed exactly once; destruction never throws (a failure there
// has nowhere to go, so its status is dropped on purpose).
#pragma once

#include <cstddef>
#include <utility>

#include "gpu/cuda_status.hpp"

namespace troupe::gpu {

// A move-only owner of a handle H released by Release.
template <class H, void (*Release)(H)>
class unique_handle {
 public:
  unique_handle() = default;
  explicit unique_handle(H h) : h_(h) {}
  unique_handle(unique_handle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;
  ~unique_handle() { reset(); }

  H get() const { return h_; }
  // Gives up ownership without releasing (for a handle already torn down another way).
  H release() { return std::exchange(h_, H{}); }
  explicit operator bool() const { return h_ != H{}; }
  void reset() {
    if (h_ != H{}) Release(std::exchange(h_, H{}));
  }

 private:
  H h_{};
};

inline void release_stream(cudaStream_t s) { (void)cudaStreamDestroy(s); }
inline void release_event(cudaEvent_t e) { (void)cudaEventDestroy(e); }
inline void release_cublas(cublasHandle_t h) { (void)cublasDestroy(h); }
inline void release_cudnn(cudnnHandle_t h) { (void)cudnnDestroy(h); }
inline void release_tensor_desc(cudnnTensorDescriptor_t d) { (void)cudnnDestroyTensorDescriptor(d); }
inline void release_filter_desc(cudnnFilterDescriptor_t d) { (void)cudnnDestroyFilterDescriptor(d); }
inline void release_conv_desc(cudnnConvolutionDescriptor_t d) { (void)cudnnDestroyConvolutionDescriptor(d); }
inline void release_nccl(ncclComm_t c) { (void)ncclCommDestroy(c); }
inline void release_pinned(void* p) { (void)cudaFreeHost(p); }

using stream = unique_handle<cudaStream_t, release_stream>;
using event = unique_handle<cudaEvent_t, release_event>;
using cublas_handle = unique_handle<cublasHandle_t, release_cublas>;
using cudnn_handle = unique_handle<cudnnHandle_t, release_cudnn>;
using tensor_desc = unique_handle<cudnnTensorDescriptor_t, release_tensor_desc>;
using filter_desc = unique_handle<cudnnFilterDescriptor_t, release_filter_desc>;
using conv_desc = unique_handle<cudnnConvolutionDescriptor_t, release_conv_desc>;
using nccl_comm = unique_handle<ncclComm_t, release_nccl>;

inline stream make_stream() {
  cudaStream_t s{};
  TROUPE_GPU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return stream(s);
}
inline event make_event() {
  cudaEvent_t e{};
  TROUPE_GPU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return event(e);
}
inline tensor_desc make_tensor_desc() {
  cudnnTensorDescriptor_t d{};
  TROUPE_GPU(cudnnCreateTensorDescriptor(&d));
  return tensor_desc(d);
}
inline filter_desc make_filter_desc() {
  cudnnFilterDescriptor_t d{};
  TROUPE_GPU(cudnnCreateFilterDescriptor(&d));
  return filter_desc(d);
}
inline conv_desc make_conv_desc() {
  cudnnConvolutionDescriptor_t d{};
  TROUPE_GPU(cudnnCreateConvolutionDescriptor(&d));
  return conv_desc(d);
}

// Page-locked host memory, so copies to and from the device run at full speed and can
// be asynchronous. Grows on demand; never shrinks.
class pinned_buffer {
 public:
  void* reserve(std::size_t bytes) {
    if (bytes > size_) {
      mem_.reset();
      void* p = nullptr;
      TROUPE_GPU(cudaMallocHost(&p, bytes));
      mem_ = unique_handle<void*, release_pinned>(p);
      size_ = bytes;
    }
    return mem_.get();
  }

 private:
  unique_handle<void*, release_pinned> mem_;
  std::size_t size_ = 0;
};

}  // namespace troupe::gpu
