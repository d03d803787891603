// Tests for tensor/gemm_bf16.cpp: the rounding to bfloat16 bit by bit (ties, specials,
// the vector path against the scalar one), and both engines' products against a double
// reference on bf16-rounded operands, for every transpose, odd and padded sizes, alpha,
// beta and an empty sum.
#define BOOST_TEST_MODULE gemm_bf16
// Boost.Test 1.74's data-driven case names trip GCC 12's -Wrestrict (see test_gemm.cpp).
#pragma GCC diagnostic ignored "-Wrestrict"
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/gemm_bf16.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace bdata = boost::unit_test::data;

namespace {

float of_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

std::vector<bf16_engine> engines_here() {
  std::vector<bf16_engine> out{bf16_engine::rounded_sgemm};
  if (bf16_engine_in_use() == bf16_engine::onednn) out.push_back(bf16_engine::onednn);
  return out;
}

float rounded(float x) { return from_bf16(to_bf16(x)); }

// One case of sgemm_bf16 against the double sum of bf16-rounded products. Operands are
// stored with leading dimensions `pad` larger than their width.
void check_against_reference(bf16_engine e, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
                             float alpha, float beta, std::int64_t pad) {
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  const tensor a = test::random_tensor({std::max<std::int64_t>(a_rows * lda, 1)}, 11 + m);
  const tensor b = test::random_tensor({std::max<std::int64_t>(b_rows * ldb, 1)}, 12 + n);
  tensor c = test::random_tensor({std::max<std::int64_t>(m * ldc, 1)}, 13 + k);
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  std::vector<double> want(static_cast<std::size_t>(m * ldc)), mag(want.size());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = rounded(ta ? ap[p * lda + i] : ap[i * lda + p]);
        const double y = rounded(tb ? bp[j * ldb + p] : bp[p * ldb + j]);
        s += x * y;
        sa += std::abs(x * y);
      }
      const double old = c.data<float>()[i * ldc + j];
      want[i * ldc + j] = alpha * s + (beta == 0.f ? 0.0 : beta * old);
      mag[i * ldc + j] = std::abs(alpha) * sa + std::abs(beta * old);
    }
  const std::vector<float> before(c.data<float>(), c.data<float>() + c.numel());
  sgemm_bf16(e, ta ? transpose::yes : transpose::no, tb ? transpose::yes : transpose::no, m, n, k, alpha, ap, lda, bp,
             ldb, beta, c.data<float>(), ldc);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double got = c.data<float>()[i * ldc + j];
      BOOST_TEST(std::abs(got - want[i * ldc + j]) <= 1e-5 * (mag[i * ldc + j] + 1e-3),
                 name_of(e) << " m " << m << " n " << n << " k " << k << " (" << i << ", " << j << "): " << got
                            << " against " << want[i * ldc + j]);
    }
    for (std::int64_t j = n; j < ldc && i * ldc + j < c.numel(); ++j)  // the padding is not written
      BOOST_TEST(c.data<float>()[i * ldc + j] == before[static_cast<std::size_t>(i * ldc + j)]);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(rounds_to_nearest_even) {
  BOOST_TEST(to_bf16(1.f) == 0x3f80);
  BOOST_TEST(to_bf16(-2.f) == 0xc000);
  BOOST_TEST(to_bf16(of_bits(0x3f808000u)) == 0x3f80);     // a tie rounds to the even 0x3f80
  BOOST_TEST(to_bf16(of_bits(0x3f818000u)) == 0x3f82);     // a tie rounds to the even 0x3f82
  BOOST_TEST(to_bf16(of_bits(0x3f808001u)) == 0x3f81);     // past the tie: up
  BOOST_TEST(to_bf16(of_bits(0x3f807fffu)) == 0x3f80);     // short of it: down
  BOOST_TEST(from_bf16(to_bf16(3.140625f)) == 3.140625f);  // representable values are exact
}

