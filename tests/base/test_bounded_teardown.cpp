// Tests for base/bounded_teardown.cpp: a teardown that finishes is waited for; one that
// does not is left running once the deadline passes, and the caller learns it.
#define BOOST_TEST_MODULE bounded_teardown
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "base/bounded_teardown.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(a_teardown_that_finishes_is_waited_for) {
  bool ran = false;
  BOOST_TEST(bounded_teardown([&] { ran = true; }, 10s));
  BOOST_TEST(ran);  // finished before the call returned
}

BOOST_AUTO_TEST_CASE(a_stuck_teardown_is_left_running_after_the_deadline) {
  auto release = std::make_shared<std::promise<void>>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  const auto start = std::chrono::steady_clock::now();
  const bool done = bounded_teardown(
      [gate = release->get_future().share(), finished] {
        gate.wait();  // stands for an actor system waiting on an actor that never stops
        *finished = true;
      },
      200ms);
  const auto waited = std::chrono::steady_clock::now() - start;
  BOOST_TEST(!done);
  BOOST_TEST(!*finished);
  BOOST_TEST((waited >= 200ms));
  BOOST_TEST((waited < 10s));
  release->set_value();  // the detached teardown ends on its own
  for (int i = 0; i < 1000 && !*finished; ++i) std::this_thread::sleep_for(10ms);
  BOOST_TEST(*finished);
}
