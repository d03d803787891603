// Tests for tensor/batch_norm.cpp: the training forward against hand-computed values and
// per-channel moments, its backward against central finite differences, evaluation with
// given statistics, folding batches' statistics into the population's, and shape errors.
#define BOOST_TEST_MODULE batch_norm
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "tensor/batch_norm.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::random_tensor;

// One channel of 2 samples x 2 positions {1, 2, 3, 4}: mean 2.5, biased variance 1.25.
BOOST_AUTO_TEST_CASE(forward_normalises_each_channel_over_batch_and_positions) {
  tensor x = test::vec({1, 2, 3, 4}), y({2, 1, 2}), stats({2});
  x.reshape({2, 1, 2});
  batch_norm_forward(y, stats, x, test::vec({2}), test::vec({1}));
  const float rstd = 1.f / std::sqrt(1.25f + batch_norm_eps);
  BOOST_TEST(stats.data<float>()[0] == 2.5f);
  BOOST_TEST(stats.data<float>()[1] == rstd, boost::test_tools::tolerance(1e-6f));
  for (int i = 0; i < 4; ++i)
    BOOST_TEST(y.data<float>()[i] == (static_cast<float>(i + 1) - 2.5f) * rstd * 2.f + 1.f,
               boost::test_tools::tolerance(1e-5f));
}

// Every channel leaves with mean beta and variance gamma^2 (times var / (var + eps)).
BOOST_AUTO_TEST_CASE(every_channel_leaves_with_mean_beta_and_variance_gamma_squared) {
  const std::int64_t b = 5, c = 3, p = 7;
  tensor x = random_tensor({b, c, p}, 1, 3.f), y({b, c, p}), stats({2 * c});
  tensor gamma = test::vec({0.5f, 2.f, -1.f}), beta = test::vec({0.f, 1.f, -3.f});
  batch_norm_forward(y, stats, x, gamma, beta);
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double s = 0.0, q = 0.0;
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t j = 0; j < p; ++j) {
        const double v = y.data<float>()[(i * c + ch) * p + j];
        s += v;
        q += v * v;
      }
    const double mean = s / (b * p), var = q / (b * p) - mean * mean;
    BOOST_TEST_CONTEXT("channel " << ch) {
      BOOST_TEST(mean == beta.data<float>()[ch], boost::test_tools::tolerance(1e-4));
      BOOST_TEST(var == gamma.data<float>()[ch] * gamma.data<float>()[ch], boost::test_tools::tolerance(1e-3));
    }
  }
}

// Backward of the training forward (the statistics depend on the input) against central
// finite differences of dot(out, probe), for the input, gamma and beta.
BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  const std::int64_t b = 4, c = 3, p = 5;
  tensor x = random_tensor({b, c, p}, 2), gamma = random_tensor({c}, 3), beta = random_tensor({c}, 4);
  tensor probe = random_tensor({b, c, p}, 5), y({b, c, p}), stats({2 * c});
  auto loss = [&] {
    batch_norm_forward(y, stats, x, gamma, beta);
    return test::dot(y, probe);
  };
  loss();
  tensor dx({b, c, p}), dg({c}), db({c});
  batch_norm_backward(dx, dg, db, probe, x, gamma, stats);
  BOOST_TEST_CONTEXT("input") { test::check_gradient(x, dx, loss, 1e-2, 2e-3, 1e-3); }
  BOOST_TEST_CONTEXT("gamma") { test::check_gradient(gamma, dg, loss, 1e-2, 2e-3, 1e-3); }
  BOOST_TEST_CONTEXT("beta") { test::check_gradient(beta, db, loss, 1e-2, 2e-3, 1e-3); }
  // The parameter gradients accumulate; grad_in may be skipped.
  tensor dg2 = dg, db2 = db;
  batch_norm_backward(tensor_view(), dg2, db2, probe, x, gamma, stats);
  for (std::int64_t i = 0; i < c; ++i) BOOST_TEST(dg2.data<float>()[i] == 2.f * dg.data<float>()[i]);
}

// Evaluation with the batch's own statistics as the population's is the training output.
BOOST_AUTO_TEST_CASE(inference_with_the_batch_statistics_is_the_training_forward) {
  const std::int64_t b = 6, c = 2, p = 4;
  tensor x = random_tensor({b, c, p}, 6, 2.f), gamma = random_tensor({c}, 7), beta = random_tensor({c}, 8);
  tensor y({b, c, p}), stats({2 * c}), population({2 * c}), z({b, c, p});
  batch_norm_forward(y, stats, x, gamma, beta);
  fold_batch_statistics(population, stats, 0);
  batch_norm_inference(z, x, gamma, beta, population);
  for (std::int64_t i = 0; i < y.numel(); ++i)
    BOOST_TEST(z.data<float>()[i] == y.data<float>()[i], boost::test_tools::tolerance(1e-4f));
}

// The population is the equal-weight average of the batches' means and variances; the
// first batch overwrites whatever was there.
BOOST_AUTO_TEST_CASE(folding_averages_the_batches) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tensor population = test::vec({nan, nan});
  const float vars[3] = {1.f, 2.f, 4.f}, means[3] = {0.f, 3.f, 6.f};
  for (int k = 0; k < 3; ++k) {
    tensor stats = test::vec({means[k], 1.f / std::sqrt(vars[k] + batch_norm_eps)});
    fold_batch_statistics(population, stats, k);
  }
  BOOST_TEST(population.data<float>()[0] == 3.f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(population.data<float>()[1] == 7.f / 3.f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(shapes_that_do_not_fit_are_refused) {
  tensor x({2, 3, 4}), y({2, 3, 4}), stats({6}), short_stats({4});
  tensor gamma({3}), beta({3}), wrong({2});
  BOOST_CHECK_THROW(batch_norm_forward(y, short_stats, x, gamma, beta), contract_error);
  BOOST_CHECK_THROW(batch_norm_forward(y, stats, x, wrong, beta), contract_error);
  tensor flat({24});
  BOOST_CHECK_THROW(batch_norm_forward(y, stats, flat, gamma, beta), contract_error);
  BOOST_CHECK_THROW(batch_norm_inference(y, x, gamma, beta, short_stats), contract_error);
  BOOST_CHECK_THROW(fold_batch_statistics(stats, short_stats, 0), contract_error);
  BOOST_CHECK_THROW(fold_batch_statistics(stats, stats, -1), contract_error);
}
