// The CUDA backend's function table, exported from libtroupe_cuda.so as
// troupe_backend_entry. A context is one device: a compute and a communication stream
// with events to order them, cuBLAS and cuDNN handles, the caching allocator, a pinned
// staging buffer and cuDNN convolution plans cached by shape. Linear layers are cuBLAS
// sgemm, convolutions cuDNN's legacy API, everything else Troupe's kernels (kernels.cu);
// collectives are NCCL. Every status is checked (cuda_status.hpp); a failure becomes the
// entry's non-zero return and the message last_error gives.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu/caching_allocator.hpp"
#include "gpu/conv_plan.hpp"
#include "gpu/cuda_status.hpp"
#include "gpu/handles.hpp"
#include "gpu/kernels.hpp"
#include "tensor/backend_abi.h"
#include "tensor/backend_guard.hpp"

namespace troupe::gpu {

namespace {

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

context& ctx_of(void* ctx) { return *static_cast<context*>(ctx); }

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
  T* as() const { return static_cast<T*>(p_); }

 private:
  context& c_;
  void* p_;
};

void download_sync(context& c, void* dst, const void* src, std::size_t bytes) {
  void* pinned = c.staging.reserve(bytes);
  TROUPE_GPU(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, c.compute.get()));
  TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
  std::memcpy(dst, pinned, bytes);
}

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
  return 0;                                  // unknown: no peak reported
}

