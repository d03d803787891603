// Tests for tensor/ops.cpp: bias, ReLU, GELU, dropout, axpy/scale, finiteness and norms, with exact
// expected values on small inputs; the loops split across threads give the one thread's bits.
#define BOOST_TEST_MODULE ops
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/ops.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

tensor make(shape s, std::initializer_list<float> v) {
  tensor t(s);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

void check_equal(const tensor& t, std::initializer_list<float> v) {
  BOOST_REQUIRE_EQUAL(static_cast<std::size_t>(t.numel()), v.size());
  auto it = v.begin();
  for (std::int64_t i = 0; i < t.numel(); ++i, ++it) BOOST_TEST(t.data<float>()[i] == *it);
}

}  // namespace

BOOST_AUTO_TEST_CASE(bias_add_broadcasts_over_rows) {
  tensor out = make({2, 3}, {1, 2, 3, 4, 5, 6});
  bias_add(out, make({3}, {10, 20, 30}));
  check_equal(out, {11, 22, 33, 14, 25, 36});
  BOOST_CHECK_THROW(bias_add(out, make({2}, {1, 2})), contract_error);
}

BOOST_AUTO_TEST_CASE(channel_bias_add_broadcasts_over_positions) {
  tensor out({2, 2, 3});
  channel_bias_add(out, make({2}, {1, -1}));
  check_equal(out, {1, 1, 1, -1, -1, -1, 1, 1, 1, -1, -1, -1});
}

