// Tests for core/job_epochs.cpp, stepped by hand with explicit time
// (tests/support/job_core_harness.hpp): epochs close when every live member has reported
// them (the last only after training), through the shards' statistics and an
// evaluation, into the job's result; simulated compute closes them without parameters;
// with no servers the stages' parameters are used; losing every member names the first
// loss.
#define BOOST_TEST_MODULE job_epochs
#include <boost/test/unit_test.hpp>

#include <optional>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

BOOST_AUTO_TEST_CASE(epochs_close_through_statistics_and_evaluation_into_the_result) {
  harness h(tiny_job(sync_mode::async));
  h.start();
  h.later(milliseconds(100));  // loading data: training time starts at the first step
  h.step(0, 1, 0);
  h.step(1, 1, 0);
  BOOST_TEST(all_of<gather>(h.epoch(0, 0)).empty());  // worker 1 has not finished epoch 0
  h.later(milliseconds(1000));
  const auto g0 = only<gather>(h.epoch(1, 0));
  BOOST_TEST(g0.with_params);
  const auto eval0 = only<evaluate>(h.answer(g0, 6, 4));
  BOOST_TEST(eval0.epoch == 0);
  BOOST_TEST(eval0.params.numel() == h.m.num_params());
  const auto closed0 = only<epoch_closed>(h.core->on_evaluated(eval_reply{0, 0.75, 0.6})).summary;
  BOOST_TEST(closed0.evaluated);
  BOOST_TEST(closed0.test_accuracy == 0.75);
  BOOST_TEST(closed0.mean_staleness == 1.5);  // 12 staleness over 8 gradients, two shards
  BOOST_TEST(closed0.samples_per_second == 100.0, boost::test_tools::tolerance(1e-9));  // 100 samples in 1 s
  BOOST_TEST(closed0.live_workers == 2u);
  h.step(0, 2, 1);
  h.step(1, 2, 1);
  h.epoch(0, 1);
  BOOST_TEST(all_of<gather>(h.epoch(1, 1)).empty());  // the last epoch waits for the end of training
  BOOST_TEST(all_of<gather>(h.done(0, 2)).empty());
  h.later(milliseconds(1000));
  const auto g1 = only<gather>(h.done(1, 2));
  BOOST_TEST((h.core->phase() == job_phase::finishing));
  const auto eval1 = only<evaluate>(h.answer(g1, 6, 4));
  const auto last = h.core->on_evaluated(eval_reply{1, 0.875, 0.4});
  BOOST_TEST(only<epoch_closed>(last).summary.mean_staleness == 0.0);  // nothing new since epoch 0
  const auto final_gather = only<gather>(last);
  BOOST_TEST(!final_gather.with_params);
  const auto end = only<finish>(h.answer(final_gather, 6, 4));
  BOOST_REQUIRE(std::holds_alternative<job_result>(end.outcome));
  const job_result& r = std::get<job_result>(end.outcome);
  BOOST_TEST(r.mode == "async");
  BOOST_TEST(r.samples == 200);
  BOOST_TEST(r.test_accuracy == 0.875);
  BOOST_TEST(r.evaluated);
  BOOST_TEST(r.train_seconds == 2.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.mean_staleness == 1.5);
  BOOST_TEST(r.workers_lost == 0);
  BOOST_TEST(r.params.numel() == h.m.num_params());
  BOOST_TEST((h.core->phase() == job_phase::finished));
  BOOST_TEST(h.step(0, 3, 1).empty());  // nothing happens after the end
  BOOST_TEST(only<refuse>(h.member()).why.detail == "the job has ended");
}

BOOST_AUTO_TEST_CASE(simulated_compute_closes_epochs_without_parameters_or_evaluation) {
  job_spec job = tiny_job(sync_mode::async, 1, 1);
  job.train.epochs = 1;
  job.simulate_compute_ms = 1;
  harness h(job);
  h.start();
  h.step(0, 1, 0);
  h.epoch(0, 0);
  const auto g = only<gather>(h.done(0, 1));
  BOOST_TEST(!g.with_params);
  const auto closed = h.answer(g);
  BOOST_TEST(!only<epoch_closed>(closed).summary.evaluated);
  const auto end = only<finish>(h.answer(only<gather>(closed)));
  BOOST_TEST(std::get<job_result>(end.outcome).params.empty());
}

BOOST_AUTO_TEST_CASE(with_no_servers_the_stages_report_their_parameters) {
  job_spec job = tiny_job(sync_mode::sync, 1, 0);
  job.train.model = "mlp:4-5-3";
  job.train.epochs = 1;
  job.pipeline_stages = 2;
  job.cuts = {2};
  harness h(job);
  h.start();
  const auto spans = job_stage_spans(h.job, h.m);
  tensor first({spans[0].numel}), second({spans[1].numel});
  first.data<float>()[0] = 3.f;
  second.data<float>()[0] = 4.f;
  h.core->on_epoch(worker_epoch{0, 0, 0, 0, 0, 0.1, first}, h.now);
  h.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, second}, h.now);
  h.done(0, 1);
  const auto eval = only<evaluate>(h.done(1, 1));  // no shards: nothing to gather from
  BOOST_TEST(eval.params.data<float>()[spans[0].param_offset] == 3.f);
  BOOST_TEST(eval.params.data<float>()[spans[1].param_offset] == 4.f);
  harness bad(job);
  bad.start();
  const auto wrong = bad.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, tensor({1})}, bad.now);
  BOOST_TEST(fault_of(wrong).find("stage 1 of replica 0 reported 1 f32 parameters, expected") != std::string::npos,
             fault_of(wrong));
  harness ints(job);
  ints.start();
  const auto typed = ints.core->on_epoch(worker_epoch{1, 0, 0.5, 1, 50, 0.1, tensor({spans[1].numel}, dtype::i32)},
                                         ints.now);
  BOOST_TEST(fault_of(typed).find("i32 parameters") != std::string::npos, fault_of(typed));
}

BOOST_AUTO_TEST_CASE(losing_every_member_names_the_first_loss) {
  harness h(tiny_job(sync_mode::sync));
  h.start();
  BOOST_TEST(all_of<finish>(h.core->on_member_down(1, std::nullopt, "killed", h.now)).empty());
  BOOST_TEST(h.core->live_members() == 1u);
  const auto end = h.core->on_member_down(0, fault{errc::stage_lost, "x"}, "stage_lost: x", h.now);
  BOOST_TEST(fault_of(end).find("all_workers_lost: every worker died before finishing; the first: worker 1: killed") ==
             0u);
}
