// Tests for tensor/pool.cpp: max pooling against a direct reference, argmax routing in
// backward (windows that tile the plane, overlap, or leave an edge uncovered, over a
// gradient buffer that held other values), and a finite-difference check away from ties.
#define BOOST_TEST_MODULE pool
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

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

// Every input element's gradient is the sum of the output gradients whose window's
// maximum it is, and zero elsewhere, whatever dx held before: windows that tile the
// plane, overlapping ones, and ones that leave the last row and column out.
BOOST_AUTO_TEST_CASE(backward_routes_each_gradient_to_its_window_maximum) {
  for (const pool_geometry g : {pool_geometry{3, 8, 6, 2, 2}, pool_geometry{2, 7, 6, 3, 2}, pool_geometry{2, 7, 7, 2, 2}})
    BOOST_TEST_CONTEXT(g.in_h << "x" << g.in_w << ", kernel " << g.kernel << ", stride " << g.stride) {
      tensor x = test::random_tensor({2, g.channels, g.in_h, g.in_w}, 5);
      tensor y({2, g.channels, g.out_h(), g.out_w()}), am({y.numel()}, dtype::i32);
      maxpool2d_forward(y, am, x, g);
      tensor dy = test::random_tensor(y.sizes(), 6), dx(x.sizes());
      std::fill(dx.data<float>(), dx.data<float>() + dx.numel(), 13.f);
      maxpool2d_backward(dx, dy, am, g);
      std::vector<float> want(x.numel(), 0.f);
      const std::int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
      for (std::int64_t j = 0; j < y.numel(); ++j)
        want[j / plane_out * plane_in + am.data<std::int32_t>()[j]] += dy.data<float>()[j];
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < x.numel(); ++i) wrong += dx.data<float>()[i] != want[i];
      BOOST_TEST(wrong == 0);
    }
}
