// Tests for core/job_deals.cpp, stepped by hand with explicit time
// (tests/support/job_core_harness.hpp): a lost member's untrained samples go to the others
// with a note that says how many and to whom (Note [Dealing a lost worker's samples]); a
// member that computes four times slower per row than the median is told to keep a
// quarter of its rows, the rows it gives up go to the others, it keeps pace again and
// takes them back from the first epoch not dealt; one behind the others keeps fewer
// still until it catches up; sync balances only with --share-balance on (Note
// [Balancing shares] in core/sample_deal.hpp).
#define BOOST_TEST_MODULE job_deals
#include <boost/test/unit_test.hpp>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

namespace {

// 4 workers of batch 8, 10 steps an epoch, 10 epochs.
job_spec four_workers(sync_mode mode) {
  job_spec j = tiny_job(mode, 4);
  j.train.batch_size = 8;
  j.train_size = 4 * 8 * 10;
  j.train.epochs = 10;
  return j;
}

// Every member reports one more step of `rows[r]` samples computed in busy[r] seconds.
job_actions_list step_all(harness& h, const std::vector<std::int64_t>& rows, const std::vector<double>& busy,
                          std::int64_t& clock) {
  job_actions_list out;
  ++clock;
  for (std::uint32_t r = 0; r < rows.size(); ++r) {
    auto did = h.core->on_step(step_report{r, clock, 0, 0.5, rows[r], busy[r], 0, 0}, h.now);
    out.insert(out.end(), did.begin(), did.end());
  }
  return out;
}

std::int64_t granted_rows(const job_actions_list& out, std::uint32_t not_to) {
  std::int64_t n = 0;
  for (const grant_rows& g : all_of<grant_rows>(out)) {
    BOOST_TEST(g.rank != not_to);
    n += static_cast<std::int64_t>(g.grant.positions.size());
  }
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_lost_members_untrained_samples_go_to_the_others_and_are_said) {
  harness h(four_workers(sync_mode::async));
  h.start();
  for (std::uint32_t r = 0; r < 4; ++r) h.step(r, 2, 0, 8);
  const auto out = h.core->on_member_down(1, std::nullopt, "killed", h.now);
  // Steps 2-9 of its epoch: 64 samples, to the three others from their step 4.
  BOOST_TEST(granted_rows(out, 1) == 64);
  BOOST_TEST(all_of<grant_rows>(out).size() == 3u);
  bool said = false;
  for (const note& n : all_of<note>(out))
    said = said || n.text == "worker 1's untrained samples: 64 of epoch 1 go to workers 0, 2, 3";
  BOOST_TEST(said);
}

BOOST_AUTO_TEST_CASE(a_member_four_times_slower_keeps_a_quarter_of_its_rows_until_it_keeps_pace) {
  harness h(four_workers(sync_mode::async));
  h.start();
  std::int64_t clock = 0;
  const std::vector<double> slow{0.01, 0.01, 0.04, 0.01};
  for (int k = 0; k < 19; ++k)  // too few steps yet to tell
    BOOST_TEST(all_of<shed_rows>(step_all(h, {8, 8, 8, 8}, slow, clock)).empty());
  const auto told = step_all(h, {8, 8, 8, 8}, slow, clock);
  const shed_rows s = only<shed_rows>(told);
  BOOST_TEST(s.rank == 2u);
  BOOST_TEST(s.shed.keep == 2);
  const std::string says = only<note>(told).text;
  BOOST_TEST(says.find("worker 2 computes 0.25x the median rows per second: it trains 2 of its 8 samples") == 0u,
             says);
  // In step with the others, it keeps 2 rows from its next step: rows 2-7 of steps 1-9 of
  // epoch 2, 54 samples, go to the others at once.
  BOOST_TEST(s.shed.not_before == 0);
  BOOST_TEST(granted_rows(h.core->on_rows_answer(rows_answer{2, s.shed.id, true, 21}), 2) == 54);
  // Two rows in a quarter of the time: as slow per row as before, nothing more to say.
  for (int k = 0; k < 5; ++k)
    BOOST_TEST(all_of<shed_rows>(step_all(h, {8, 8, 2, 8}, {0.01, 0.01, 0.01, 0.01}, clock)).empty());
  // Now as fast per row as the others: more rows as its smoothed rate climbs (each shed
  // answered), then all of them, each from the first clock not dealt: an epoch's start.
  std::int64_t kept = 2;
  std::optional<shed_rows> again;
  job_actions_list back;
  for (int k = 0; k < 40 && !again; ++k) {
    back = step_all(h, {8, 8, 2, 8}, {0.01, 0.01, 0.0025, 0.01}, clock);
    for (const shed_rows& more : all_of<shed_rows>(back)) {
      BOOST_TEST(more.shed.keep > kept);
      BOOST_TEST(more.shed.not_before > clock);
      BOOST_TEST(more.shed.not_before % 10 == 0);
      kept = more.shed.keep;
      h.core->on_rows_answer(rows_answer{2, more.shed.id, true, more.shed.not_before});
      if (kept == 8) again = more;
    }
  }
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(only<note>(back).text.find("worker 2 keeps pace again") == 0u);
}

BOOST_AUTO_TEST_CASE(a_slow_member_behind_the_others_keeps_fewer_rows_until_it_catches_up) {
  job_spec j = tiny_job(sync_mode::async, 4);
  j.train.batch_size = 32;
  j.train_size = 4 * 32 * 100;  // 100 steps an epoch
  j.train.epochs = 4;           // 400 steps in all
  harness h(j);
  h.start();
  // Worker 2 computes a quarter as fast and steps once to the others' four: at its 20th
  // step, when it can be told, they are at step 80.
  job_actions_list told;
  for (std::int64_t k = 1; k <= 80; ++k) {
    for (std::uint32_t r : {0u, 1u, 3u}) h.core->on_step(step_report{r, k, 0, 0.5, 32, 0.01, 0, 0}, h.now);
    if (k % 4 == 0) told = h.core->on_step(step_report{2, k / 4, 0, 0.5, 32, 0.04, 0, 0}, h.now);
    if (k < 80) BOOST_TEST(all_of<shed_rows>(told).empty());
  }
  // Its pace alone asks for 8 of 32 rows; with 320 of the job's steps left to the others'
  // 380 to it, 32 x 0.25 x 320/380 = 6.7: it keeps 7 and gains on them.
  const shed_rows s = only<shed_rows>(told);
  BOOST_TEST(s.rank == 2u);
  BOOST_TEST(s.shed.keep == 7);
  const std::string says = only<note>(told).text;
  BOOST_TEST(says.find("it trains 7 of its 32 samples a step and the others the rest, fewer than its pace alone asks "
                       "while it catches up") != std::string::npos,
             says);
  // It keeps 7 rows from its next step, at its pace per row, and steps twice to the
  // others' once: at their step 140 it has caught up, and keeps the 8 its pace asks (a
  // change of one row, under a fifth of 7, that ends its catch-up).
  h.core->on_rows_answer(rows_answer{2, s.shed.id, true, 21});
  std::vector<shed_rows> after;
  std::int64_t own = 20;
  for (std::int64_t k = 81; k <= 150; ++k) {
    for (std::uint32_t r : {0u, 1u, 3u}) h.core->on_step(step_report{r, k, 0, 0.5, 32, 0.01, 0, 0}, h.now);
    for (int twice = 0; twice < 2 && own < k; ++twice)
      for (const shed_rows& more : all_of<shed_rows>(h.core->on_step(step_report{2, ++own, 0, 0.5, 7, 0.00875, 0, 0},
                                                                      h.now))) {
        BOOST_TEST(own >= 140);
        after.push_back(more);
      }
  }
  BOOST_TEST_REQUIRE(after.size() == 1u);
  BOOST_TEST(after[0].shed.keep == 8);
}

BOOST_AUTO_TEST_CASE(sync_balances_shares_only_when_asked) {
  for (const share_balance b : {share_balance::automatic, share_balance::off, share_balance::on}) {
    job_spec j = four_workers(sync_mode::sync);
    j.balance_shares = b;
    harness h(j);
    h.start();
    std::int64_t clock = 0;
    job_actions_list out;
    for (int k = 0; k < 21; ++k) {
      auto did = step_all(h, {8, 8, 8, 8}, {0.01, 0.01, 0.04, 0.01}, clock);
      out.insert(out.end(), did.begin(), did.end());
    }
    BOOST_TEST(all_of<shed_rows>(out).size() == (b == share_balance::on ? 1u : 0u));
  }
}
