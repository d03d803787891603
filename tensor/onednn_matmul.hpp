// onednn_matmul: a row-major product c = alpha op(a) op(b) + beta c through oneDNN's
// matmul primitive, with fp32 or bf16 operands and an fp32 result, on the calling thread
// and blas_threads() threads. tensor/gemm.cpp and tensor/gemm_bf16.cpp choose when to
// use it (Note [Which library multiplies] in gemm.cpp).
#pragma once

#include <cstdint>

#include "tensor/gemm.hpp"

namespace troupe {

enum class matmul_operands : std::uint8_t { f32, bf16 };

// Whether oneDNN offers a matmul for these operands on this CPU that beats the
// alternative: f32 where the CPU has AVX-512 (measured 2x OpenBLAS's sgemm here), bf16
// where it has AVX512-BF16. Decided once per process.
bool onednn_offers(matmul_operands t);

// Preconditions: onednn_offers(t); m, n, k > 0; a and b hold floats (f32) or bfloat16
// bit patterns (bf16, std::uint16_t) with leading dimensions lda and ldb; c does not
// alias them. A failure inside oneDNN is a contract error naming it.
void onednn_matmul(matmul_operands t, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc);

}  // namespace troupe
