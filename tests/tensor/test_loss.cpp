// Tests for tensor/loss.cpp: softmax cross-entropy against a double reference, stability
// for huge logits, its gradient against finite differences, and argmax accuracy.
#define BOOST_TEST_MODULE loss
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tensor/loss.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

tensor labels(std::initializer_list<std::int32_t> v) {
  tensor t({static_cast<std::int64_t>(v.size())}, dtype::i32);
  std::copy(v.begin(), v.end(), t.data<std::int32_t>());
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(matches_double_reference) {
  tensor z = test::random_tensor({4, 5}, 1, 3.f), p({4, 5});
  tensor y = labels({0, 4, 2, 2});
  const double loss = softmax_xent_forward(p, z, y);
  double ref = 0.0;
  for (int r = 0; r < 4; ++r) {
    double sum = 0.0;
    for (int c = 0; c < 5; ++c) sum += std::exp(static_cast<double>(z.data<float>()[r * 5 + c]));
    ref += std::log(sum) - z.data<float>()[r * 5 + y.data<std::int32_t>()[r]];
    double psum = 0.0;
    for (int c = 0; c < 5; ++c) {
      BOOST_TEST(p.data<float>()[r * 5 + c] == std::exp(z.data<float>()[r * 5 + c]) / sum,
                 boost::test_tools::tolerance(1e-5));
      psum += p.data<float>()[r * 5 + c];
    }
    BOOST_TEST(psum == 1.0, boost::test_tools::tolerance(1e-6));
  }
  BOOST_TEST(loss == ref / 4, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(stable_for_huge_logits) {
  tensor z({1, 3}), p({1, 3});
  z.data<float>()[0] = 1000.f;
  z.data<float>()[1] = -1000.f;
  z.data<float>()[2] = 999.f;
  const double loss = softmax_xent_forward(p, z, labels({2}));
  BOOST_TEST(std::isfinite(loss));
  BOOST_TEST(loss == std::log(1 + std::exp(1.0)), boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences) {
  tensor z = test::random_tensor({3, 6}, 2), p({3, 6}), g({3, 6});
  tensor y = labels({5, 0, 3});
  auto loss = [&] { return softmax_xent_forward(p, z, y); };
  loss();
  softmax_xent_backward(g, p, y, 1.f / 3.f);
  test::check_gradient(z, g, loss, 1e-3, 2e-4, 1e-2);
}

BOOST_AUTO_TEST_CASE(microbatch_scale_adds_up_to_the_full_batch_gradient) {
  tensor z = test::random_tensor({4, 3}, 3), p({4, 3}), g_full({4, 3}), g_part({4, 3});
  tensor y = labels({0, 1, 2, 1});
  softmax_xent_forward(p, z, y);
  softmax_xent_backward(g_full, p, y, 0.25f);
  for (int half = 0; half < 2; ++half) {
    auto rows = [&](tensor& t) { return t.view().slice(2 * half, 2 * half + 2); };
    softmax_xent_forward(rows(p), rows(z), y.view().slice(2 * half, 2 * half + 2));
    softmax_xent_backward(rows(g_part), rows(p), y.view().slice(2 * half, 2 * half + 2), 0.25f);
  }
  for (int i = 0; i < 12; ++i) BOOST_TEST(g_part.data<float>()[i] == g_full.data<float>()[i]);
}

BOOST_AUTO_TEST_CASE(count_correct_uses_argmax_first_on_ties) {
  tensor z({3, 3});
  const float v[9] = {0, 2, 1, 5, 5, 0, -1, -2, -3};
  std::copy(v, v + 9, z.data<float>());
  BOOST_TEST(count_correct(z, labels({1, 0, 0})) == 3);
  BOOST_TEST(count_correct(z, labels({1, 1, 2})) == 1);
}

BOOST_AUTO_TEST_CASE(rejects_out_of_range_labels) {
  tensor z({1, 3}), p({1, 3});
  BOOST_CHECK_THROW(softmax_xent_forward(p, z, labels({3})), contract_error);
}
