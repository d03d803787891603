// Tests for tensor/update_ops.cpp: SGD (momentum, Nesterov, weight decay) and Adam steps
// against values computed by hand, and their checks on the views they get.
#define BOOST_TEST_MODULE update_ops
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tensor/update_ops.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::vec;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(sgd_momentum_two_steps_by_hand) {
  tensor p = vec({1.f, -2.f}), g = vec({0.5f, 1.f}), v({2});
  const fn::sgd_momentum f{0.1f, 0.9f, 0.f, false};
  sgd_step(p, g, v, f);
  // v = g; p = p - 0.1 v
  BOOST_TEST(v.data<float>()[0] == 0.5f);
  BOOST_TEST(p.data<float>()[0] == 0.95f, tt::tolerance(1e-6f));
  BOOST_TEST(p.data<float>()[1] == -2.1f, tt::tolerance(1e-6f));
  sgd_step(p, g, v, f);
  // v = 0.9 * 0.5 + 0.5 = 0.95; p = 0.95 - 0.095
  BOOST_TEST(v.data<float>()[0] == 0.95f, tt::tolerance(1e-6f));
  BOOST_TEST(p.data<float>()[0] == 0.855f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(sgd_weight_decay_and_nesterov_by_hand) {
  tensor p = vec({2.f}), g = vec({1.f}), v = vec({1.f});
  sgd_step(p, g, v, fn::sgd_momentum{0.1f, 0.5f, 0.25f, true});
  // g' = 1 + 0.25 * 2 = 1.5; v = 0.5 * 1 + 1.5 = 2; step = g' + 0.5 v = 2.5; p = 2 - 0.25
  BOOST_TEST(v.data<float>()[0] == 2.f);
  BOOST_TEST(p.data<float>()[0] == 1.75f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adam_first_step_by_hand) {
  // t = 1: bias1 = 1 - 0.9, bias2_sqrt = sqrt(1 - 0.999); m = 0.05, v = 0.00025,
  // p -= (0.1 / 0.1) * 0.05 / (sqrt(0.00025) / sqrt(0.001) + eps) = 0.1
  tensor p = vec({1.f}), g = vec({0.5f}), m({1}), v({1});
  adam_step(p, g, m, v, fn::adam{0.1f, 0.9f, 0.999f, 1e-8f, 0.f, 0.1f, std::sqrt(0.001f)});
  BOOST_TEST(m.data<float>()[0] == 0.05f, tt::tolerance(1e-6f));
  BOOST_TEST(v.data<float>()[0] == (1.f - 0.999f) * 0.25f, tt::tolerance(1e-6f));  // 1 - 0.999 rounds in f32
  BOOST_TEST(p.data<float>()[0] == 0.9f, tt::tolerance(1e-5f));
  BOOST_CHECK_THROW(adam_step(p, g, m, tensor({2}), fn::adam{}), contract_error);
}
