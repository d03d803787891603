// gemm: shape checks around cblas_sgemm, and the switch to bf16 products.
#include "tensor/gemm.hpp"

#include <cblas.h>

#include "tensor/gemm_bf16.hpp"

namespace troupe {

void sgemm(transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc, precision p) {
  if (p == precision::bf16) return sgemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, ta == transpose::yes ? CblasTrans : CblasNoTrans,
              tb == transpose::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

std::string_view name_of(precision p) { return p == precision::bf16 ? "bf16" : "fp32"; }

std::optional<precision> precision_from_name(std::string_view s) {
  if (s == "fp32") return precision::fp32;
  if (s == "bf16") return precision::bf16;
  return std::nullopt;
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
