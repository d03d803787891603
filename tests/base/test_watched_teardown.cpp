// Tests for base/watched_teardown.cpp: a quick teardown runs on the caller's thread and
// neither warns nor leaves; a slow one warns once, after warn_after; a stuck one warns,
// then leaves after leave_after (here `leave` ends the stuck teardown, as exiting the
// process would end it); without `leave` a slow teardown is only warned about.
#define BOOST_TEST_MODULE watched_teardown
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "base/watched_teardown.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

const teardown_limits short_limits{100ms, 400ms};

}  // namespace

BOOST_AUTO_TEST_CASE(a_quick_teardown_runs_on_the_callers_thread_unwatched) {
  std::thread::id ran_on;
  std::atomic<int> warned{0}, left{0};
  watched_teardown([&] { ran_on = std::this_thread::get_id(); }, short_limits, [&] { ++warned; }, [&] { ++left; });
  BOOST_TEST((ran_on == std::this_thread::get_id()));
  std::this_thread::sleep_for(500ms);  // past both limits: the watcher has ended without acting
  BOOST_TEST(warned.load() == 0);
  BOOST_TEST(left.load() == 0);
}

BOOST_AUTO_TEST_CASE(a_slow_teardown_is_warned_about_once_and_not_left) {
  std::atomic<int> warned{0}, left{0};
  steady::time_point warned_at{};
  const auto start = steady::now();
  watched_teardown([] { std::this_thread::sleep_for(250ms); }, short_limits,
                   [&] {
                     warned_at = steady::now();
                     ++warned;
                   },
                   [&] { ++left; });
  BOOST_TEST(warned.load() == 1);
  BOOST_TEST(left.load() == 0);
  BOOST_TEST((warned_at - start >= 100ms));
}

BOOST_AUTO_TEST_CASE(a_stuck_teardown_is_warned_about_then_left_after_the_limit) {
  // Boost.Test is not thread-safe: the watcher's callbacks only record, and the test's
  // thread checks.
  std::atomic<int> warned{0}, left{0}, left_before_warning{-1};
  std::promise<void> released;
  auto release = released.get_future();
  steady::time_point left_at{};
  const auto start = steady::now();
  watched_teardown([&] { BOOST_REQUIRE(release.wait_for(30s) == std::future_status::ready); }, short_limits,
                   [&] {
                     left_before_warning = left.load();
                     ++warned;
                   },
                   [&] {
                     left_at = steady::now();
                     ++left;
                     released.set_value();
                   });
  BOOST_TEST(warned.load() == 1);
  BOOST_TEST(left_before_warning.load() == 0);  // the warning came first
  BOOST_TEST(left.load() == 1);
  BOOST_TEST((left_at - start >= 400ms));
  BOOST_TEST((left_at - start < 20s));
}

BOOST_AUTO_TEST_CASE(without_leave_a_stuck_teardown_is_only_warned_about) {
  std::atomic<int> warned{0};
  watched_teardown([] { std::this_thread::sleep_for(600ms); }, short_limits, [&] { ++warned; }, nullptr);
  BOOST_TEST(warned.load() == 1);
}
