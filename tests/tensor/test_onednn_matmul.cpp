// Tests for tensor/onednn_matmul.cpp: fp32 and bf16 operands with every transpose,
// padded leading dimensions, alpha and beta, against a double reference; which CPUs it
// is offered on; an empty product refused.
#define BOOST_TEST_MODULE onednn_matmul
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "tensor/gemm_bf16.hpp"
#include "tensor/onednn_matmul.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

// c = alpha op(a) op(b) + beta c for operands stored with a padding of `pad` past each
// row, through onednn_matmul, against the double sum (of the bf16 values for bf16).
void check(matmul_operands t, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, float alpha, float beta,
           std::int64_t pad) {
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  tensor a = test::random_tensor({a_rows * lda}, 21), b = test::random_tensor({b_rows * ldb}, 22);
  tensor c = test::random_tensor({m * ldc}, 23);
  std::vector<std::uint16_t> a16(static_cast<std::size_t>(a.numel())), b16(static_cast<std::size_t>(b.numel()));
  round_to_bf16(a16.data(), a.data<float>(), a.numel());
  round_to_bf16(b16.data(), b.data<float>(), b.numel());
  auto av = [&](std::int64_t i) {
    return t == matmul_operands::bf16 ? double(from_bf16(a16[i])) : double(a.data<float>()[i]);
  };
  auto bv = [&](std::int64_t i) {
    return t == matmul_operands::bf16 ? double(from_bf16(b16[i])) : double(b.data<float>()[i]);
  };
  std::vector<double> want(static_cast<std::size_t>(m * ldc)), mag(want.size());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = av(ta ? p * lda + i : i * lda + p), y = bv(tb ? j * ldb + p : p * ldb + j);
        s += x * y;
        sa += std::abs(x * y);
      }
      const double old = c.data<float>()[i * ldc + j];
      want[i * ldc + j] = alpha * s + beta * old;
      mag[i * ldc + j] = std::abs(alpha) * sa + std::abs(beta * old);
    }
  const tensor before = c;  // a deep copy
  const void* ap = t == matmul_operands::bf16 ? static_cast<const void*>(a16.data()) : a.data<float>();
  const void* bp = t == matmul_operands::bf16 ? static_cast<const void*>(b16.data()) : b.data<float>();
  onednn_matmul(t, ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no, m, n, k, alpha, ap, lda,
                bp, ldb, beta, c.data<float>(), ldc);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < ldc; ++j) {
      const std::int64_t at = i * ldc + j;
      if (j >= n) {  // padding stays as it was
        BOOST_TEST(c.data<float>()[at] == before.data<float>()[at]);
        continue;
      }
      BOOST_TEST(std::abs(c.data<float>()[at] - want[at]) <= 1e-5 * (mag[at] + 1e-3),
                 "(" << i << ", " << j << "): " << c.data<float>()[at] << " against " << want[at]);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_transpose_padding_alpha_and_beta_match_the_reference) {
  for (matmul_operands t : {matmul_operands::f32, matmul_operands::bf16}) {
    if (!onednn_offers(t)) continue;  // the next test says why
    for (int bits = 0; bits < 4; ++bits)
      BOOST_TEST_CONTEXT((t == matmul_operands::f32 ? "f32" : "bf16")
                         << " ta " << (bits & 1) << " tb " << (bits >> 1)) {
        check(t, 37, 70, 129, bits & 1, bits & 2, 1.f, 0.f, 0);
        check(t, 37, 70, 129, bits & 1, bits & 2, 0.5f, 1.f, 3);
        check(t, 5, 3, 1, bits & 1, bits & 2, -2.f, 0.25f, 1);
      }
  }
}

BOOST_AUTO_TEST_CASE(is_offered_where_the_cpu_has_the_instructions) {
  const bool avx512 = __builtin_cpu_supports("avx512f"), bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  BOOST_TEST(onednn_offers(matmul_operands::f32) == avx512);
  BOOST_TEST(onednn_offers(matmul_operands::bf16) == bf16);
}

BOOST_AUTO_TEST_CASE(an_empty_product_is_a_contract_error) {
  float c = 0.f;
  BOOST_CHECK_THROW(
      onednn_matmul(matmul_operands::f32, transpose::no, transpose::no, 1, 1, 0, 1.f, &c, 1, &c, 1, 0.f, &c, 1),
      contract_error);
}
