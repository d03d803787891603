// gemm_bf16: bf16 rounding and the two engines of a bf16 product.
#include "tensor/gemm_bf16.hpp"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "base/check.hpp"
#include "tensor/onednn_matmul.hpp"

// Note [bf16 products]
// ~~~~~~~~~~~~~~~~~~~~
// `--precision bf16` is mixed precision as PyTorch's autocast does it on the CPU: the
// products of weights and activations (linear layers, convolutions, the attention
// projections) take bfloat16 operands and sum in fp32; everything else (the master
// weights, the optimizer, norms, softmax, the loss, gradients as they are stored and
// sent) stays fp32.
//
// Each call rounds op(a) and op(b) into per-thread bf16 buffers (round to nearest even,
// 32 values per instruction with AVX512-BF16), then multiplies them with oneDNN's bf16
// matmul (tensor/onednn_matmul.hpp), which uses the CPU's bf16 dot products (vdpbf16ps:
// twice the products of an fp32 FMA per instruction): 480 GFLOP/s on one core here.
//
// Without AVX512-BF16 (or a oneDNN that offers no bf16 matmul) the rounded operands go,
// as fp32, to the fp32 sgemm: the same products, another summation order, and slower
// than fp32. The run's first line names the engine (bf16_engine_in_use).

namespace troupe {

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
  return has;
}

__attribute__((target("avx512f,avx512bf16"))) void round_avx512(std::uint16_t* dst, const float* src, std::int64_t n,
                                                                std::int64_t& done) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  done = i;
}

// op(x) of a (rows, cols) operand stored with leading dimension ld, rounded into a dense
// row-major buffer of the same stored layout.
const std::uint16_t* round_operand(std::vector<std::uint16_t>& buf, const float* x, std::int64_t rows,
                                   std::int64_t cols, std::int64_t ld) {
  buf.resize(static_cast<std::size_t>(rows * cols));
  if (ld == cols) {
    round_to_bf16(buf.data(), x, rows * cols);
  } else {
    for (std::int64_t r = 0; r < rows; ++r) round_to_bf16(buf.data() + r * cols, x + r * ld, cols);
  }
  return buf.data();
}

void scale_result(float* c, std::int64_t m, std::int64_t n, std::int64_t ldc, float beta) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
}

struct operand_buffers {
  std::vector<std::uint16_t> a, b;
  std::vector<float> a32, b32;
};

operand_buffers& buffers() {
  thread_local operand_buffers b;
  return b;
}

void via_onednn(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  operand_buffers& buf = buffers();
  const std::int64_t a_cols = ta == transpose::yes ? m : k, b_cols = tb == transpose::yes ? k : n;
  const std::uint16_t* ab = round_operand(buf.a, a, ta == transpose::yes ? k : m, a_cols, lda);
  const std::uint16_t* bb = round_operand(buf.b, b, tb == transpose::yes ? n : k, b_cols, ldb);
  onednn_matmul(matmul_operands::bf16, ta, tb, m, n, k, alpha, ab, a_cols, bb, b_cols, beta, c, ldc);
}

void via_rounded_sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                       const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                       std::int64_t ldc) {
  operand_buffers& buf = buffers();
  auto widen = [](std::vector<float>& out, std::vector<std::uint16_t>& tmp, const float* x, std::int64_t rows,
                  std::int64_t cols, std::int64_t ld) {
    const std::uint16_t* r = round_operand(tmp, x, rows, cols, ld);
    out.resize(tmp.size());
    for (std::size_t i = 0; i < tmp.size(); ++i) out[i] = from_bf16(r[i]);
    return out.data();
  };
  const std::int64_t a_cols = ta == transpose::yes ? m : k, b_cols = tb == transpose::yes ? k : n;
  const float* ar = widen(buf.a32, buf.a, a, ta == transpose::yes ? k : m, a_cols, lda);
  const float* br = widen(buf.b32, buf.b, b, tb == transpose::yes ? n : k, b_cols, ldb);
  sgemm(ta, tb, m, n, k, alpha, ar, a_cols, br, b_cols, beta, c, ldc);
}

}  // namespace

std::uint16_t to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);           // zero, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN, quiet
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void round_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  std::int64_t i = 0;
  if (cpu_has_bf16()) round_avx512(dst, src, n, i);
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

std::string_view name_of(bf16_engine e) {
  return e == bf16_engine::onednn ? "oneDNN bf16 matmul (AVX512-BF16)"
                                  : "bf16-rounded operands through the fp32 sgemm (no AVX512-BF16)";
}

bf16_engine bf16_engine_in_use() {
  return onednn_offers(matmul_operands::bf16) ? bf16_engine::onednn : bf16_engine::rounded_sgemm;
}

void sgemm_bf16(bf16_engine e, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  TROUPE_CHECK(m >= 0 && n >= 0 && k >= 0, "sgemm_bf16: negative size");
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_result(c, m, n, ldc, beta);  // an empty sum: c = beta * c
  if (e == bf16_engine::onednn) {
    TROUPE_CHECK(onednn_offers(matmul_operands::bf16), "sgemm_bf16: this machine has no oneDNN bf16 matmul");
    return via_onednn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  via_rounded_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_bf16(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  sgemm_bf16(bf16_engine_in_use(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe
