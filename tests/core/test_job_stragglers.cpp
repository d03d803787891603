// Tests for core/job_stragglers.cpp, stepped by hand with explicit time
// (tests/support/job_core_harness.hpp): in ssp a member whose compute per step is above
// --straggler-factor times the median is named to the shards as soon as it has reported
// two steps, named once, cleared only well below the line, and counted in
// troupe_stragglers; a step the kernel preempted names nobody, a member that turns slow is
// named once most of its latest steps are slow; the other modes and --straggler-factor 0
// name nobody.
#define BOOST_TEST_MODULE job_stragglers
#include <boost/test/unit_test.hpp>

#include <sstream>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

namespace {

// Naming alone: without --share-balance's sheds (tests/core/test_job_deals.cpp).
job_spec naming_job(sync_mode mode, std::uint32_t workers) {
  job_spec j = tiny_job(mode, workers);
  j.balance_shares = share_balance::off;
  return j;
}

// Every member reports `steps` more steps, member r computing busy[r] seconds each, and
// the watchdog ticks after each round of reports; returns what the reports and ticks did.
job_actions_list steps_then_tick(harness& h, const std::vector<double>& busy, int steps, std::int64_t& clock) {
  job_actions_list out;
  for (int k = 0; k < steps; ++k) {
    ++clock;
    for (std::uint32_t r = 0; r < busy.size(); ++r) {
      auto did = h.core->on_step(step_report{r, clock, 0, 0.5, 50, busy[r], 0, 0}, h.now);
      out.insert(out.end(), did.begin(), did.end());
    }
    h.later(milliseconds(1000));
    auto ticked = h.core->on_tick(h.now);
    out.insert(out.end(), ticked.begin(), ticked.end());
  }
  return out;
}

double scraped(const observability& obs, const std::string& name) {
  std::istringstream scrape(obs.metrics->scrape());
  for (std::string line; std::getline(scrape, line);)
    if (line.rfind(name + "{", 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_member_that_computes_four_times_the_median_is_named_once) {
  observability obs;
  obs.metrics = std::make_shared<monitoring::registry>("job-under-test");
  harness h(naming_job(sync_mode::ssp, 4), obs);
  h.start();
  std::int64_t clock = 0;
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.04, 0.01}, 1, clock)).empty());  // 1 step: too few
  const auto named = steps_then_tick(h, {0.01, 0.01, 0.04, 0.01}, 1, clock);
  const name_straggler n = only<name_straggler>(named);
  BOOST_TEST(n.rank == 2u);
  BOOST_TEST(n.slow);
  const std::string says = only<note>(named).text;
  BOOST_TEST(says.find("worker 2 is a straggler: its steps compute 4.0x the median") == 0u, says);
  BOOST_TEST(says.find("the ssp bound leaves it out") != std::string::npos);
  BOOST_TEST(scraped(obs, "troupe_stragglers") == 1.0);
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.04, 0.01}, 3, clock)).empty());  // named once
  // Faster, but still above 0.75 x 2 = 1.5 x the median: still a straggler.
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.016, 0.01}, 20, clock)).empty());
  // Level with the others: cleared.
  const auto cleared = steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 20, clock);
  const name_straggler c = only<name_straggler>(cleared);
  BOOST_TEST(c.rank == 2u);
  BOOST_TEST(!c.slow);
  BOOST_TEST(only<note>(cleared).text.find("worker 2 is no longer a straggler") == 0u);
  BOOST_TEST(scraped(obs, "troupe_stragglers") == 0.0);
}

BOOST_AUTO_TEST_CASE(with_two_members_the_faster_one_is_the_reference) {
  harness h(naming_job(sync_mode::ssp, 2));
  h.start();
  std::int64_t clock = 0;
  const auto named = steps_then_tick(h, {0.03, 0.01}, 5, clock);
  BOOST_TEST(only<name_straggler>(named).rank == 0u);
}

BOOST_AUTO_TEST_CASE(only_ssp_names_stragglers_and_factor_0_names_nobody) {
  for (sync_mode mode : {sync_mode::sync, sync_mode::async}) {
    harness h(naming_job(mode, 3));
    h.start();
    std::int64_t clock = 0;
    BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.1}, 10, clock)).empty());
  }
  job_spec off = naming_job(sync_mode::ssp, 3);
  off.straggler_factor = 0.0;
  harness h(off);
  h.start();
  std::int64_t clock = 0;
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.1}, 10, clock)).empty());
}

BOOST_AUTO_TEST_CASE(a_dead_straggler_is_not_counted) {
  harness h(naming_job(sync_mode::ssp, 3));
  h.start();
  std::int64_t clock = 0;
  BOOST_TEST(only<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.1}, 5, clock)).rank == 2u);
  h.core->on_member_down(2, std::nullopt, "killed", h.now);
  // Two left, level: nobody is named, nothing is cleared for the dead one.
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01}, 5, clock)).empty());
}

BOOST_AUTO_TEST_CASE(a_step_that_reads_forty_times_the_others_names_nobody) {
  harness h(naming_job(sync_mode::ssp, 4));
  h.start();
  std::int64_t clock = 0;
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 5, clock)).empty());
  // One step preempted by the kernel (a 4 ms slice against 100 us of compute), then level.
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.4, 0.01, 0.01}, 1, clock)).empty());
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 10, clock)).empty());
  // Such steps now and then, four in every nine at most: still nobody.
  for (int round = 0; round < 3; ++round) {
    BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.4, 0.01, 0.01}, 4, clock)).empty());
    BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 5, clock)).empty());
  }
}

BOOST_AUTO_TEST_CASE(one_slow_step_of_a_members_first_two_names_nobody) {
  harness h(naming_job(sync_mode::ssp, 4));
  h.start();
  std::int64_t clock = 0;
  // Worker 1's first step preempted, its second level: the lower of the two is a normal one.
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.4, 0.01, 0.01}, 1, clock)).empty());
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 1, clock)).empty());
  // Its third slow too: two of three, the median, is slow.
  BOOST_TEST(only<name_straggler>(steps_then_tick(h, {0.01, 0.4, 0.01, 0.01}, 1, clock)).rank == 1u);
}

BOOST_AUTO_TEST_CASE(a_member_that_turns_slow_is_named_once_most_of_its_latest_steps_are) {
  harness h(naming_job(sync_mode::ssp, 4));
  h.start();
  std::int64_t clock = 0;
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.01}, 10, clock)).empty());
  // Four slow steps of nine: the median is still a normal one.
  BOOST_TEST(all_of<name_straggler>(steps_then_tick(h, {0.01, 0.01, 0.01, 0.04}, 4, clock)).empty());
  // The fifth makes the slow ones most of them.
  const auto named = steps_then_tick(h, {0.01, 0.01, 0.01, 0.04}, 1, clock);
  BOOST_TEST(only<name_straggler>(named).rank == 3u);
  BOOST_TEST(only<note>(named).text.find("worker 3 is a straggler: its steps compute 4.0x the median") == 0u);
}
