// Tests for tensor/attention.cpp: forward against a direct loop over positions and heads,
// causality (a later position never changes an earlier one's output), backward against
// central finite differences, two compute threads giving the one thread's bits, and
// geometries that do not fit refused.
#define BOOST_TEST_MODULE attention
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "tensor/attention.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

// out[b, i, h*d + e] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) v_j[e], written plainly.
std::vector<float> reference(const tensor& qkv, std::int64_t batch, const attention_geometry& g) {
  const std::int64_t t = g.context, c = g.dim(), d = g.head_dim;
  const float* x = qkv.data<float>();
  std::vector<float> out(static_cast<std::size_t>(batch * t * c));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < g.heads; ++h)
      for (std::int64_t i = 0; i < t; ++i) {
        std::vector<double> w(static_cast<std::size_t>(i + 1));
        double mx = -1e30, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e)
            s += x[(b * t + i) * 3 * c + h * d + e] * x[(b * t + j) * 3 * c + c + h * d + e];
          w[j] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, w[j]);
        }
        for (auto& v : w) sum += (v = std::exp(v - mx));
        for (std::int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += w[j] / sum * x[(b * t + j) * 3 * c + 2 * c + h * d + e];
          out[(b * t + i) * c + h * d + e] = static_cast<float>(acc);
        }
      }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_matches_a_direct_loop_and_zeroes_the_future) {
  const attention_geometry g{5, 2, 3};
  const std::int64_t batch = 2;
  tensor qkv = test::random_tensor({batch, g.context, 3 * g.dim()}, 1);
  tensor out({batch, g.context, g.dim()}), probs({batch, g.heads, g.context, g.context});
  causal_attention_forward(out, probs, qkv, g);
  const auto want = reference(qkv, batch, g);
  for (std::size_t i = 0; i < want.size(); ++i) BOOST_TEST(out.data<float>()[i] == want[i], tt::tolerance(1e-5f));
  // Each row of weights sums to 1 over j <= i and is 0 beyond.
  const float* p = probs.data<float>();
  for (std::int64_t r = 0; r < batch * g.heads * g.context; ++r) {
    const std::int64_t i = r % g.context;
    double s = 0;
    for (std::int64_t j = 0; j < g.context; ++j) {
      if (j > i) BOOST_TEST(p[r * g.context + j] == 0.f);
      s += p[r * g.context + j];
    }
    BOOST_TEST(s == 1.0, tt::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_CASE(a_later_position_never_changes_an_earlier_output) {
  const attention_geometry g{6, 3, 2};
  tensor qkv = test::random_tensor({1, g.context, 3 * g.dim()}, 2);
  tensor a({1, g.context, g.dim()}), b({1, g.context, g.dim()}), probs({1, g.heads, g.context, g.context});
  causal_attention_forward(a, probs, qkv, g);
  for (std::int64_t col = 0; col < 3 * g.dim(); ++col) qkv.data<float>()[4 * 3 * g.dim() + col] += 3.f;  // position 4
  causal_attention_forward(b, probs, qkv, g);
  for (std::int64_t i = 0; i < 4 * g.dim(); ++i) BOOST_TEST(a.data<float>()[i] == b.data<float>()[i]);
  bool changed = false;
  for (std::int64_t i = 4 * g.dim(); i < 6 * g.dim(); ++i) changed |= a.data<float>()[i] != b.data<float>()[i];
  BOOST_TEST(changed);
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  const attention_geometry g{4, 2, 3};
  const std::int64_t batch = 2;
  tensor qkv = test::random_tensor({batch, g.context, 3 * g.dim()}, 3);
  tensor probe = test::random_tensor({batch, g.context, g.dim()}, 4);
  tensor out({batch, g.context, g.dim()}), probs({batch, g.heads, g.context, g.context});
  auto loss = [&] {
    causal_attention_forward(out, probs, qkv, g);
    return test::dot(out, probe);
  };
  loss();
  tensor grad_qkv(qkv.sizes()), scratch(probs.sizes());
  causal_attention_backward(grad_qkv, scratch, probe, qkv, probs, g);
  test::check_gradient(qkv, grad_qkv, loss, 1e-2, 2e-3, 1e-3);
}

// A context over two row blocks of 64, the last one partial: the blocks skip only masked
// work.
BOOST_AUTO_TEST_CASE(a_long_context_in_row_blocks_matches_the_direct_loop_and_its_gradient) {
  const attention_geometry g{150, 2, 3};
  tensor qkv = test::random_tensor({1, g.context, 3 * g.dim()}, 5);
  tensor probe = test::random_tensor({1, g.context, g.dim()}, 6);
  tensor out({1, g.context, g.dim()}), probs({1, g.heads, g.context, g.context});
  auto loss = [&] {
    causal_attention_forward(out, probs, qkv, g);
    return test::dot(out, probe);
  };
  loss();
  const auto want = reference(qkv, 1, g);
  for (std::size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(std::abs(out.data<float>()[i] - want[i]) <= 1e-5f + 1e-4f * std::abs(want[i]));
  tensor grad_qkv(qkv.sizes()), scratch(probs.sizes());
  causal_attention_backward(grad_qkv, scratch, probe, qkv, probs, g);
  test::check_gradient(qkv, grad_qkv, loss, 1e-2, 2e-3, 1e-3);
}

BOOST_AUTO_TEST_CASE(two_threads_give_the_bits_of_one) {
  const attention_geometry g{70, 3, 4};  // two row blocks; 2 x 3 (sequence, head) pairs
  const std::int64_t batch = 2;
  tensor qkv = test::random_tensor({batch, g.context, 3 * g.dim()}, 7);
  tensor probe = test::random_tensor({batch, g.context, g.dim()}, 8);
  auto run = [&](int threads) {
    test::scoped_threads scope(threads);
    std::vector<tensor> r{tensor({batch, g.context, g.dim()}), tensor({batch, g.heads, g.context, g.context}),
                          tensor(qkv.sizes()), tensor({batch, g.heads, g.context, g.context})};
    causal_attention_forward(r[0], r[1], qkv, g);
    causal_attention_backward(r[2], r[3], probe, qkv, r[1], g);
    return r;
  };
  const auto one = run(1), two = run(2);
  for (std::size_t i = 0; i < one.size(); ++i) BOOST_TEST(test::same_bits(one[i], two[i]));
}

BOOST_AUTO_TEST_CASE(shapes_that_do_not_fit_are_refused) {
  const attention_geometry g{4, 2, 3};
  tensor qkv({1, 4, 18}), out({1, 4, 6}), probs({1, 2, 4, 4});
  tensor short_qkv({1, 4, 12}), short_probs({1, 2, 4, 3});
  BOOST_CHECK_THROW(causal_attention_forward(out, probs, short_qkv, g), std::exception);
  BOOST_CHECK_THROW(causal_attention_forward(out, short_probs, qkv, g), std::exception);
  tensor odd_out({1, 5, 6});
  BOOST_CHECK_THROW(causal_attention_forward(odd_out, probs, qkv, g), std::exception);
}
