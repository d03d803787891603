// Status checks for CUDA, cuBLAS, cuDNN and NCCL calls: a failure throws gpu_error with
// the call, the file and line and the library's own name for the status. The module's
// table entries catch it and hand the message to last_error; nothing is ignored and
// nothing exits.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace troupe::gpu {

struct gpu_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_status(const char* call, const char* file, int line, const std::string& status);

const char* cublas_status_name(cublasStatus_t s);

inline void check(cudaError_t s, const char* call, const char* file, int line) {
  if (s != cudaSuccess)
    throw_status(call, file, line, std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s));
}
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_status(call, file, line, cublas_status_name(s));
}
inline void check(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) throw_status(call, file, line, cudnnGetErrorString(s));
}
inline void check(ncclResult_t s, const char* call, const char* file, int line) {
  if (s != ncclSuccess) throw_status(call, file, line, ncclGetErrorString(s));
}

}  // namespace troupe::gpu

// Checks the status any of the four libraries returns.
#define TROUPE_GPU(call) ::troupe::gpu::check((call), #call, __FILE__, __LINE__)
// Checks that the last kernel launch was accepted.
#define TROUPE_GPU_LAUNCHED(what) ::troupe::gpu::check(cudaGetLastError(), what, __FILE__, __LINE__)
