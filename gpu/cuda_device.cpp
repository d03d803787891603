// The CUDA backend's entries for contexts, devices, memory and transfers.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>

#include "gpu/cuda_context.hpp"
#include "gpu/cuda_entries.hpp"

namespace troupe::gpu {

namespace {

std::string no_device_reason(cudaError_t s) {
  switch (s) {
    case cudaErrorInsufficientDriver:
      return "no usable NVIDIA driver (cudaGetDeviceCount: cudaErrorInsufficientDriver: the driver is missing or "
             "older than the CUDA 13 runtime)";
    case cudaErrorNoDevice:
      return "the NVIDIA driver reports no CUDA device (cudaErrorNoDevice)";
    default:
      return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(s) + ": " + cudaGetErrorString(s);
  }
}

int fp32_cores_per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return 64;  // A100
  if (major >= 8) return 128;               // sm_86/89, H100 (sm_90), Blackwell
  if (major == 7) return 64;
  return 0;  // unknown: no peak reported
}

}  // namespace

namespace entry {

int open(int index, void** out) {
  return guarded([&] {
    auto c = std::make_unique<context>();
    c->device = index;
    TROUPE_GPU(cudaSetDevice(index));
    c->compute = make_stream();
    c->comm = make_stream();
    c->compute_ready = make_event();
    c->comm_done = make_event();
    cublasHandle_t b{};
    TROUPE_GPU(cublasCreate(&b));
    c->blas = cublas_handle(b);
    TROUPE_GPU(cublasSetStream(b, c->compute.get()));
    TROUPE_GPU(cublasSetMathMode(b, CUBLAS_DEFAULT_MATH));
    cudnnHandle_t d{};
    TROUPE_GPU(cudnnCreate(&d));
    c->dnn = cudnn_handle(d);
    TROUPE_GPU(cudnnSetStream(d, c->compute.get()));
    c->alloc = std::make_unique<caching_allocator>(
        [](std::size_t bytes) -> void* {
          void* p = nullptr;
          if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError();  // clear the sticky out-of-memory status
            return nullptr;
          }
          return p;
        },
        [](void* p) { (void)cudaFree(p); });
    *out = c.release();
  });
}

// Frees the plans and buffers first, then the allocator, the handles and the streams.
void close(void* ctx) {
  auto* c = static_cast<context*>(ctx);
  (void)cudaSetDevice(c->device);
  (void)cudaDeviceSynchronize();
  delete c;
}

const char* last_error() { return backend_last_error().c_str(); }

int device_count(int* count) {
  return guarded([&] {
    int n = 0;
    const cudaError_t s = cudaGetDeviceCount(&n);  // leaves n untouched on failure
    if (s != cudaSuccess) {
      (void)cudaGetLastError();
      throw gpu_error(no_device_reason(s));
    }
    if (n <= 0) throw gpu_error("the NVIDIA driver is loaded but reports no CUDA device");
    *count = n;
  });
}

int device_info(void* ctx, troupe_device_info* info) {
  return on_device(ctx, [&](context& c) {
    cudaDeviceProp p{};
    TROUPE_GPU(cudaGetDeviceProperties(&p, c.device));
    *info = {};
    std::string(p.name).copy(info->name, sizeof info->name - 1);
    info->index = c.device;
    TROUPE_GPU(cudaGetDeviceCount(&info->device_count));
    info->compute_major = p.major;
    info->compute_minor = p.minor;
    info->multiprocessors = p.multiProcessorCount;
    info->total_memory_bytes = p.totalGlobalMem;
    int clock_khz = 0, mem_khz = 0, bus_bits = 0;
    TROUPE_GPU(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, c.device));
    TROUPE_GPU(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, c.device));
    TROUPE_GPU(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, c.device));
    info->peak_fp32_tflops = 2.0 * p.multiProcessorCount * fp32_cores_per_sm(p.major, p.minor) * clock_khz * 1e3 / 1e12;
    info->peak_bandwidth_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  });
}

int set_tf32(void* ctx, int enabled) {
  return on_device(ctx, [&](context& c) {
    c.tf32 = enabled != 0;
    TROUPE_GPU(cublasSetMathMode(c.blas.get(), c.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    c.convs.clear();  // plans carry the math type
  });
}

int alloc(void* ctx, size_t bytes, void** ptr) {
  return on_device(ctx, [&](context& c) {
    *ptr = c.alloc->allocate(bytes);
    if (!*ptr && bytes)
      throw gpu_error("cudaMalloc: out of device memory for " + std::to_string(bytes) + " bytes (" +
                      std::to_string(c.alloc->stats().bytes_in_use) + " in use)");
  });
}

int release(void* ctx, void* ptr) {
  return guarded([&] {
    if (ptr && !ctx_of(ctx).alloc->release(ptr)) throw gpu_error("release of a pointer this context never gave");
  });
}

int memory_stats(void* ctx, troupe_memory_stats* s) {
  const auto& a = ctx_of(ctx).alloc->stats();
  *s = {a.bytes_in_use, a.bytes_cached, a.allocations, a.cache_hits, a.device_mallocs};
  return 0;
}

// Through the pinned buffer; complete on return (the caller may free src).
int upload(void* ctx, void* dst, const void* src, size_t bytes) {
  return on_device(ctx, [&](context& c) {
    void* pinned = c.staging.reserve(bytes);
    TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));  // the staging buffer is free again
    std::memcpy(pinned, src, bytes);
    TROUPE_GPU(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, c.compute.get()));
    TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
  });
}

int download(void* ctx, void* dst, const void* src, size_t bytes) {
  return on_device(ctx, [&](context& c) { download_sync(c, dst, src, bytes); });
}

int fill_zero(void* ctx, void* p, size_t bytes) {
  return on_device(ctx, [&](context& c) { TROUPE_GPU(cudaMemsetAsync(p, 0, bytes, c.compute.get())); });
}

int synchronize(void* ctx) {
  return on_device(ctx, [&](context& c) {
    TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
    TROUPE_GPU(cudaStreamSynchronize(c.comm.get()));
  });
}

int copy(void* ctx, void* dst, const void* src, size_t bytes) {
  return on_device(ctx, [&](context& c) {
    TROUPE_GPU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.compute.get()));
  });
}

}  // namespace entry

}  // namespace troupe::gpu
