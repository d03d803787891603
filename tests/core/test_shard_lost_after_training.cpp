// Tests for Note [A shard lost after training] (core/job_epochs.cpp), stepped by hand
// (tests/support/job_core_harness.hpp): a shard server lost once members finished
// restarts the job in place naming them, and one lost before any finished names none; a core resumed from the job's end checkpoint admits only its shards, refuses
// members, evaluates the last epoch again from the shards' values, and ends with that
// result without training or waiting for another checkpoint.
#define BOOST_TEST_MODULE shard_lost_after_training
#include <boost/test/unit_test.hpp>

#include "tests/support/job_core_harness.hpp"

using namespace troupe;
using namespace troupe::test::job_core_tests;
using test::all_of;
using test::only;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The tiny job (2 workers, 2 shards, 2 epochs of 1 step) keeping checkpoints.
job_spec checkpointed() {
  job_spec j = tiny_job(sync_mode::sync);
  j.checkpoints.dir = "/checkpoints";
  return j;
}

// Where the tiny job's end checkpoint (step 2) resumes.
resume_point the_end() {
  resume_point r;
  r.step = r.clock = 2;
  r.shards = {"/checkpoints/ckpt-000000000002", {"shard-0.tf", "shard-1.tf"}, 2};
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_shard_lost_after_members_finished_restarts_naming_them) {
  harness over(checkpointed());
  over.train_until_done();
  BOOST_REQUIRE((over.core->phase() == job_phase::finishing));
  BOOST_TEST(only<restart>(over.core->on_shard_down(1, "gone")).finished == (std::vector<std::uint32_t>{0, 1}),
             boost::test_tools::per_element());

  harness one(checkpointed());  // worker 1 finished, worker 0 still trains
  one.start();
  one.step(0, 1, 0);
  one.step(1, 2, 1);
  one.done(1, 2);
  BOOST_TEST(only<restart>(one.core->on_shard_down(0, "gone")).finished == (std::vector<std::uint32_t>{1}),
             boost::test_tools::per_element());

  harness training(checkpointed());
  training.start();
  training.step(0, 1, 0);
  BOOST_TEST(only<restart>(training.core->on_shard_down(1, "gone")).finished.empty());
}

BOOST_AUTO_TEST_CASE(a_core_resumed_from_the_end_evaluates_the_shards_values_and_ends) {
  harness h(checkpointed());
  h.core->resume_from(the_end());
  h.core->restarted_in_place(1);
  h.shard();
  const auto started = all_of<start_shards>(h.shard());  // no member is waited for
  BOOST_REQUIRE(started.size() == 1u);
  BOOST_TEST(started[0].members.workers.empty());
  const auto refused = only<refuse>(h.member());
  BOOST_TEST(has(refused.why.detail, "training is over"), refused.why.detail);

  const auto go = h.core->shards_started(h.now);
  BOOST_TEST(all_of<welcome_member>(go).empty());
  BOOST_TEST(has(only<note>(go).text, "evaluates its end checkpoint 2"), only<note>(go).text);
  BOOST_TEST((h.core->phase() == job_phase::finishing));
  const auto g = only<gather>(go);
  BOOST_TEST(g.with_params);  // the last epoch is evaluated from the restored values
  const auto eval = only<evaluate>(h.answer(g));
  BOOST_TEST(eval.epoch == 1);
  const auto closed = h.core->on_evaluated(eval_reply{1, 0.75, 0.5});
  const auto line = only<epoch_closed>(closed).summary;
  BOOST_TEST(!line.trained);
  BOOST_TEST(line.test_accuracy == 0.75);
  // The end checkpoint is the one resumed from: the result waits for no other.
  const auto end = only<finish>(h.answer(only<gather>(closed)));
  const auto& res = std::get<job_result>(end.outcome);
  BOOST_TEST(res.test_accuracy == 0.75);
  BOOST_TEST(res.resumed_from_step == 2);
  BOOST_TEST(res.samples == 0);
  BOOST_TEST(res.restarts_in_place == 1);
}
