// Matrix multiply on the host through OpenBLAS (cblas_sgemm, row-major), plus control of
// OpenBLAS's thread count. The transposes cover every product a backward pass needs.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace troupe {

enum class transpose : bool { no = false, yes = true };

// out (M, N) = alpha * op(a) * op(b) + beta * out, with op(a) (M, K) and op(b) (K, N).
// Preconditions: all three are 2-D, contiguous, f32, host; shapes agree; out does not alias a or b.
void gemm(tensor_view out, const_tensor_view a, transpose ta, const_tensor_view b, transpose tb,
          float alpha = 1.f, float beta = 0.f);

// The same on raw row-major pointers with explicit leading dimensions.
void sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc);

// Threads OpenBLAS may use for one call (process-wide). 1 is what workers use, so that
// several workers compute in parallel without oversubscribing the cores.
void set_blas_threads(int n);
int blas_threads();

}  // namespace troupe
