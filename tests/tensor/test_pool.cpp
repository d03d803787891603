// Tests for tensor/pool.cpp: max pooling against a direct reference, argmax routing in
// backward, and a finite-difference check away from ties.
#define BOOST_TEST_MODULE pool
#include <boost/test/unit_test.hpp>

#include "tensor/pool.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(forward_picks_window_maxima) {
  pool_geometry g{1, 4, 4, 2, 2};
  tensor x({1, 1, 4, 4});
  const float v[16] = {1, 5, 2, 0, 3, 4, 8, 7, -1, -2, 0, 0, -3, -4, 0, 9};
  std::copy(v, v + 16, x.data<float>());
  tensor y({1, 1, 2, 2}), am({4}, dtype::i32);
  maxpool2d_forward(y, am, x, g);
  const float expect[4] = {5, 8, -1, 9};
  const std::int32_t expect_idx[4] = {1, 6, 8, 15};
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(y.data<float>()[i] == expect[i]);
    BOOST_TEST(am.data<std::int32_t>()[i] == expect_idx[i]);
  }
}

BOOST_AUTO_TEST_CASE(overlapping_windows_and_odd_sizes_match_reference) {
  pool_geometry g{3, 7, 6, 3, 2};  // overlapping 3x3 windows, stride 2
  tensor x = test::random_tensor({2, 3, 7, 6}, 1);
  tensor y({2, 3, g.out_h(), g.out_w()}), am({y.numel()}, dtype::i32);
  maxpool2d_forward(y, am, x, g);
  const float* px = x.data<float>();
  for (std::int64_t pl = 0; pl < 6; ++pl)
    for (std::int64_t i = 0; i < g.out_h(); ++i)
      for (std::int64_t j = 0; j < g.out_w(); ++j) {
        float m = -1e30f;
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) m = std::max(m, px[pl * 42 + (i * 2 + a) * 6 + j * 2 + b]);
        BOOST_TEST(y.data<float>()[(pl * g.out_h() + i) * g.out_w() + j] == m);
      }
}

BOOST_AUTO_TEST_CASE(backward_matches_finite_differences) {
  pool_geometry g{2, 6, 6, 2, 2};
  // Distinct, well separated values: no ties, so the max is differentiable at the point.
  tensor x({2, 2, 6, 6});
  rng r(3);
  std::vector<float> vals(x.numel());
  for (std::size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i) * 0.1f;
  r.shuffle(std::span<float>(vals));
  std::copy(vals.begin(), vals.end(), x.data<float>());
  tensor y({2, 2, 3, 3}), am({y.numel()}, dtype::i32), probe = test::random_tensor(y.sizes(), 4);
  auto loss = [&] {
    maxpool2d_forward(y, am, x, g);
    return test::dot(y, probe);
  };
  loss();
  tensor dx(x.sizes());
  maxpool2d_backward(dx, probe, am, g);
  test::check_gradient(x, dx, loss, 1e-3, 1e-3, 1e-3);
}