// NCCL in non-blocking mode: polls the communicator until its pending work is accepted;
// at the deadline (a member that died) the communicator is aborted, never waited on.
void await_nccl(nccl_comm& comm, std::int64_t timeout_ms, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    TROUPE_GPU(ncclCommGetAsyncError(comm.get(), &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) {
      (void)ncclCommAbort(comm.release());
      if (state != ncclInProgress) TROUPE_GPU(state);
      throw gpu_error(std::string(what) + ": no progress within " + std::to_string(timeout_ms) +
                      " ms; a member of the local group is gone, so the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Waits for `done` on the communication stream the same way.
void await_event(nccl_comm& comm, cudaEvent_t done, std::int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) TROUPE_GPU(q);
    ncclResult_t state = ncclSuccess;
    TROUPE_GPU(ncclCommGetAsyncError(comm.get(), &state));
    if ((state != ncclSuccess && state != ncclInProgress) || std::chrono::steady_clock::now() > deadline) {
      (void)ncclCommAbort(comm.release());
      if (state != ncclSuccess && state != ncclInProgress) TROUPE_GPU(state);
      throw gpu_error("ncclAllReduce: not finished within " + std::to_string(timeout_ms) +
                      " ms; a member of the local group is gone, so the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

const troupe_backend_v1 table = {
    TROUPE_BACKEND_ABI_VERSION,
    "cuda",
    // open
    [](int index, void** out) {
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
    },
    // close: the plans and buffers first, then the allocator, handles and streams
    [](void* ctx) {
      auto* c = static_cast<context*>(ctx);
      (void)cudaSetDevice(c->device);
      (void)cudaDeviceSynchronize();
      delete c;
    },
    [] { return backend_last_error().c_str(); },
    // device_count
    [](int* count) {
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
    },
    // device_info
    [](void* ctx, troupe_device_info* info) {
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
    },
    // set_tf32
    [](void* ctx, int enabled) {
      return on_device(ctx, [&](context& c) {
        c.tf32 = enabled != 0;
        TROUPE_GPU(cublasSetMathMode(c.blas.get(), c.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        c.convs.clear();  // plans carry the math type
      });
    },
    // alloc
    [](void* ctx, size_t bytes, void** ptr) {
      return on_device(ctx, [&](context& c) {
        *ptr = c.alloc->allocate(bytes);
        if (!*ptr && bytes)
          throw gpu_error("cudaMalloc: out of device memory for " + std::to_string(bytes) + " bytes (" +
                          std::to_string(c.alloc->stats().bytes_in_use) + " in use)");
      });
    },
    // release
    [](void* ctx, void* ptr) {
      return guarded([&] {
        if (ptr && !ctx_of(ctx).alloc->release(ptr)) throw gpu_error("release of a pointer this context never gave");
      });
    },
    // memory_stats
    [](void* ctx, troupe_memory_stats* s) {
      const auto& a = ctx_of(ctx).alloc->stats();
      *s = {a.bytes_in_use, a.bytes_cached, a.allocations, a.cache_hits, a.device_mallocs};
      return 0;
    },
    // upload: through the pinned buffer, complete on return (the caller may free src)
    [](void* ctx, void* dst, const void* src, size_t bytes) {
      return on_device(ctx, [&](context& c) {
        void* pinned = c.staging.reserve(bytes);
        TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));  // the staging buffer is free again
        std::memcpy(pinned, src, bytes);
        TROUPE_GPU(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, c.compute.get()));
        TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
      });
    },
    // download
    [](void* ctx, void* dst, const void* src, size_t bytes) {
      return on_device(ctx, [&](context& c) { download_sync(c, dst, src, bytes); });
    },
    // fill_zero
    [](void* ctx, void* p, size_t bytes) {
      return on_device(ctx, [&](context& c) { TROUPE_GPU(cudaMemsetAsync(p, 0, bytes, c.compute.get())); });
    },
    // synchronize
    [](void* ctx) {
      return on_device(ctx, [&](context& c) {
        TROUPE_GPU(cudaStreamSynchronize(c.compute.get()));
        TROUPE_GPU(cudaStreamSynchronize(c.comm.get()));
      });
    },
    // gemm: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
    [](void* ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
       const float* b, int64_t ldb, float beta, float* c_out, int64_t ldc) {
      return on_device(ctx, [&](context& c) {
        if (m == 0 || n == 0) return;
        TROUPE_GPU(cublasSgemm(c.blas.get(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                               static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c_out, static_cast<int>(ldc)));
      });
    },
    // bias_add
    [](void* ctx, float* out, const float* bias, int64_t rows, int64_t cols) {
      return on_device(ctx, [&](context& c) { launch_channel_bias_add(c.compute.get(), out, bias, rows, cols, 1); });
    },
    // channel_bias_add
    [](void* ctx, float* out, const float* bias, int64_t batch, int64_t channels, int64_t positions) {
      return on_device(ctx, [&](context& c) {
        launch_channel_bias_add(c.compute.get(), out, bias, batch, channels, positions);
      });
    },
    // bias_grad
    [](void* ctx, float* grad_bias, const float* grad_out, int64_t batch, int64_t channels, int64_t positions) {
      return on_device(ctx, [&](context& c) {
        launch_bias_grad(c.compute.get(), grad_bias, grad_out, batch, channels, positions);
      });
    },
    [](void* ctx, float* out, const float* in, int64_t n) {
      return on_device(ctx, [&](context& c) { launch_relu_forward(c.compute.get(), out, in, n); });
    },
    [](void* ctx, float* grad_in, const float* grad_out, const float* out, int64_t n) {
      return on_device(ctx, [&](context& c) { launch_relu_backward(c.compute.get(), grad_in, grad_out, out, n); });
    },
    [](void* ctx, float* out, float alpha, const float* in, int64_t n) {
      return on_device(ctx, [&](context& c) { launch_axpy(c.compute.get(), out, alpha, in, n); });
    },
    [](void* ctx, float* out, float alpha, int64_t n) {
      return on_device(ctx, [&](context& c) { launch_scale(c.compute.get(), out, alpha, n); });
    },
    // conv2d_forward
    [](void* ctx, float* out, const float* in, const float* weight, const float* bias, int64_t batch,
       const troupe_conv_geom* g) {
      return on_device(ctx, [&](context& c) {
        const conv_plan& p = c.convs.get(c.dnn.get(), batch, *g, c.tf32);
        scratch ws(c, p.forward_workspace);
        const float one = 1.f, zero = 0.f;
        TROUPE_GPU(cudnnConvolutionForward(c.dnn.get(), &one, p.x.get(), in, p.w.get(), weight, p.conv.get(),
                                           p.forward_algo, ws.as<void>(), p.forward_workspace, &zero, p.y.get(), out));
        if (bias) {
          const int64_t positions = p.out_h * p.out_w;
          launch_channel_bias_add(c.compute.get(), out, bias, batch, g->out_channels, positions);
        }
      });
    },
    // conv2d_backward
    [](void* ctx, float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
       const float* weight, int64_t batch, const troupe_conv_geom* g) {
      return on_device(ctx, [&](context& c) {
        const conv_plan& p = c.convs.get(c.dnn.get(), batch, *g, c.tf32);
        const float one = 1.f, zero = 0.f;
        {
          scratch ws(c, p.filter_workspace);
          TROUPE_GPU(cudnnConvolutionBackwardFilter(c.dnn.get(), &one, p.x.get(), in, p.y.get(), grad_out,
                                                    p.conv.get(), p.filter_algo, ws.as<void>(), p.filter_workspace,
                                                    &one, p.w.get(), grad_weight));
        }
        if (grad_bias)
          launch_bias_grad(c.compute.get(), grad_bias, grad_out, batch, g->out_channels, p.out_h * p.out_w);
        if (grad_in) {
          scratch ws(c, p.data_workspace);
          TROUPE_GPU(cudnnConvolutionBackwardData(c.dnn.get(), &one, p.w.get(), weight, p.y.get(), grad_out,
                                                  p.conv.get(), p.data_algo, ws.as<void>(), p.data_workspace, &zero,
                                                  p.x.get(), grad_in));
        }
      });
    },
    // maxpool2d_forward
    [](void* ctx, float* out, int32_t* argmax, const float* in, int64_t batch, const troupe_pool_geom* g) {
      return on_device(ctx, [&](context& c) { launch_maxpool2d_forward(c.compute.get(), out, argmax, in, batch, *g); });
    },
    // maxpool2d_backward
    [](void* ctx, float* grad_in, const float* grad_out, const int32_t* argmax, int64_t batch,
       const troupe_pool_geom* g) {
      return on_device(ctx, [&](context& c) {
        TROUPE_GPU(cudaMemsetAsync(grad_in, 0, sizeof(float) * batch * g->channels * g->in_h * g->in_w,
                                   c.compute.get()));
        launch_maxpool2d_backward(c.compute.get(), grad_in, grad_out, argmax, batch, *g);
      });
    },
    // softmax_xent_forward: per-row losses summed on the host in row order (deterministic)
    [](void* ctx, float* probs, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
       double* loss) {
      return on_device(ctx, [&](context& c) {
        if (rows == 0) {
          *loss = 0.0;
          return;
        }
        scratch row_loss(c, sizeof(double) * rows);
        launch_softmax_xent_forward(c.compute.get(), probs, row_loss.as<double>(), logits, labels, rows, classes);
        std::vector<double> host(static_cast<std::size_t>(rows));
        download_sync(c, host.data(), row_loss.as<double>(), sizeof(double) * rows);
        double sum = 0.0;
        for (double l : host) sum += l;
        *loss = sum / static_cast<double>(rows);
      });
    },
    [](void* ctx, float* grad, const float* probs, const int32_t* labels, int64_t rows, int64_t classes,
       float s) {
      return on_device(ctx, [&](context& c) {
        launch_softmax_xent_backward(c.compute.get(), grad, probs, labels, rows, classes, s);
      });
    },
    // count_correct
    [](void* ctx, const float* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t* correct) {
      return on_device(ctx, [&](context& c) {
        scratch counter(c, sizeof(unsigned long long));
        TROUPE_GPU(cudaMemsetAsync(counter.as<void>(), 0, sizeof(unsigned long long), c.compute.get()));
        launch_count_correct(c.compute.get(), counter.as<unsigned long long>(), logits, labels, rows, classes);
        unsigned long long n = 0;
        download_sync(c, &n, counter.as<void>(), sizeof n);
        *correct = static_cast<int64_t>(n);
      });
    },
    // all_finite
    [](void* ctx, const float* x, int64_t n, int* finite) {
      return on_device(ctx, [&](context& c) {
        scratch flag(c, sizeof(unsigned int));
        TROUPE_GPU(cudaMemsetAsync(flag.as<void>(), 0, sizeof(unsigned int), c.compute.get()));
        launch_any_non_finite(c.compute.get(), flag.as<unsigned int>(), x, n);
        unsigned int bad = 0;
        download_sync(c, &bad, flag.as<void>(), sizeof bad);
        *finite = bad == 0 ? 1 : 0;
      });
    },
    [](void* ctx, float* p, const float* g, float* v, int64_t n, const troupe_sgd_args* a) {
      return on_device(ctx, [&](context& c) { launch_sgd_step(c.compute.get(), p, g, v, n, *a); });
    },
    [](void* ctx, float* p, const float* g, float* m, float* v, int64_t n, const troupe_adam_args* a) {
      return on_device(ctx, [&](context& c) { launch_adam_step(c.compute.get(), p, g, m, v, n, *a); });
    },
    // collective_id
    [](unsigned char* id, size_t capacity, size_t* size) {
      return guarded([&] {
        if (capacity < sizeof(ncclUniqueId)) throw gpu_error("collective id buffer smaller than NCCL_UNIQUE_ID_BYTES");
        ncclUniqueId u{};
        TROUPE_GPU(ncclGetUniqueId(&u));
        std::memcpy(id, &u, sizeof u);
        *size = sizeof u;
      });
    },
    // collective_open: non-blocking NCCL init, polled until ready or the deadline
    [](void* ctx, const unsigned char* id, size_t size, int ranks, int rank, int64_t timeout_ms, void** comm) {
      return on_device(ctx, [&](context&) {
        if (size != sizeof(ncclUniqueId))
          throw gpu_error("an NCCL unique id is " + std::to_string(sizeof(ncclUniqueId)) + " bytes, not " +
                          std::to_string(size));
        if (ranks < 1 || rank < 0 || rank >= ranks) throw gpu_error("NCCL rank out of range");
        ncclUniqueId u{};
        std::memcpy(&u, id, sizeof u);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t raw{};
        const ncclResult_t started = ncclCommInitRankConfig(&raw, ranks, u, rank, &config);
        if (started != ncclSuccess && started != ncclInProgress) TROUPE_GPU(started);
        auto owned = std::make_unique<nccl_comm>(raw);
        ctx_of(ctx).timeout_ms = timeout_ms;
        await_nccl(*owned, timeout_ms, "ncclCommInitRankConfig (waiting for every member of the local group)");
        *comm = owned.release();
      });
    },
    // collective_close
    [](void* comm) { delete static_cast<nccl_comm*>(comm); },
    // all_reduce_sum: grouped, on the communication stream after the compute stream's
    // work; returns when the sums are in place, or aborts the communicator at the deadline
    [](void* ctx, void* comm, float* const* buffers, const int64_t* counts, int buffer_count) {
      return on_device(ctx, [&](context& c) {
        auto* nc = static_cast<nccl_comm*>(comm);
        TROUPE_GPU(cudaEventRecord(c.compute_ready.get(), c.compute.get()));
        TROUPE_GPU(cudaStreamWaitEvent(c.comm.get(), c.compute_ready.get(), 0));
        const auto accepted = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
        ncclResult_t r = ncclGroupStart();
        for (int i = 0; i < buffer_count && accepted(r); ++i)
          r = ncclAllReduce(buffers[i], buffers[i], static_cast<size_t>(counts[i]), ncclFloat, ncclSum, nc->get(),
                            c.comm.get());
        const ncclResult_t ended = ncclGroupEnd();
        if (!accepted(r)) TROUPE_GPU(r);
        if (!accepted(ended)) TROUPE_GPU(ended);
        await_nccl(*nc, c.timeout_ms, "ncclAllReduce enqueue");
        TROUPE_GPU(cudaEventRecord(c.comm_done.get(), c.comm.get()));
        await_event(*nc, c.comm_done.get(), c.timeout_ms);
        TROUPE_GPU(cudaStreamWaitEvent(c.compute.get(), c.comm_done.get(), 0));
      });
    },
    // copy
    [](void* ctx, void* dst, const void* src, size_t bytes) {
      return on_device(ctx, [&](context& c) {
        TROUPE_GPU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.compute.get()));
      });
    },
};

}  // namespace

}  // namespace troupe::gpu

extern "C" __attribute__((visibility("default"))) const troupe_backend_v1* troupe_backend_entry(void) {
  return &troupe::gpu::table;
}