BOOST_AUTO_TEST_CASE(keeps_infinities_and_nans_and_flushes_subnormals) {
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(to_bf16(inf) == 0x7f80);
  BOOST_TEST(to_bf16(-inf) == 0xff80);
  BOOST_TEST(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // past the largest bf16
  const std::uint16_t nan = to_bf16(std::numeric_limits<float>::quiet_NaN());
  BOOST_TEST(std::isnan(from_bf16(nan)));
  BOOST_TEST(std::isnan(from_bf16(to_bf16(of_bits(0x7f800001u)))));  // a signalling NaN with only low bits
  BOOST_TEST(to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  BOOST_TEST(to_bf16(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  BOOST_TEST(to_bf16(std::numeric_limits<float>::min()) == 0x0080);  // the smallest normal stays
}

BOOST_DATA_TEST_CASE(vector_rounding_matches_the_scalar_rounding, bdata::make({0, 1, 31, 32, 33, 100, 1000}), n) {
  tensor x = test::random_tensor({std::max(n, 1)}, 5 + static_cast<std::uint64_t>(n), 1e3f);
  float* p = x.data<float>();
  const float specials[] = {std::numeric_limits<float>::infinity(), -0.f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(), of_bits(0x3f808000u)};
  for (int i = 0; i < n; i += 7) p[i] = specials[(i / 7) % 5];
  std::vector<std::uint16_t> got(static_cast<std::size_t>(n) + 1, 0xabcd);
  round_to_bf16(got.data(), p, n);
  for (int i = 0; i < n; ++i) BOOST_TEST(got[static_cast<std::size_t>(i)] == to_bf16(p[i]), "element " << i);
  BOOST_TEST(got[static_cast<std::size_t>(n)] == 0xabcd);  // nothing past n
}

BOOST_DATA_TEST_CASE(products_match_the_reference_on_rounded_operands,
                     bdata::make({1, 7, 33}) * bdata::make({1, 5, 64}) * bdata::make({1, 13, 130}) *
                         bdata::make({0, 1, 2, 3}),
                     m, n, k, trans_bits) {
  for (bf16_engine e : engines_here())
    check_against_reference(e, m, n, k, trans_bits & 1, trans_bits & 2, 0.5f, 2.f, 0);
}

BOOST_AUTO_TEST_CASE(padded_operands_alpha_beta_and_an_empty_sum) {
  for (bf16_engine e : engines_here()) {
    check_against_reference(e, 9, 11, 17, false, true, 1.f, 0.f, 3);
    check_against_reference(e, 9, 11, 17, true, false, -1.5f, 1.f, 5);
    check_against_reference(e, 4, 6, 0, false, false, 1.f, 0.25f, 2);  // k = 0: c = beta * c
    check_against_reference(e, 4, 6, 0, true, true, 1.f, 0.f, 0);
    check_against_reference(e, 128, 96, 200, false, true, 1.f, 1.f, 0);
  }
}

BOOST_AUTO_TEST_CASE(operands_are_rounded_before_they_multiply) {
  // 1 + 2^-10 is no bfloat16: it rounds to 1, so the bf16 product of it and 1 is 1
  // exactly, where fp32 gives 1 + 2^-10.
  const float a = 1.f + 1.f / 1024.f, b = 1.f;
  float c = -7.f;
  for (bf16_engine e : engines_here()) {
    sgemm_bf16(e, transpose::no, transpose::no, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1);
    BOOST_TEST(c == 1.f, name_of(e));
  }
  sgemm(transpose::no, transpose::no, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1, precision::bf16);
  BOOST_TEST(c == 1.f);
  sgemm(transpose::no, transpose::no, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1, precision::fp32);
  BOOST_TEST(c == a);
}

BOOST_AUTO_TEST_CASE(a_nan_operand_reaches_the_result) {
  const tensor a = test::random_tensor({3, 4}, 1);
  tensor b = test::random_tensor({4, 2}, 2);
  b.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();  // row 1, column 0
  tensor c({3, 2});
  for (bf16_engine e : engines_here()) {
    sgemm_bf16(e, transpose::no, transpose::no, 3, 2, 4, 1.f, a.data<float>(), 4, b.data<float>(), 2, 0.f,
               c.data<float>(), 2);
    for (int i = 0; i < 3; ++i) {
      BOOST_TEST(std::isnan(c.data<float>()[i * 2]), name_of(e));
      BOOST_TEST(std::isfinite(c.data<float>()[i * 2 + 1]), name_of(e));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_same_call_gives_the_same_bits) {
  const tensor a = test::random_tensor({64, 300}, 3), b = test::random_tensor({300, 48}, 4);
  for (bf16_engine e : engines_here()) {
    tensor c1({64, 48}), c2({64, 48});
    sgemm_bf16(e, transpose::no, transpose::no, 64, 48, 300, 1.f, a.data<float>(), 300, b.data<float>(), 48, 0.f,
               c1.data<float>(), 48);
    sgemm_bf16(e, transpose::no, transpose::no, 64, 48, 300, 1.f, a.data<float>(), 300, b.data<float>(), 48, 0.f,
               c2.data<float>(), 48);
    BOOST_TEST(test::same_bits(c1, c2), name_of(e));
  }
}

BOOST_AUTO_TEST_CASE(uses_the_cpus_bf16_instructions_where_it_has_them) {
  const bf16_engine e = bf16_engine_in_use();
  BOOST_TEST_MESSAGE("bf16 engine here: " << name_of(e));
  const bool has = __builtin_cpu_supports("avx512bf16");
  BOOST_TEST((e == bf16_engine::onednn) == has, name_of(e)
                                                    << " on a CPU " << (has ? "with" : "without") << " AVX512-BF16");
  if (!has)  // asking for an engine the machine lacks is a contract error
    BOOST_CHECK_THROW(sgemm_bf16(bf16_engine::onednn, transpose::no, transpose::no, 1, 1, 1, 1.f, nullptr, 1, nullptr,
                                 1, 0.f, nullptr, 1),
                      contract_error);
}
