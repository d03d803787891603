// Tests for tensor/layer_norm.cpp: a row normalised by hand, gamma and beta per column,
// forward in place, the parameter gradients accumulating, the input gradient skipped when
// not asked for (and matching finite differences when it is), and shapes that do not fit
// refused; two compute threads give the one thread's bits.
#define BOOST_TEST_MODULE layer_norm
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "tensor/layer_norm.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(a_row_is_normalised_then_scaled_and_shifted) {
  // Row 0: mean 2.5, biased variance 1.25; row 1 is row 0 shifted by 10 and gives the same.
  tensor x = test::vec({1, 2, 3, 4, 11, 12, 13, 14});
  x.reshape({2, 4});
  tensor gamma = test::vec({1, 2, 1, 1}), beta = test::vec({0, 0, 0, 5}), y({2, 4});
  layer_norm_forward(y, x, gamma, beta);
  const float r = 1.f / std::sqrt(1.25f + layer_norm_eps);
  const float want[4] = {-1.5f * r, 2 * -0.5f * r, 0.5f * r, 1.5f * r + 5};
  for (int row = 0; row < 2; ++row)
    for (int c = 0; c < 4; ++c) BOOST_TEST(y.data<float>()[row * 4 + c] == want[c], tt::tolerance(1e-5f));
  layer_norm_forward(x, x, gamma, beta);  // in place is allowed
  BOOST_TEST(test::same_bits(x, y));
}

BOOST_AUTO_TEST_CASE(backward_accumulates_parameters_and_matches_finite_differences) {
  tensor x = test::random_tensor({3, 6}, 1), gamma = test::random_tensor({6}, 2, 0.5f);
  tensor beta = test::random_tensor({6}, 3), probe = test::random_tensor({3, 6}, 4), y({3, 6});
  auto loss = [&] {
    layer_norm_forward(y, x, gamma, beta);
    return test::dot(y, probe);
  };
  tensor dx({3, 6}), dgamma = test::vec({1, 1, 1, 1, 1, 1}), dbeta({6});
  layer_norm_backward(dx, dgamma, dbeta, probe, x, gamma);
  test::check_gradient(x, dx, loss, 1e-2, 2e-3, 1e-3);
  // dbeta is the column sums of the output gradient; dgamma added to what was there.
  for (int c = 0; c < 6; ++c) {
    const float* p = probe.data<float>();
    BOOST_TEST(dbeta.data<float>()[c] == p[c] + p[6 + c] + p[12 + c], tt::tolerance(1e-5f));
  }
  tensor again({6});
  for (int c = 0; c < 6; ++c) again.data<float>()[c] = dgamma.data<float>()[c] - 1.f;
  test::check_gradient(gamma, again, loss, 1e-2, 2e-3, 1e-3);
  // Without an input gradient the parameters still accumulate, once more.
  tensor dbeta2 = dbeta;
  layer_norm_backward(tensor_view(), dgamma, dbeta2, probe, x, gamma);
  for (int c = 0; c < 6; ++c) BOOST_TEST(dbeta2.data<float>()[c] == 2.f * dbeta.data<float>()[c], tt::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(two_threads_give_the_bits_of_one) {
  // 600 rows of 128: past the size at which rows are split across threads.
  tensor x = test::random_tensor({600, 128}, 5), gamma = test::random_tensor({128}, 6);
  tensor beta = test::random_tensor({128}, 7), probe = test::random_tensor({600, 128}, 8);
  auto run = [&](int threads) {
    test::scoped_threads scope(threads);
    std::vector<tensor> r{tensor({600, 128}), tensor({600, 128}), tensor({128}), tensor({128})};
    layer_norm_forward(r[0], x, gamma, beta);
    layer_norm_backward(r[1], r[2], r[3], probe, x, gamma);
    return r;
  };
  const auto one = run(1), two = run(2);
  for (std::size_t i = 0; i < one.size(); ++i) BOOST_TEST(test::same_bits(one[i], two[i]));
}

BOOST_AUTO_TEST_CASE(shapes_that_do_not_fit_are_refused) {
  tensor x({2, 4}), y({2, 4}), three({3}), four({4});
  BOOST_CHECK_THROW(layer_norm_forward(y, x, three, three), contract_error);
  tensor small({2, 3});
  BOOST_CHECK_THROW(layer_norm_forward(small, x, four, four), contract_error);
  BOOST_CHECK_THROW(layer_norm_backward(small, four, four, y, x, four), contract_error);
  BOOST_CHECK_THROW(layer_norm_backward(y, three, four, y, x, four), contract_error);
}
