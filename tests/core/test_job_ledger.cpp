// Tests for core/job_ledger.cpp with explicit time: training time counts from the first
// step; an epoch's summary has its samples per second, mean loss and (for pipelines) its
// bubble; staleness is reported per epoch as the change since the previous close; the
// result has the whole run's figures, the steady rate up to the first member that
// finished, and each stage's peak of stored activations; an accuracy at chance with a
// finite loss is reported.
#define BOOST_TEST_MODULE job_ledger
#include <boost/test/unit_test.hpp>

#include "core/job_ledger.hpp"

using namespace troupe;
namespace tt = boost::test_tools;
using std::chrono::milliseconds;

namespace {

job_spec pipeline_job() {
  job_spec j;
  j.workers = 1;
  j.pipeline_stages = 2;
  j.microbatches = 4;
  j.train.epochs = 2;
  return j;
}

const job_clock::time_point t0 = job_clock::time_point{} + std::chrono::hours(1);

// Stage `stage`'s report of the replica's step `clock`, busy for `busy` seconds within a
// window of stage 0's [0, window] seconds.
step_report report(std::uint32_t stage, std::int64_t clock, std::int64_t samples, double busy, double window) {
  return step_report{stage, clock, 0, 0.5, samples, busy, 0, static_cast<std::int64_t>(window * 1e6)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_epoch_summary_counts_from_the_first_step) {
  job_ledger l(pipeline_job());
  l.start(t0);
  l.step(report(0, 1, 0, 0.2, 1.0), t0 + milliseconds(500));  // loading data took 0.5 s: not counted
  l.step(report(1, 1, 100, 0.3, 1.0), t0 + milliseconds(500));
  l.epoch(worker_epoch{0, 0, 0.0, 0, 0, 1.0, tensor()});
  l.epoch(worker_epoch{1, 0, 1.5, 3, 100, 1.0, tensor()});
  const epoch_summary s = l.open_summary(0, 2, t0 + milliseconds(1500));
  BOOST_TEST(s.seconds == 1.0, tt::tolerance(1e-9));
  BOOST_TEST(s.samples_per_second == 100.0, tt::tolerance(1e-9));
  BOOST_TEST(s.train_loss == 0.5);  // 1.5 over 3 steps; stage 0 reports no loss
  BOOST_TEST(s.live_workers == 2u);
  BOOST_TEST(s.pipeline_stages == 2u);
  BOOST_TEST(s.bubble == 0.75, tt::tolerance(1e-9));             // 0.5 s busy of 2 stages x 1 s
  BOOST_TEST(s.theoretical_bubble == 0.2, tt::tolerance(1e-9));  // (2 - 1) / (4 + 2 - 1)
}

BOOST_AUTO_TEST_CASE(staleness_is_reported_as_the_change_since_the_last_close) {
  job_ledger l(pipeline_job());
  epoch_summary first = l.open_summary(0, 1, t0);
  l.add_staleness(first, staleness_totals{30, 10, 7, 0});
  BOOST_TEST(first.mean_staleness == 3.0);
  BOOST_TEST(first.max_staleness == 7);
  epoch_summary second = l.open_summary(1, 1, t0);
  l.add_staleness(second, staleness_totals{40, 20, 7, 0});
  BOOST_TEST(second.mean_staleness == 1.0);  // 10 more over 10 more gradients
  epoch_summary quiet = l.open_summary(1, 1, t0);
  l.add_staleness(quiet, staleness_totals{40, 20, 7, 0});
  BOOST_TEST(quiet.mean_staleness == 0.0);
  const auto totals =
      sum_stats({shard_stats{0, 0, 0, 0, 2, 0, 0, 0, 10, 4, 5, {}}, shard_stats{1, 0, 0, 0, 1, 0, 0, 0, 2, 2, 9, {}}});
  BOOST_TEST(totals.sum == 12);
  BOOST_TEST(totals.count == 6);
  BOOST_TEST(totals.max == 9);
  BOOST_TEST(totals.rejected == 3);
}

BOOST_AUTO_TEST_CASE(the_result_has_the_whole_runs_figures) {
  job_ledger l(pipeline_job());
  l.start(t0);
  l.step(report(0, 1, 0, 0.2, 1.0), t0);
  l.step(report(1, 1, 300, 0.3, 1.0), t0 + milliseconds(1000));
  l.done(worker_done{1, 1, 0, 1}, t0 + milliseconds(1500));  // the steady rate: 300 samples in 1.5 s
  l.step(report(1, 2, 100, 0.3, 1.0), t0 + milliseconds(2000));
  l.done(worker_done{0, 2, 0, 3}, t0 + milliseconds(2000));
  l.training_over(t0 + milliseconds(4000));
  epoch_summary last;
  last.evaluated = true;
  last.test_accuracy = 0.9;
  last.test_loss = 0.3;
  l.record_final(last);
  const job_result r = l.result(staleness_totals{6, 3, 4, 1}, 2, tensor({5}));
  BOOST_TEST(r.samples == 400);
  BOOST_TEST(r.samples_planned == 0);  // the job's data was never loaded: it planned nothing
  BOOST_TEST(r.train_seconds == 4.0, tt::tolerance(1e-9));
  BOOST_TEST(r.samples_per_second == 100.0, tt::tolerance(1e-9));
  BOOST_TEST(r.steady_samples_per_second == 200.0, tt::tolerance(1e-9));
  BOOST_TEST(r.mean_staleness == 2.0);
  BOOST_TEST(r.max_staleness == 4);
  BOOST_TEST(r.rejected == 1);
  BOOST_TEST(r.workers_lost == 2);
  BOOST_TEST((r.peak_stored == std::vector<std::int32_t>{3, 1}));
  BOOST_TEST(r.evaluated);
  BOOST_TEST(r.test_accuracy == 0.9);
  BOOST_TEST(r.params.numel() == 5);
  BOOST_TEST(r.mode == "async");
}

// Each worker's share of the training set, every epoch (the remainder of an uneven
// split is never trained, by design).
BOOST_AUTO_TEST_CASE(the_samples_planned_are_every_worker_s_share_of_every_epoch) {
  job_spec j = pipeline_job();
  j.workers = 3;
  j.train_size = 1000;
  j.train.epochs = 4;
  BOOST_TEST(job_ledger(j).result({}, 0, {}).samples_planned == 333 * 3 * 4);
}

// Note [Accuracy at chance] (train/chance_watch.hpp, whose tests cover the wording): the
// ledger checks only evaluated epochs, passes the warning on, and its result keeps the
// first epoch at chance.
BOOST_AUTO_TEST_CASE(an_accuracy_at_chance_with_a_finite_loss_is_reported) {
  job_ledger l(pipeline_job());
  auto at = [&](int epoch, double accuracy, bool evaluated = true) {
    epoch_summary s;
    s.epoch = epoch;
    s.evaluated = evaluated;
    s.test_accuracy = accuracy;
    s.train_loss = 2.3;
    return l.check_accuracy(s, 10);
  };
  BOOST_TEST(!at(0, 0.82).has_value());
  BOOST_TEST(!at(1, 0.10, false).has_value());  // not evaluated: nothing to judge
  const auto collapsed = at(1, 0.1);
  BOOST_REQUIRE(collapsed.has_value());
  BOOST_TEST(collapsed->find("collapsed (it reached 82.00% at epoch 1)") != std::string::npos, *collapsed);
  BOOST_TEST(at(2, 0.12).has_value());
  BOOST_TEST(l.result({}, 0, {}).accuracy_at_chance_epoch == 1);
  BOOST_TEST(job_ledger(pipeline_job()).result({}, 0, {}).accuracy_at_chance_epoch == -1);
}
