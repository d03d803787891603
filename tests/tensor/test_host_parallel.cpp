// Tests for tensor/host_parallel.hpp: the ranges cover [0, n) once, in order and without
// overlap, on as many threads as asked for and no more than the grain allows; a small
// loop, one thread, an empty loop and a call from inside a parallel region stay on the
// calling thread.
#define BOOST_TEST_MODULE host_parallel
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "tensor/host_parallel.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

struct recorded {
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  std::set<std::thread::id> threads;
};

recorded run(std::int64_t n, std::int64_t grain) {
  recorded r;
  std::mutex m;
  parallel_ranges(n, grain, [&](std::int64_t lo, std::int64_t hi) {
    std::lock_guard lock(m);
    r.ranges.emplace_back(lo, hi);
    r.threads.insert(std::this_thread::get_id());
  });
  std::sort(r.ranges.begin(), r.ranges.end());
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(ranges_cover_every_index_once_in_order) {
  test::scoped_threads two(2);
  for (std::int64_t n : {2, 3, 1000, 1001, 65537}) {
    const recorded r = run(n, 1);
    BOOST_TEST(r.ranges.size() == 2u);
    std::int64_t next = 0;
    for (auto [lo, hi] : r.ranges) {
      BOOST_TEST(lo == next);
      BOOST_TEST(hi > lo);
      next = hi;
    }
    BOOST_TEST(next == n);
    BOOST_TEST(r.threads.size() == 2u);
  }
}

BOOST_AUTO_TEST_CASE(the_grain_limits_how_many_ranges) {
  test::scoped_threads four(4);
  BOOST_TEST(run(100, 30).ranges.size() == 3u);  // 100 / 30: three ranges of at least 30
  BOOST_TEST(run(100, 1).ranges.size() == 4u);   // never more than the threads
  const recorded small = run(50, 30);            // under two grains: one range, the caller's
  BOOST_TEST(small.ranges.size() == 1u);
  BOOST_TEST(small.ranges[0].first == 0);
  BOOST_TEST(small.ranges[0].second == 50);
  BOOST_TEST(*small.threads.begin() == std::this_thread::get_id());
}

BOOST_AUTO_TEST_CASE(one_thread_an_empty_loop_and_a_nested_call_stay_on_the_caller) {
  {
    test::scoped_threads one(1);
    const recorded r = run(1 << 20, 1);
    BOOST_TEST(r.ranges.size() == 1u);
    BOOST_TEST(*r.threads.begin() == std::this_thread::get_id());
  }
  test::scoped_threads two(2);
  BOOST_TEST(run(0, 1).ranges.empty());
  // Inside a range, a second parallel_ranges runs its whole loop on that range's thread.
  std::mutex m;
  std::vector<std::size_t> inner_counts;
  parallel_ranges(2, 1, [&](std::int64_t, std::int64_t) {
    const recorded inner = run(1000, 1);
    std::lock_guard lock(m);
    inner_counts.push_back(inner.ranges.size());
  });
  BOOST_TEST(inner_counts == std::vector<std::size_t>({1, 1}));
}
