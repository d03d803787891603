// Tests for core/bubble_meter.cpp: a step counts once every stage of its replica has
// reported; the bubble is 1 - sum(busy) / (K * stage 0's window), per epoch and overall.
#define BOOST_TEST_MODULE bubble_meter
#include <boost/test/unit_test.hpp>

#include "core/bubble_meter.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

step_report report(std::uint32_t rank, std::int64_t clock, std::int32_t epoch, double busy, std::int64_t begin_us,
                   std::int64_t end_us) {
  step_report r;
  r.rank = rank;
  r.clock = clock;
  r.epoch = epoch;
  r.busy_seconds = busy;
  r.window_begin_us = begin_us;
  r.window_end_us = end_us;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_step_counts_once_all_its_stages_reported) {
  bubble_meter m(2);
  // Replica 0, clock 1: stage 0 busy 0.6 s in a 1 s window, stage 1 busy 0.4 s.
  m.note(report(0, 1, 0, 0.6, 0, 1'000'000));
  BOOST_TEST(m.fraction() == 0.0);  // half a step: nothing yet
  m.note(report(1, 1, 0, 0.4, 100'000, 900'000));
  BOOST_TEST(m.fraction() == 0.5, tt::tolerance(1e-12));  // 1 - 1.0 / (2 * 1.0)
  BOOST_TEST(m.fraction(0) == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(m.fraction(3) == 0.0);
}

BOOST_AUTO_TEST_CASE(replicas_and_epochs_are_kept_apart) {
  bubble_meter m(2);
  // Replica 1 (ranks 2, 3) reports stage 1 first; its window is still stage 0's.
  m.note(report(3, 1, 0, 1.0, 0, 5'000'000));
  m.note(report(2, 1, 0, 1.0, 0, 2'000'000));  // makespan 2 s: bubble 1 - 2 / 4
  m.note(report(0, 7, 1, 0.9, 0, 1'000'000));
  m.note(report(1, 7, 1, 0.9, 0, 1'000'000));  // epoch 1: 1 - 1.8 / 2
  BOOST_TEST(m.fraction(0) == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(m.fraction(1) == 0.1, tt::tolerance(1e-12));
  BOOST_TEST(m.fraction() == 1.0 - 3.8 / 6.0, tt::tolerance(1e-12));
}
