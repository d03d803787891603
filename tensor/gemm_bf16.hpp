// gemm_bf16: the matrix product of `--precision bf16` (Note [bf16 products] in
// gemm_bf16.cpp). Its operands are rounded to bfloat16 and its products are summed in
// fp32 into an fp32 result, so the caller's tensors, master weights and every other op
// stay fp32. Also the rounding itself, which the tests and the engines share.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/gemm.hpp"

namespace troupe {

// x rounded to the nearest bfloat16, ties to even, as the upper 16 bits of a float.
// Subnormal inputs become a zero of their sign (what AVX512-BF16's conversion does, so
// every path rounds alike); a NaN stays a quiet NaN; values past the largest bfloat16
// round to infinity.
std::uint16_t to_bf16(float x);
float from_bf16(std::uint16_t b);
// dst[i] = to_bf16(src[i]) for i < n (AVX512-BF16 where the CPU has it; same results).
void round_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n);

// How a bf16 product is computed. Both give the same products (a product of two
// bfloat16 values is exact in fp32); only the order of the fp32 sums differs.
enum class bf16_engine : std::uint8_t {
  onednn,         // oneDNN's bf16 matmul: the CPU's bf16 dot-product instructions
  rounded_sgemm,  // operands rounded to bf16, held as fp32, multiplied by the fp32 sgemm
};
std::string_view name_of(bf16_engine e);
// onednn when this CPU has AVX512-BF16 and oneDNN offers a bf16 matmul for it; else
// rounded_sgemm, which is slower than plain fp32 (it only reproduces the numerics).
bf16_engine bf16_engine_in_use();

// sgemm's contract (tensor/gemm.hpp) with op(a) and op(b) rounded to bf16.
void sgemm_bf16(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
// The same through engine e; onednn where this machine has none is a contract error.
void sgemm_bf16(bf16_engine e, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc);

}  // namespace troupe
