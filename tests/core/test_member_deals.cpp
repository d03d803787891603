// Tests for the member's side of Note [Dealing a lost worker's samples] (member_step.cpp's
// on_rows_granted and the step's rows), stepped without actors or threads
// (tests/support/member_bench.hpp): a taken grant's rows are trained as extra rows of its
// steps and counted in the reports; a grant whose first step has begun, one with a
// position outside the epoch, one that would pass a step's room, one for an epoch past the
// job's and one to a member that does not deal are returned; and granted rows add to the
// gradient as their own worker's would have (scaled by the step's own rows, not by all);
// a shed keeps fewer of its own rows from the next step (Note [Balancing shares]).
#define BOOST_TEST_MODULE member_deals
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tests/support/member_bench.hpp"

using namespace troupe;
using test::member_bench;
using test::synthetic;

namespace {

// Two sync workers of batch 10, 20 samples each: 2 steps an epoch; plain SGD at a
// constant lr, so the parameters move linearly in the gradients.
job_spec two_workers(std::int32_t epochs = 1) {
  job_spec j;
  j.job_id = "member-under-test";
  j.mode = sync_mode::sync;
  j.workers = 2;
  j.servers = 1;
  j.train.epochs = epochs;
  j.train.batch_size = 10;
  j.train.optimizer.momentum = 0.f;
  j.train.optimizer.weight_decay = 0.f;
  j.train.schedule = lr_schedule_kind::constant;
  j.train.warmup_epochs = 0.f;
  return j;
}

// Member `rank`'s own positions of `step` of epoch 0, granted to it again (duplicates).
rows_grant own_rows(const job_spec& job, std::uint32_t rank, std::int64_t step, std::uint64_t id) {
  rows_grant g{id, 0, step, {}};
  static_positions(deal_shape_of(job), rank, step, g.positions);
  return g;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_taken_grant_is_trained_as_extra_rows_and_counted) {
  member_bench bench(two_workers(2), synthetic(40));
  bench.start();
  // Worker 1's positions of epoch 1, step 1, granted to worker 0 from that step.
  rows_grant g{7, 1, 1, {}};
  static_positions(deal_shape_of(bench.job), 1, 1, g.positions);
  bench.deliver(0, bench.members[0]->on_rows_granted(g));
  BOOST_REQUIRE(bench.answers.size() == 1u);
  BOOST_TEST(bench.answers[0].taken);
  BOOST_TEST(bench.answers[0].id == 7u);
  BOOST_TEST(bench.answers[0].rank == 0u);
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  std::int64_t samples[2] = {0, 0};
  for (const auto& s : bench.steps) {
    samples[s.rank] += s.samples;
    if (s.rank == 0) BOOST_TEST(s.samples == (s.clock == 4 ? 20 : 10), "clock " << s.clock);
  }
  BOOST_TEST(samples[0] == 50);
  BOOST_TEST(samples[1] == 40);
}

BOOST_AUTO_TEST_CASE(grants_that_cannot_be_trained_go_back) {
  member_bench bench(two_workers(2), synthetic(40));
  bench.start();
  const deal_shape d = deal_shape_of(bench.job);
  auto answer = [&](rows_grant g) {
    bench.answers.clear();
    bench.deliver(0, bench.members[0]->on_rows_granted(std::move(g)));
    BOOST_REQUIRE(bench.answers.size() == 1u);
    return bench.answers[0].taken;
  };
  BOOST_TEST(!answer(own_rows(bench.job, 1, 0, 1)));                  // step 0 is under way
  BOOST_TEST(!answer(rows_grant{2, 0, 1, {d.workers * d.samples_per_worker}}));  // no such position
  BOOST_TEST(!answer(rows_grant{3, 0, 1, {-1}}));
  BOOST_TEST(!answer(rows_grant{4, 2, 0, {0}}));                      // the job has 2 epochs
  BOOST_TEST(!answer(rows_grant{5, 0, 2, {0}}));                      // an epoch has 2 steps
  BOOST_TEST_REQUIRE(d.max_extra_rows == 12);  // batch 10 and an eighth
  rows_grant big{6, 0, 1, std::vector<std::int64_t>(13, 0)};          // 13 rows where 12 fit
  BOOST_TEST(!answer(big));
  big.positions.resize(12);
  BOOST_TEST(answer(big));
  BOOST_TEST(!answer(rows_grant{8, 0, 1, {1}}));                      // the step is full now
  job_spec alone = two_workers();
  alone.workers = 1;  // one worker: nobody to deal to, nothing to take
  member_bench single(alone, synthetic(40));
  single.start();
  single.deliver(0, single.members[0]->on_rows_granted(rows_grant{9, 0, 1, {0}}));
  BOOST_REQUIRE(single.answers.size() == 1u);
  BOOST_TEST(!single.answers[0].taken);
}

// Note [Balancing shares]: a shed applies from the step after the one the member is in,
// or from not_before when that is later; the member trains that many of its own rows and
// reports them; a keep outside 1 to the batch is refused.
BOOST_AUTO_TEST_CASE(a_shed_keeps_fewer_own_rows_from_the_next_step) {
  member_bench bench(two_workers(2), synthetic(40));
  bench.start();
  auto answer = [&](rows_shed s) {
    bench.answers.clear();
    bench.deliver(0, bench.members[0]->on_rows_shed(s));
    BOOST_REQUIRE(bench.answers.size() == 1u);
    return bench.answers[0];
  };
  const rows_answer fewer = answer(rows_shed{5, 4, 0});
  BOOST_TEST(fewer.taken);
  BOOST_TEST(fewer.id == 5u);
  BOOST_TEST(fewer.from_clock == 1);
  const rows_answer all = answer(rows_shed{6, 10, 3});
  BOOST_TEST(all.taken);
  BOOST_TEST(all.from_clock == 3);
  BOOST_TEST(!answer(rows_shed{7, 0, 0}).taken);
  BOOST_TEST(!answer(rows_shed{8, 11, 0}).taken);
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  std::int64_t samples[2] = {0, 0};
  for (const auto& s : bench.steps) {
    samples[s.rank] += s.samples;
    // a report's clock counts the steps finished: steps 1 and 2 kept 4 rows
    if (s.rank == 0) BOOST_TEST(s.samples == (s.clock == 2 || s.clock == 3 ? 4 : 10), "clock " << s.clock);
  }
  BOOST_TEST(samples[0] == 28);
  BOOST_TEST(samples[1] == 40);
}

// Sync sums the round's gradients. Granting a worker its own step-1 rows again doubles its
// part of round 1: with the gradient scaled by the step's own rows (1/10), worker 0's
// duplicates move the parameters by its gradient once more, worker 1's by its, and both
// by the whole round once more. Scaled by all the step's rows (1/20) no grant would move
// them at all.
BOOST_AUTO_TEST_CASE(granted_rows_add_to_the_sum_as_their_own_workers_would_have) {
  auto data = synthetic(40);
  auto run = [&](bool grant0, bool grant1) {
    member_bench bench(two_workers(), data);
    bench.start();
    if (grant0) bench.deliver(0, bench.members[0]->on_rows_granted(own_rows(bench.job, 0, 1, 1)));
    if (grant1) bench.deliver(1, bench.members[1]->on_rows_granted(own_rows(bench.job, 1, 1, 2)));
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    return bench.params();
  };
  const tensor plain = run(false, false), more0 = run(true, false), more1 = run(false, true), both = run(true, true);
  const float* a = plain.data<float>();
  const float *b = more0.data<float>(), *c = more1.data<float>(), *e = both.data<float>();
  double moved = 0.0, worst = 0.0;
  for (std::int64_t i = 0; i < plain.numel(); ++i) {
    const double extra0 = b[i] - a[i], extra1 = c[i] - a[i], extra_both = e[i] - a[i];
    moved = std::max(moved, std::abs(extra_both));
    worst = std::max(worst, std::abs(extra0 + extra1 - extra_both));
  }
  BOOST_TEST(moved > 1e-4);
  BOOST_TEST(worst < 1e-3 * moved);
}
