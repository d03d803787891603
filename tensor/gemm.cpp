// gemm: shape checks, and the choice of library for each product.
#include "tensor/gemm.hpp"

#include <cblas.h>

#include "base/enum_names.hpp"
#include "tensor/gemm_bf16.hpp"
#include "tensor/onednn_matmul.hpp"

// Note [Which library multiplies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An fp32 product of at least onednn_min_work multiply-adds goes to oneDNN's matmul
// where the CPU has AVX-512, and every other one to OpenBLAS. Debian's OpenBLAS 0.3.21
// takes this machine's AMD EPYC (Zen 5) for a Zen and runs its AVX2 kernels: 120-130
// GFLOP/s on one core for the shapes of the mlp, the cnn's convolutions and the gpt,
// against 230-270 for oneDNN's AVX-512 kernels (measured 2026-11-29; forcing OpenBLAS's
// SkylakeX kernels gives 190-210). Below about 2^18 multiply-adds (an attention block
// of 64 x 64 x 32) oneDNN's set-up costs more than it saves, so OpenBLAS keeps those.
// Either library gives the same bits for the same shape and thread count every time,
// so runs stay reproducible; the two differ from each other in the order of the sums.
// bf16 products are tensor/gemm_bf16's.

namespace troupe {

namespace {

constexpr std::int64_t onednn_min_work = std::int64_t{1} << 18;

}  // namespace

void sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc, precision p) {
  if (p == precision::bf16) return sgemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m == 0 || n == 0) return;
  if (m * n * k >= onednn_min_work && onednn_offers(matmul_operands::f32))
    return onednn_matmul(matmul_operands::f32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  cblas_sgemm(CblasRowMajor, ta == transpose::yes ? CblasTrans : CblasNoTrans,
              tb == transpose::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

namespace {

constexpr std::array<enum_name<precision>, 2> precisions{{{precision::fp32, "fp32"}, {precision::bf16, "bf16"}}};

}  // namespace

std::string_view name_of(precision p) { return name_in(precisions, p); }

std::optional<precision> precision_from_name(std::string_view s) {
  auto p = parse_in(precisions, s, "precision");
  if (!p) return std::nullopt;
  return *p;
}

void gemm(tensor_view out, const_tensor_view a, transpose ta, const_tensor_view b, transpose tb, float alpha,
          float beta, precision p) {
  TROUPE_CHECK(out.rank() == 2 && a.rank() == 2 && b.rank() == 2, "gemm operands must be 2-D");
  TROUPE_CHECK(out.is_contiguous() && a.is_contiguous() && b.is_contiguous(), "gemm operands must be contiguous");
  const std::int64_t m = ta == transpose::yes ? a.size(1) : a.size(0);
  const std::int64_t k = ta == transpose::yes ? a.size(0) : a.size(1);
  const std::int64_t kb = tb == transpose::yes ? b.size(1) : b.size(0);
  const std::int64_t n = tb == transpose::yes ? b.size(0) : b.size(1);
  TROUPE_CHECK(k == kb && out.size(0) == m && out.size(1) == n,
               "gemm shapes: out " + out.sizes().str() + ", a " + a.sizes().str() + ", b " + b.sizes().str());
  sgemm(ta, tb, m, n, k, alpha, a.data<float>(), a.size(1), b.data<float>(), b.size(1), beta,
        out.data<float>(), n, p);
}

void set_blas_threads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace troupe
