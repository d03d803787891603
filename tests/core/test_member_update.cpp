// Tests for core/member_update.cpp, the end of a step, stepped without actors or
// threads (tests/support/member_bench.hpp): stages that apply the optimizer themselves
// are bitwise train-local; a diverging loss stops the member with diverged; a refused
// push is counted and training goes on; a late sync worker with backup workers skips to
// the open round and reports what was dropped.
#define BOOST_TEST_MODULE member_update
#include <boost/test/unit_test.hpp>

#include <map>
#include <vector>

#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"
#include "train/trainer.hpp"

using namespace troupe;
using test::same_bits;
using test::member_bench;
using test::member_job;
using test::synthetic;

BOOST_AUTO_TEST_CASE(stages_that_apply_the_optimizer_themselves_are_bitwise_train_local) {
  auto data = synthetic(400);
  member_bench bench(member_job(2, 1, 0), data);
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.pulls.empty());  // nothing to pull: every step starts from the mailbox
  tensor full({bench.m.num_params()});
  const auto spans = job_stage_spans(bench.job, bench.m);
  for (const auto& e : bench.epochs)
    if (e.epoch == 1) copy(full.view().flat(spans[e.rank].param_offset, spans[e.rank].numel), e.params);
  auto local = train_local(bench.job.train, *data);
  BOOST_TEST(same_bits(full, local->params));
}

BOOST_AUTO_TEST_CASE(a_diverging_loss_stops_with_diverged) {
  job_spec job = member_job(1, 1);
  job.train.lr = 1e6f;
  job.train.warmup_epochs = 0.f;
  member_bench bench(job, synthetic(400));
  bench.start();
  bench.run();
  BOOST_REQUIRE_EQUAL(bench.stopped.size(), 1u);
  BOOST_TEST((bench.stopped[0].code == errc::diverged));
  BOOST_TEST(bench.stopped[0].detail.find("lower --lr") != std::string::npos, bench.stopped[0].detail);
}

BOOST_AUTO_TEST_CASE(a_refused_push_is_counted_and_training_goes_on) {
  job_spec job = member_job(1, 1);
  job.train.epochs = 1;
  member_bench bench(job, synthetic(200));
  bench.poison_pushes = 1;
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.done[0].rejected == 1);
  BOOST_REQUIRE(!bench.warnings.empty());
  BOOST_TEST(bench.warnings[0].find("shard 0 refused the gradient of clock 0: not_finite") != std::string::npos,
             bench.warnings[0]);
}

// Note [Backup workers]: three sync workers, one backup, worker 2 slow: rounds close
// without it, its late gradients are dropped, and it skips to the open round, reporting
// every epoch once and the dropped samples.
BOOST_AUTO_TEST_CASE(a_late_worker_skips_to_the_open_round_and_reports_what_was_dropped) {
  job_spec job = member_job(1, 1);
  job.workers = 3;
  job.backup_workers = 1;
  job.train.epochs = 3;
  job.train.batch_size = 10;  // 80 samples each: 8 steps per epoch, 24 in all
  member_bench bench(job, synthetic(240));
  bench.slow_member = 2;
  bench.slow_requeues = 6;  // about six rounds of the others per step of its own
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_REQUIRE(bench.done.size() == 3u);
  for (const auto& [rank, d] : bench.done) BOOST_TEST(d.clock == 24);
  std::map<std::uint32_t, std::vector<std::int32_t>> epochs;
  for (const auto& e : bench.epochs) epochs[e.rank].push_back(e.epoch);
  for (std::uint32_t r = 0; r < 3; ++r) BOOST_TEST(epochs[r] == (std::vector<std::int32_t>{0, 1, 2}));
  std::map<std::uint32_t, std::int64_t> computed;
  std::int64_t dropped = 0, skipped = 0, previous = 0;
  for (const auto& s : bench.steps) {
    dropped += s.samples_dropped;
    computed[s.rank] += s.samples;
    if (s.rank != 2) continue;
    skipped += s.clock - previous - 1;  // clocks between two of its reports were skipped
    previous = s.clock;
  }
  for (const auto& [rank, d] : bench.done) dropped += d.samples_dropped;
  const std::int64_t late = bench.shard->counters().late;
  BOOST_TEST(late > 0);
  BOOST_TEST(dropped == late * 10);  // one shard: every late gradient is a step's 10 samples
  BOOST_TEST(skipped > 0);           // it fell behind by more than a round and caught up
  BOOST_TEST(computed[0] == 240);
  BOOST_TEST(computed[1] == 240);
  BOOST_TEST(computed[2] < 240);     // the rounds it skipped were not computed
  BOOST_TEST(bench.shard->version() == 24);
}