BOOST_AUTO_TEST_CASE(bias_grad_accumulates_dense_and_channel_forms) {
  tensor gb = make({3}, {1, 1, 1});
  bias_grad_accumulate(gb, make({2, 3}, {1, 2, 3, 4, 5, 6}));
  check_equal(gb, {6, 8, 10});
  tensor gc({2});
  bias_grad_accumulate(gc, make({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  check_equal(gc, {1 + 2 + 5 + 6, 3 + 4 + 7 + 8});
  // Planes longer than the sums' lanes, of a length no multiple of them (the cnn's 14 x 14).
  tensor y = test::random_tensor({3, 4, 196}, 7), gl({4});
  bias_grad_accumulate(gl, y);
  for (std::int64_t c = 0; c < 4; ++c) {
    double want = 0;
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t p = 0; p < 196; ++p) want += y.data<float>()[(i * 4 + c) * 196 + p];
    BOOST_TEST(gl.data<float>()[c] == want, boost::test_tools::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_CASE(relu_forward_and_backward) {
  tensor x = make({4}, {-1, 0, 2, -3}), y({4});
  relu_forward(y, x);
  check_equal(y, {0, 0, 2, 0});
  tensor g({4});
  relu_backward(g, make({4}, {5, 6, 7, 8}), y);
  check_equal(g, {0, 0, 7, 0});
  relu_forward(x, x);  // in place is allowed
  check_equal(x, {0, 0, 2, 0});
}

// GELU's exact form against published values of x * Phi(x), and its derivative
// Phi(x) + x phi(x) (Phi(1) = 0.8413447, phi(1) = 0.2419707).
BOOST_AUTO_TEST_CASE(gelu_forward_and_backward) {
  tensor x = make({4}, {-1, 0, 1, 2}), y({4});
  gelu_forward(y, x);
  const float* v = y.data<float>();
  BOOST_TEST(v[0] == -0.1586553f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(v[1] == 0.f);
  BOOST_TEST(v[2] == 0.8413447f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(v[3] == 1.9544997f, boost::test_tools::tolerance(1e-6f));
  tensor g({4});
  gelu_backward(g, make({4}, {1, 1, 2, 1}), x);
  const float* d = g.data<float>();
  BOOST_TEST(d[0] == 0.1586553f - 0.2419707f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(d[1] == 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(d[2] == 2.f * (0.8413447f + 0.2419707f), boost::test_tools::tolerance(1e-5f));
  gelu_forward(x, x);  // in place is allowed
  BOOST_TEST(x.data<float>()[2] == 0.8413447f, boost::test_tools::tolerance(1e-6f));
}

// GELU and bias over more elements than one thread takes: two threads give one's bits,
// and every element is computed (none left at its initial zero).
BOOST_AUTO_TEST_CASE(loops_split_across_threads_give_the_bits_of_one) {
  const std::int64_t rows = 1000, cols = 129;  // odd sizes: uneven ranges
  tensor x = test::random_tensor({rows, cols}, 1), dy = test::random_tensor({rows, cols}, 2);
  tensor bias = test::random_tensor({cols}, 3);
  auto run = [&](int threads) {
    test::scoped_threads scope(threads);
    std::vector<tensor> r{tensor({rows, cols}), tensor({rows, cols}), x};
    gelu_forward(r[0], x);
    gelu_backward(r[1], dy, x);
    bias_add(r[2], bias);
    return r;
  };
  const auto one = run(1), two = run(2);
  for (std::size_t i = 0; i < one.size(); ++i) BOOST_TEST(test::same_bits(one[i], two[i]));
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < rows * cols; ++i) zeros += two[0].data<float>()[i] == 0.f;
  BOOST_TEST(zeros == 0);
  BOOST_TEST(two[2].data<float>()[rows * cols - 1] == x.data<float>()[rows * cols - 1] + bias.data<float>()[cols - 1]);
}

// Inverted dropout: every scale is 0 or 1 / (1 - p), about p of them 0, out = in * scale,
// the same key draws the same mask and another key another; backward multiplies by it.
BOOST_AUTO_TEST_CASE(dropout_forward_and_backward) {
  const std::int64_t n = 100000;
  const float p = 0.25f;
  tensor x({n}), y({n}), kept({n});
  for (std::int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 17) - 8.f;
  dropout_forward(y, kept, x, p, 42);
  std::int64_t dropped = 0;
  bool scales_ok = true, product_ok = true;
  for (std::int64_t i = 0; i < n; ++i) {
    const float k = kept.data<float>()[i];
    dropped += k == 0.f;
    scales_ok = scales_ok && (k == 0.f || k == 1.f / (1.f - p));
    product_ok = product_ok && y.data<float>()[i] == x.data<float>()[i] * k;
  }
  BOOST_TEST(scales_ok);
  BOOST_TEST(product_ok);
  BOOST_TEST(std::abs(static_cast<double>(dropped) / n - p) < 0.01);
  tensor again({n}), kept_again({n}), other({n}), kept_other({n});
  dropout_forward(again, kept_again, x, p, 42);
  dropout_forward(other, kept_other, x, p, 43);
  std::int64_t same = 0, differ = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    same += kept_again.data<float>()[i] == kept.data<float>()[i];
    differ += kept_other.data<float>()[i] != kept.data<float>()[i];
  }
  BOOST_TEST(same == n);
  BOOST_TEST(differ > n / 5);  // two independent masks differ in 2p(1 - p) = 37.5% of places
  tensor g({n}), dy({n});
  for (std::int64_t i = 0; i < n; ++i) dy.data<float>()[i] = 1.f + static_cast<float>(i % 3);
  dropout_backward(g, dy, kept);
  bool grad_ok = true;
  for (std::int64_t i = 0; i < n; ++i)
    grad_ok = grad_ok && g.data<float>()[i] == dy.data<float>()[i] * kept.data<float>()[i];
  BOOST_TEST(grad_ok);
  dropout_forward(x, kept, x, p, 42);  // in place is allowed
  BOOST_TEST(x.data<float>()[n - 1] == y.data<float>()[n - 1]);
  BOOST_CHECK_THROW(dropout_forward(y, kept, x, 1.f, 1), contract_error);
  BOOST_CHECK_THROW(dropout_forward(y, kept, x, -0.1f, 1), contract_error);
}

BOOST_AUTO_TEST_CASE(axpy_and_scale) {
  tensor a = make({3}, {1, 2, 3});
  axpy(a, 2.f, make({3}, {1, 1, 1}));
  check_equal(a, {3, 4, 5});
  scale(a, 0.5f);
  check_equal(a, {1.5f, 2.f, 2.5f});
}

BOOST_AUTO_TEST_CASE(finiteness_and_norm) {
  tensor a = make({3}, {1, -2, 3});
  BOOST_TEST(all_finite(a));
  BOOST_TEST(squared_norm(a) == 14.0);
  a.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(!all_finite(a));
  a.data<float>()[1] = -std::numeric_limits<float>::infinity();
  BOOST_TEST(!all_finite(a));
  a.data<float>()[1] = std::numeric_limits<float>::max();
  BOOST_TEST(all_finite(a));
  BOOST_TEST(all_finite(tensor({0})));
}
