// Tests for tensor/elementwise.hpp: the functors the CPU loops and the CUDA kernels share,
// on the CPU, against values worked out by hand.
#define BOOST_TEST_MODULE elementwise
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tensor/elementwise.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(relu_and_its_gradient) {
  const fn::relu r;
  const fn::relu_grad g;
  BOOST_TEST(r(2.5f) == 2.5f);
  BOOST_TEST(r(-1.f) == 0.f);
  BOOST_TEST(r(0.f) == 0.f);
  BOOST_TEST(g(3.f, 0.7f) == 0.7f);
  BOOST_TEST(g(0.f, 0.7f) == 0.f);  // a unit at zero passes no gradient
}

// GELU and its gradient against double precision, negative inputs included, where
// 1 + erf(x / sqrt 2) would cancel (at x = -3.3 by 6e-5, at -9 entirely): within 1e-5 of
// each value, the float rounding of x / sqrt 2 amplified by erfc's steep tail.
BOOST_AUTO_TEST_CASE(gelu_and_its_gradient_keep_their_digits_for_negative_inputs) {
  const fn::gelu f;
  const fn::gelu_grad g;
  for (double x : {-9.0, -5.0, -3.3, -2.5, -1.0, -0.1, 0.0, 0.3, 1.7, 4.0}) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    BOOST_TEST_CONTEXT("x = " << x) {
      BOOST_TEST(f(static_cast<float>(x)) == x * cdf, tt::tolerance(1e-5));
      BOOST_TEST(g(static_cast<float>(x), 2.f) == 2.0 * (cdf + x * pdf), tt::tolerance(1e-5));
    }
  }
  BOOST_TEST(f(-5.f) < 0.f);  // -1.43e-6, which the cancelling form got 10% wrong
}

BOOST_AUTO_TEST_CASE(pixel_normalisation) {
  const fn::normalize_pixel n{0.5f, 2.f};
  BOOST_TEST(n(0) == -1.f);
  BOOST_TEST(n(255) == 1.f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(sgd_with_weight_decay_and_nesterov) {
  const fn::sgd_momentum f{0.1f, 0.9f, 0.01f, true};
  float p = 2.f, v = 1.f;
  f(p, 0.5f, v);
  // g = 0.5 + 0.01 * 2 = 0.52; v = 0.9 + 0.52 = 1.42; p = 2 - 0.1 * (0.52 + 0.9 * 1.42) = 1.8202
  BOOST_TEST(v == 1.42f, tt::tolerance(1e-6f));
  BOOST_TEST(p == 1.8202f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adam_first_step_moves_by_about_lr) {
  const fn::adam f{0.01f, 0.9f, 0.999f, 1e-8f, 0.f, 1.f - 0.9f, std::sqrt(1.f - 0.999f)};
  float p = 1.f, m = 0.f, v = 0.f;
  f(p, 4.f, m, v);
  // m = 0.4, v = 0.016; m / bias1 = 4, sqrt(v) / bias2_sqrt = 4: the step is lr * 4 / (4 + eps)
  BOOST_TEST(m == 0.4f, tt::tolerance(1e-6f));
  BOOST_TEST(v == 0.016f, tt::tolerance(1e-4f));  // 0.001f * 16 rounds
  BOOST_TEST(p == 0.99f, tt::tolerance(1e-6f));
}
