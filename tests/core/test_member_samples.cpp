// member_samples: the rows each step of a training member trains, alone. A member's steps
// walk its own share of the epoch's order (the last step shorter) and the rows scale by
// that share; a shed keeps fewer of its own rows from its clock on, while the scale stays;
// granted positions are read through the whole permutation and added after its own rows;
// a grant whose first step the member is in already goes back; a stage without data plans
// row counts only; an epoch forgets the grants behind it.
#define BOOST_TEST_MODULE member_samples
#include <boost/test/unit_test.hpp>

#include <vector>

#include "core/member_samples.hpp"
#include "train/sampler.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t train_size = 50;

// Two workers of batch 10 over 50 samples: 25 each, so 3 steps an epoch (10, 10, 5).
job_spec two_workers() {
  job_spec j;
  j.job_id = "samples-under-test";
  j.mode = sync_mode::sync;
  j.workers = 2;
  j.servers = 1;
  j.train.epochs = 2;
  j.train_size = train_size;
  j.train.batch_size = 10;
  j.train.seed = 7;
  return j;
}

// Worker 1's own positions of `step` of epoch 0, granted (to worker 0) from that step.
rows_grant worker1_rows(const job_spec& job, std::int64_t step, std::uint64_t id) {
  rows_grant g{id, 0, step, {}};
  static_positions(deal_shape_of(job), 1, step, g.positions);
  return g;
}

std::vector<std::int64_t> planned(const member_samples& m, std::int64_t rows) {
  const auto idx = m.indices(0, rows);
  return {idx.begin(), idx.end()};
}

}  // namespace

BOOST_AUTO_TEST_CASE(steps_walk_the_members_own_share_and_scale_by_it) {
  const job_spec job = two_workers();
  BOOST_REQUIRE(steps_per_epoch(job) == 3);
  member_samples m(job, 1, 2);
  m.begin_epoch(train_size, 0, 0);
  const auto order = epoch_indices(train_size, job.train.seed, 0, 1, 2);
  std::vector<std::int64_t> seen;
  for (std::int64_t step = 0; step < 3; ++step) {
    const std::int64_t rows = m.plan_step(step, step);
    BOOST_TEST(rows == (step < 2 ? 10 : 5));
    BOOST_TEST(m.scale_rows() == rows);
    BOOST_TEST(m.rows_at(step) == rows);
    for (std::int64_t i : planned(m, rows)) seen.push_back(i);
  }
  BOOST_TEST(seen == std::vector<std::int64_t>(order.begin(), order.begin() + 25), boost::test_tools::per_element());
  BOOST_TEST(m.indices(2, 3).front() == seen[22]);  // rows 2.. of the planned (last) step
}

BOOST_AUTO_TEST_CASE(a_shed_keeps_fewer_own_rows_from_its_clock_while_the_scale_stays) {
  member_samples m(two_workers(), 0, 2);
  m.begin_epoch(train_size, 0, 0);
  m.keep_from(1, 4);
  BOOST_TEST(m.plan_step(0, 0) == 10);
  BOOST_TEST(m.plan_step(1, 1) == 4);
  BOOST_TEST(m.scale_rows() == 10);  // each kept row weighs what it did in the whole share
  const auto order = epoch_indices(train_size, 7, 0, 0, 2);
  BOOST_TEST(planned(m, 4) == std::vector<std::int64_t>(order.begin() + 10, order.begin() + 14),
             boost::test_tools::per_element());
  BOOST_TEST(m.rows_at(0) == 10);
  BOOST_TEST(m.rows_at(2) == 4);  // the last step's 5 own rows, of which it keeps 4
}

BOOST_AUTO_TEST_CASE(granted_positions_come_through_the_whole_permutation_after_its_own_rows) {
  const job_spec job = two_workers();
  member_samples m(job, 0, 2);
  m.begin_epoch(train_size, 0, 0);
  const rows_grant g = worker1_rows(job, 2, 3);  // while worker 0 is at clock 0
  BOOST_REQUIRE(g.positions.size() == 5u);
  BOOST_TEST(m.take_grant(g, 0));
  BOOST_TEST(m.rows_at(2) == 10);
  BOOST_TEST(m.plan_step(0, 0) == 10);  // not before its step
  BOOST_TEST(m.plan_step(2, 2) == 10);
  BOOST_TEST(m.scale_rows() == 5);  // its own share's rows
  const auto perm = epoch_permutation(train_size, job.train.seed, 0);
  const auto idx = planned(m, 10);
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(idx[5 + i] == perm[static_cast<std::size_t>(g.positions[i])]);
  // The lost worker's own rows at that step are the same samples.
  const auto theirs = epoch_indices(train_size, job.train.seed, 0, 1, 2);
  BOOST_TEST(std::vector<std::int64_t>(idx.begin() + 5, idx.end()) ==
                 std::vector<std::int64_t>(theirs.begin() + 20, theirs.begin() + 25),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_grant_whose_first_step_has_begun_goes_back_and_an_epoch_forgets_old_ones) {
  const job_spec job = two_workers();
  member_samples m(job, 0, 2);
  m.begin_epoch(train_size, 0, 0);
  BOOST_TEST(!m.take_grant(worker1_rows(job, 1, 1), 1));  // the member is in step 1 already
  BOOST_TEST(m.take_grant(worker1_rows(job, 2, 2), 1));
  m.begin_epoch(train_size, 1, 3);
  BOOST_TEST(m.rows_at(2) == 5);  // forgotten: only its own rows are left of that step
}

BOOST_AUTO_TEST_CASE(a_stage_without_data_plans_row_counts_only) {
  member_samples m(two_workers(), 0, 2);
  m.begin_epoch(0, 0, 0);
  BOOST_TEST(m.plan_step(2, 2) == 5);
  BOOST_TEST(m.indices(0, 0).empty());
}
