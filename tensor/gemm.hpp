// Matrix multiply on the host, row-major: fp32 through oneDNN or OpenBLAS (Note [Which
// library multiplies] in gemm.cpp) or, at precision::bf16, with bf16 operands
// (tensor/gemm_bf16.hpp); plus control of the thread count. The transposes cover every
// product a backward pass needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/tensor.hpp"

namespace troupe {

enum class transpose : bool { no = false, yes = true };

// The arithmetic of the products of weights and activations (`--precision`): fp32, or
// operands rounded to bfloat16 and summed in fp32 (Note [bf16 products] in gemm_bf16.cpp).
enum class precision : std::uint8_t { fp32 = 0, bf16 = 1 };
std::string_view name_of(precision p);
// "fp32" or "bf16"; nullopt for anything else.
std::optional<precision> precision_from_name(std::string_view s);

// out (M, N) = alpha * op(a) * op(b) + beta * out, with op(a) (M, K) and op(b) (K, N).
// Preconditions: all three are 2-D, contiguous, f32, host; shapes agree; out does not alias a or b.
void gemm(tensor_view out, const_tensor_view a, transpose ta, const_tensor_view b, transpose tb,
          float alpha = 1.f, float beta = 0.f, precision p = precision::fp32);

// The same on raw row-major pointers with explicit leading dimensions.
void sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc, precision p = precision::fp32);

// Threads one product may use (process-wide; OpenBLAS's, and oneDNN's for bf16). 1 is what workers use, so that
// several workers compute in parallel without oversubscribing the cores.
void set_blas_threads(int n);
int blas_threads();

}  // namespace troupe
