// Tests for client/step_meter.cpp (Note [Steps of a user's loop]): a step ends where the
// loop pushes a key again, a push of several keys ends one when any of them repeats, and
// the time blocked in the store between is not counted as compute.
#define BOOST_TEST_MODULE step_meter
#include <boost/test/unit_test.hpp>

#include "client/step_meter.hpp"

using namespace troupe::kv;
using namespace std::chrono_literals;

namespace {
const step_meter::clock::time_point t0{};
}

BOOST_AUTO_TEST_CASE(a_step_ends_where_a_key_is_pushed_again_and_its_waits_are_not_compute) {
  step_meter m;
  BOOST_TEST(!m.pushed({"w1"}, t0).has_value());
  BOOST_TEST(!m.pushed({"w2", "b2"}, t0 + 10ms).has_value());
  m.blocked(30ms);  // a pull waited for
  const auto first = m.pushed({"w1"}, t0 + 100ms);
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST(first->number == 1);
  BOOST_TEST(first->busy_seconds == 0.070, boost::test_tools::tolerance(1e-9));
  // The next step counts from there, its waits afresh.
  BOOST_TEST(!m.pushed({"w2"}, t0 + 120ms).has_value());
  const auto second = m.pushed({"b2", "w1"}, t0 + 150ms);
  BOOST_REQUIRE(second.has_value());
  BOOST_TEST(second->number == 2);
  BOOST_TEST(second->busy_seconds == 0.050, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(waits_before_the_first_push_and_longer_than_the_step_count_nothing) {
  step_meter m;
  m.blocked(5s);  // init and a barrier before the loop
  BOOST_TEST(!m.pushed({"w"}, t0).has_value());
  m.blocked(2s);  // a clock that went backwards, or blocking beyond the step: never negative
  const auto s = m.pushed({"w"}, t0 + 1s);
  BOOST_REQUIRE(s.has_value());
  BOOST_TEST(s->busy_seconds == 0.0);
}
