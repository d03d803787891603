// Tests for tensor/fast_math.hpp: exp and the normal CDF against libm, the lane
// reductions against sums in one running double (every length around the lane width),
// their fixed order (the same bits as the lanes written out), and the maximum.
#define BOOST_TEST_MODULE fast_math
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "tensor/fast_math.hpp"
#include "tensor/random.hpp"

using namespace troupe;

namespace {

std::vector<float> draws(std::int64_t n, std::uint64_t seed) {
  rng r(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = r.uniform(-4.f, 4.f);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(exp_and_the_normal_cdf_agree_with_libm) {
  // x log2(e) rounds to a float first, so the relative error grows with |x|.
  for (float x = -80.f; x <= 0.f; x += 0.37f) {
    const double want = std::exp(static_cast<double>(x));
    BOOST_TEST(std::abs(fast::exp_nonpositive(x) - want) <= (3e-7 + 1e-7 * -x) * want);
  }
  // In the lower tail Phi goes through exp(-x^2 / 2): the same growth, in x^2.
  for (float x = -9.f; x <= 9.f; x += 0.013f) {
    const double want = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    BOOST_TEST(std::abs(fast::normal_cdf(x) - want) <= 2e-7 * (3.0 + x * x) * want);
  }
  BOOST_TEST(fast::normal_cdf(0.f) == 0.5f);
}

BOOST_AUTO_TEST_CASE(lane_sums_match_one_running_sum_at_every_length) {
  for (std::int64_t n = 0; n <= 3 * fast::lanes + 1; ++n) {
    const auto x = draws(n, 1 + n), y = draws(n, 100 + n);
    double sum = 0, dot = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      sum += x[i];
      dot += static_cast<double>(x[i]) * y[i];
    }
    BOOST_TEST(std::abs(fast::sum(x.data(), n) - sum) <= 1e-12);
    BOOST_TEST(std::abs(fast::dot(x.data(), y.data(), n) - dot) <= 1e-12);
  }
  BOOST_TEST(fast::sum(nullptr, 0) == 0.0);
}

BOOST_AUTO_TEST_CASE(lane_sums_take_a_fixed_order) {
  // Element i goes to lane i % lanes; the lanes are added in order at the end.
  const std::int64_t n = 5 * fast::lanes + 3;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[i] = 1.f / static_cast<float>(3 + i * 7);
  double lanes[fast::lanes] = {};
  for (std::int64_t i = 0; i < n; ++i) lanes[i % fast::lanes] += x[i];
  double want = 0;
  for (double l : lanes) want += l;
  BOOST_TEST(fast::sum(x.data(), n) == want);
  BOOST_TEST(fast::sum_of(n, [&](std::int64_t i) { return 2.0 * x[i]; }) == 2 * want);
}

BOOST_AUTO_TEST_CASE(the_maximum_is_found_wherever_it_lies) {
  for (std::int64_t n = 1; n <= 3 * fast::lanes + 1; ++n)
    for (std::int64_t at = 0; at < n; ++at) {
      auto x = draws(n, 7);
      x[at] = 10.f;
      BOOST_TEST(fast::max(x.data(), n) == 10.f);
    }
  const float negative[3] = {-3.f, -1.f, -2.f};
  BOOST_TEST(fast::max(negative, 3) == -1.f);
}
