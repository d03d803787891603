// Tests for core/checkpoint_steps.cpp (Note [Checkpoint steps]): the multiples of
// --checkpoint-every and the epochs' ends are due, and so are the steps the coordinator
// asks for; each is taken once; when several pass at once only the latest is taken; none
// at or before the last taken (or resumed from) ever is.
#define BOOST_TEST_MODULE checkpoint_steps
#include <boost/test/unit_test.hpp>

#include "core/checkpoint_steps.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(multiples_of_every_and_epoch_ends_are_due_once_each) {
  checkpoint_steps c(4, 6);
  BOOST_TEST(c.any());
  BOOST_TEST(!c.take_due(3).has_value());
  BOOST_TEST(c.take_due(4).value_or(-1) == 4);
  BOOST_TEST(!c.take_due(4).has_value());  // once
  BOOST_TEST(!c.take_due(5).has_value());
  BOOST_TEST(c.take_due(6).value_or(-1) == 6);  // an epoch's end
  BOOST_TEST(c.take_due(8).value_or(-1) == 8);
  BOOST_TEST(c.last() == 8);
}

BOOST_AUTO_TEST_CASE(when_several_pass_at_once_the_latest_is_taken) {
  checkpoint_steps c(4, 0);
  BOOST_TEST(c.take_due(13).value_or(-1) == 12);  // 4 and 8 passed too: only 12
  BOOST_TEST(!c.take_due(15).has_value());
  c.request(14);  // asked for while the state is at 15: taken at the next call, as the latest due
  BOOST_TEST(c.take_due(15).value_or(-1) == 14);
  c.request(17);
  BOOST_TEST(c.take_due(18).value_or(-1) == 17);  // 16 passed as well; 17 is the latest
}

BOOST_AUTO_TEST_CASE(requested_steps_are_due_when_reached_and_spent_once_passed) {
  checkpoint_steps c(0, 0);
  BOOST_TEST(!c.any());
  c.request(5);
  c.request(9);
  BOOST_TEST(c.any());
  BOOST_TEST(!c.take_due(4).has_value());
  BOOST_TEST(c.take_due(5).value_or(-1) == 5);
  BOOST_TEST(c.take_due(10).value_or(-1) == 9);  // reached past it: taken then
  BOOST_TEST(!c.any());
  c.request(9);  // at or before the last taken: not held
  BOOST_TEST(!c.any());
}

BOOST_AUTO_TEST_CASE(nothing_at_or_before_a_step_taken_another_way_is_due) {
  checkpoint_steps c(5, 0);
  c.taken(10);  // a job resumed from checkpoint 10
  BOOST_TEST(!c.take_due(10).has_value());
  BOOST_TEST(!c.take_due(12).has_value());
  c.request(7);
  BOOST_TEST(!c.take_due(14).has_value());
  BOOST_TEST(c.take_due(15).value_or(-1) == 15);
}
