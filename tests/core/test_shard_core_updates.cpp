// Tests for core/shard_core_updates.cpp, by hand: a sync round sums in member order
// whatever the arrival order and counts a refused gradient as submitted; async applies
// each gradient on arrival and measures its staleness, which --staleness-lr divides the
// lr by; the staleness histogram's buckets.
#define BOOST_TEST_MODULE shard_core_updates
#include <boost/test/unit_test.hpp>
#include <limits>

#include "tests/support/plain_shard.hpp"

using namespace troupe;
using test::filled;
using test::order_sensitive;
using test::plain_shard;
using test::same_bits;

namespace {

constexpr std::int64_t n = test::plain_numel;

}  // namespace

BOOST_AUTO_TEST_CASE(sync_sums_in_rank_order_whatever_the_arrival_order) {
  const auto [g0, g1, g2] = order_sensitive();
  auto a = plain_shard(sync_mode::sync), b = plain_shard(sync_mode::sync);
  a.push(0, 0, 0, g0);
  a.push(1, 0, 0, g1);
  a.push(2, 0, 0, g2);
  b.push(2, 0, 0, g2);
  b.push(0, 0, 0, g0);
  b.push(1, 0, 0, g1);
  BOOST_TEST(a.version() == 1);
  BOOST_TEST(same_bits(a.params(), b.params()));
  // And the update is -(g0 + g1 + g2), summed in rank order.
  for (std::int64_t i = 0; i < n; ++i) {
    const float expect = -((g0.data<float>()[i] + g1.data<float>()[i]) + g2.data<float>()[i]);
    BOOST_TEST(a.params().data<float>()[i] == expect);
  }
}

BOOST_AUTO_TEST_CASE(a_rejected_gradient_counts_as_submitted_in_sync) {
  auto s = plain_shard(sync_mode::sync);
  tensor bad = filled(1.f);
  bad.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST((s.push(2, 0, 0, bad).error->code == errc::not_finite));
  BOOST_TEST(s.version() == 1);  // the round closed with the two good gradients
  BOOST_TEST(s.params().data<float>()[3] == -6.f);
}

BOOST_AUTO_TEST_CASE(async_applies_each_gradient_on_arrival) {
  auto s = plain_shard(sync_mode::async);
  auto out = s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(!out.error);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -1.f);
  out = s.push(0, 0, 0, filled(2.f));  // computed on version 0, arrives at version 1
  BOOST_TEST(out.staleness == 1);
  BOOST_TEST(s.params().data<float>()[0] == -3.f);
  BOOST_TEST((s.pull(2, 0, 1).decision == shard_core::pull_decision::answer));
  BOOST_TEST(s.counters().staleness_max == 1);
  BOOST_TEST((s.push(1, 0, 1, filled(1.f)).error->code == errc::duplicate));
  BOOST_TEST((s.push(1, 5, 1, filled(1.f)).error->code == errc::bad_clock));
}

BOOST_AUTO_TEST_CASE(staleness_scales_the_learning_rate) {
  auto s = plain_shard(sync_mode::async, 0, true);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));  // staleness 1 -> lr 1
  s.push(2, 0, 0, filled(4.f));  // staleness 2 -> lr 1/2
  BOOST_TEST(s.params().data<float>()[0] == -4.f);
}

BOOST_AUTO_TEST_CASE(staleness_bucket_edges) {
  BOOST_TEST(staleness_bucket(0) == 0);
  BOOST_TEST(staleness_bucket(4) == 4);
  BOOST_TEST(staleness_bucket(5) == 5);
  BOOST_TEST(staleness_bucket(9) == 6);
  BOOST_TEST(staleness_bucket(100) == 7);
}
