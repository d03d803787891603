// Tests for tensor/gemm.cpp: every transpose combination and odd sizes against a naive
// double-precision reference (tolerance 1e-4 relative to the row's magnitude).
#define BOOST_TEST_MODULE gemm
// Boost.Test 1.74 names each data-driven case with std::string concatenation that GCC 12
// reports under -Wrestrict (a known false positive in its inlined basic_string::insert);
// it is the build's only warning, so it is silenced here and nowhere else.
#pragma GCC diagnostic ignored "-Wrestrict"
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "tensor/gemm.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace bdata = boost::unit_test::data;

namespace {

// out = alpha * op(a) op(b) + beta * out in double; mag receives the same sum over absolute
// values, the scale float rounding error is relative to.
void reference(std::vector<double>& out, std::vector<double>& mag, const tensor& a, bool ta, const tensor& b,
               bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, double beta) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0, sa = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = ta ? a.data<float>()[p * m + i] : a.data<float>()[i * k + p];
        const double bv = tb ? b.data<float>()[j * k + p] : b.data<float>()[p * n + j];
        s += av * bv;
        sa += std::abs(av * bv);
      }
      mag[i * n + j] = std::abs(alpha) * sa + std::abs(beta * out[i * n + j]);
      out[i * n + j] = alpha * s + beta * out[i * n + j];
    }
}

}  // namespace

BOOST_DATA_TEST_CASE(matches_reference,
                     bdata::make({1, 7, 33}) * bdata::make({1, 5, 64}) * bdata::make({1, 13, 130}) *
                         bdata::make({0, 1, 2, 3}),
                     m, n, k, trans_bits) {
  const bool ta = trans_bits & 1, tb = trans_bits & 2;
  tensor a = test::random_tensor(ta ? shape{k, m} : shape{m, k}, 1 + m);
  tensor b = test::random_tensor(tb ? shape{n, k} : shape{k, n}, 2 + n);
  tensor c = test::random_tensor({m, n}, 3);
  std::vector<double> ref(c.data<float>(), c.data<float>() + c.numel()), mag(ref.size());
  reference(ref, mag, a, ta, b, tb, m, n, k, 0.5, 2.0);
  gemm(c, a, ta ? transpose::yes : transpose::no, b, tb ? transpose::yes : transpose::no, 0.5f, 2.0f);
  for (std::int64_t i = 0; i < c.numel(); ++i)
    BOOST_TEST(std::abs(c.data<float>()[i] - ref[i]) <= 1e-5 * (mag[i] + 1.0));
}

BOOST_AUTO_TEST_CASE(rejects_mismatched_shapes) {
  tensor a({3, 4}), b({5, 2}), c({3, 2});
  BOOST_CHECK_THROW(gemm(c, a, transpose::no, b, transpose::no), contract_error);
  tensor v({3});
  BOOST_CHECK_THROW(gemm(c, v, transpose::no, b, transpose::no), contract_error);
}

BOOST_AUTO_TEST_CASE(blas_thread_count_is_settable) {
  set_blas_threads(1);
  BOOST_TEST(blas_threads() == 1);
}

BOOST_AUTO_TEST_CASE(precision_names_round_trip) {
  for (precision p : {precision::fp32, precision::bf16}) BOOST_TEST((precision_from_name(name_of(p)) == p));
  BOOST_TEST(!precision_from_name("fp16").has_value());
  BOOST_TEST(!precision_from_name("BF16").has_value());
}

// gemm at precision::bf16 rounds its operands (tensor/gemm_bf16.hpp has the full tests).
BOOST_AUTO_TEST_CASE(bf16_precision_rounds_the_operands) {
  tensor a({1, 1}), b({1, 1}), c({1, 1});
  a.data<float>()[0] = 1.f + 1.f / 1024.f;  // rounds to 1 in bf16
  b.data<float>()[0] = 3.f;
  gemm(c, a, transpose::no, b, transpose::no, 1.f, 0.f, precision::bf16);
  BOOST_TEST(c.data<float>()[0] == 3.f);
  gemm(c, a, transpose::no, b, transpose::no);
  BOOST_TEST(c.data<float>()[0] == 3.f * a.data<float>()[0]);
}
