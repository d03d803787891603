// Tests for core/step_plan.cpp: a step starts with its actions, slots and timings fresh
// (nothing of the step before survives but `begin`, which its pulls set), walks its
// actions in order to the last, and adds each compute to its busy seconds and to its
// direction's.
#define BOOST_TEST_MODULE step_plan
#include <boost/test/unit_test.hpp>

#include "core/step_plan.hpp"

using namespace troupe;
using wall = step_plan::wall;

BOOST_AUTO_TEST_CASE(a_step_walks_its_actions_in_order_to_the_last) {
  step_plan p;
  BOOST_TEST(!p.has_action());  // before any start
  const auto t = wall::now();
  p.start(7, 64, 2, {{true, 0}, {true, 1}, {false, 1}, {false, 0}}, t);
  BOOST_TEST(p.running);
  BOOST_TEST(p.clock == 7);
  BOOST_TEST(p.batch == 64);
  BOOST_TEST((p.slot_of == std::vector<int>{-1, -1}));
  BOOST_TEST((p.params_ready == t));
  std::vector<std::pair<bool, int>> seen;
  for (; p.has_action(); ++p.next) {
    seen.emplace_back(p.action().forward, p.action().microbatch);
    BOOST_TEST(p.at_last_action() == (p.next == 3));
  }
  BOOST_TEST((seen == std::vector<std::pair<bool, int>>{{true, 0}, {true, 1}, {false, 1}, {false, 0}}));
  p.running = false;
  p.next = 0;
  BOOST_TEST(!p.has_action());  // a step that ended runs nothing more
}

BOOST_AUTO_TEST_CASE(a_new_step_keeps_nothing_of_the_last_but_its_begin) {
  step_plan p;
  const auto t0 = wall::now();
  p.start(1, 32, 1, {{true, 0}, {false, 0}}, t0);
  p.begin = t0;
  p.slot_of[0] = 3;
  p.forward_open = true;
  p.bucket_next = 2;
  p.backward_in = tensor({4});
  p.pushed = true;
  p.loss = 0.5;
  p.first_action = t0;
  p.computed(true, t0, t0 + std::chrono::milliseconds(30));
  p.computed(false, t0, t0 + std::chrono::milliseconds(50));
  BOOST_TEST(p.busy == 0.08, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.forward_s == 0.03, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.backward_s == 0.05, boost::test_tools::tolerance(1e-9));
  p.next = 2;
  p.start(2, 16, 3, {{true, 0}}, t0 + std::chrono::seconds(1));
  BOOST_TEST(p.next == 0u);
  BOOST_TEST((p.slot_of == std::vector<int>{-1, -1, -1}));
  BOOST_TEST(!p.forward_open);
  BOOST_TEST(p.bucket_next == 0u);
  BOOST_TEST(p.backward_in.empty());
  BOOST_TEST(!p.pushed);
  BOOST_TEST(p.loss == 0.0);
  BOOST_TEST(p.busy == 0.0);
  BOOST_TEST(p.forward_s == 0.0);
  BOOST_TEST(p.backward_s == 0.0);
  BOOST_TEST(!p.first_action.has_value());
  BOOST_TEST((p.begin == t0));  // the pulls of the new step set it
}
