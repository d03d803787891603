// Tests for core/epoch_clock.cpp: a member's clock moves by one per step, computed or
// skipped; an epoch closes after its steps with the tally of the steps computed in it,
// and the next begins at its first step; a member that joins mid-job starts in the epoch
// and at the step its clock falls on; the job's last step and its end are known.
#define BOOST_TEST_MODULE epoch_clock
#include <boost/test/unit_test.hpp>

#include "core/epoch_clock.hpp"

using namespace troupe;
using steady = epoch_clock::steady;

BOOST_AUTO_TEST_CASE(epochs_close_with_the_tally_of_their_computed_steps) {
  epoch_clock c(3, 2, 0);
  const auto t0 = steady::now();
  BOOST_REQUIRE(c.start(t0));
  BOOST_TEST(c.epoch() == 0);
  BOOST_TEST(c.step_in_epoch() == 0);
  c.step_done(1.5, 10);
  c.skip_step();  // a round closed without this member: moves the clock, tallies nothing
  BOOST_TEST(!c.epoch_over());
  c.step_done(0.5, 7);
  BOOST_TEST(c.clock() == 3);
  BOOST_REQUIRE(c.epoch_over());
  BOOST_TEST(!c.in_last_step());
  const epoch_tally t = c.close_epoch(t0 + std::chrono::seconds(2));
  BOOST_TEST(t.epoch == 0);
  BOOST_TEST(t.loss == 2.0);
  BOOST_TEST(t.steps == 2);
  BOOST_TEST(t.samples == 17);
  BOOST_TEST(t.seconds == 2.0);
  // The next epoch began, empty, at its first step.
  BOOST_TEST(!c.job_over());
  BOOST_TEST(c.epoch() == 1);
  BOOST_TEST(c.step_in_epoch() == 0);
  c.step_done(1.0, 1);
  c.step_done(1.0, 1);
  BOOST_TEST(c.in_last_step());
  c.step_done(1.0, 1);
  const epoch_tally last = c.close_epoch(steady::now());
  BOOST_TEST(last.epoch == 1);
  BOOST_TEST(last.steps == 3);
  BOOST_TEST(last.samples == 3);
  BOOST_TEST(c.job_over());
  BOOST_TEST(c.clock() == 6);
}

BOOST_AUTO_TEST_CASE(a_member_joining_mid_job_starts_where_its_clock_falls) {
  epoch_clock c(4, 3, 6);
  BOOST_TEST(c.clock() == 6);  // known before it starts (a resumed checkpoint is checked against it)
  BOOST_REQUIRE(c.start(steady::now()));
  BOOST_TEST(c.epoch() == 1);
  BOOST_TEST(c.step_in_epoch() == 2);
  c.step_done(3.0, 5);
  c.step_done(1.0, 5);
  BOOST_REQUIRE(c.epoch_over());
  const epoch_tally t = c.close_epoch(steady::now());
  BOOST_TEST(t.epoch == 1);
  BOOST_TEST(t.steps == 2);  // only the steps it computed
  BOOST_TEST(t.loss == 4.0);
  BOOST_TEST(c.epoch() == 2);
}

BOOST_AUTO_TEST_CASE(a_clock_past_the_last_epoch_starts_nothing) {
  epoch_clock done(5, 2, 10);
  BOOST_TEST(!done.start(steady::now()));
  BOOST_TEST(done.job_over());
  epoch_clock last(5, 2, 9);
  BOOST_REQUIRE(last.start(steady::now()));
  BOOST_TEST(last.in_last_step());
}

BOOST_AUTO_TEST_CASE(epoch_ends_are_multiples_of_the_epochs_steps) {
  epoch_clock c(4, 2, 0);
  BOOST_TEST(c.ends_epoch(4));
  BOOST_TEST(c.ends_epoch(8));
  BOOST_TEST(!c.ends_epoch(6));
  epoch_clock none(0, 1, 0);  // an epoch of no steps counts as one step
  BOOST_TEST(none.ends_epoch(3));
}
